package train

import "fmt"

// toyNet is a per-position linear map over channels, pred[b,o,s] =
// Σ_c W[o,c]·x[b,c,s] + bias[o]: small enough to derive its gradients by
// hand, rich enough to exercise the trainer's loop.
type toyNet struct {
	c      int
	w, b   *Param
	x      []float32 // the last Forward's input
	shape  []int
	dw, db []float32
	syncs  int
}

func newToyNet(c int, seed uint64) *toyNet {
	n := &toyNet{c: c, w: NewParam("w", c, c), b: NewParam("b", c)}
	NewRNG(seed).Uniform(n.w.Data, 0.5)
	n.dw, n.db = make([]float32, c*c), make([]float32, c)
	return n
}

func (n *toyNet) Params() []*Param { return []*Param{n.w, n.b} }

func (n *toyNet) Sync() error { n.syncs++; return nil }

func (n *toyNet) Forward(xt []float32, shape []int, _ []float32, _ []float32, _ []int) ([]float32, error) {
	if shape[1] != n.c {
		return nil, fmt.Errorf("toy: %d channels, want %d", shape[1], n.c)
	}
	n.x, n.shape = xt, shape
	s := len(xt) / (shape[0] * n.c)
	pred := make([]float32, len(xt))
	for b := range shape[0] {
		for o := range n.c {
			for p := range s {
				acc := n.b.Data[o]
				for c := range n.c {
					acc += n.w.Data[o*n.c+c] * xt[(b*n.c+c)*s+p]
				}
				pred[(b*n.c+o)*s+p] = acc
			}
		}
	}
	return pred, nil
}

func (n *toyNet) Backward(dpred []float32) error {
	s := len(n.x) / (n.shape[0] * n.c)
	for b := range n.shape[0] {
		for o := range n.c {
			for p := range s {
				d := dpred[(b*n.c+o)*s+p]
				n.db[o] += d
				for c := range n.c {
					n.dw[o*n.c+c] += d * n.x[(b*n.c+c)*s+p]
				}
			}
		}
	}
	return nil
}

func (n *toyNet) TakeGrads(dst [][]float32) error {
	copy(dst[0], n.dw)
	copy(dst[1], n.db)
	clear(n.dw)
	clear(n.db)
	return nil
}

// cycleData yields its batches in turn, an epoch per pass.
type cycleData struct {
	batches []*Batch
	pos     Position
}

func (d *cycleData) Next() (*Batch, error) {
	b := d.batches[d.pos.Index]
	d.pos.Index++
	if d.pos.Index == len(d.batches) {
		d.pos = Position{Epoch: d.pos.Epoch + 1}
	}
	return b, nil
}

func (d *cycleData) Position() Position { return d.pos }

func (d *cycleData) Seek(p Position) error {
	if p.Index < 0 || p.Index >= len(d.batches) {
		return fmt.Errorf("position %v out of range", p)
	}
	d.pos = p
	return nil
}

// toyBatch is a batch of n samples of c channels by s positions with
// values from seed; fixed sets σ and ε too.
func toyBatch(n, c, s int, seed uint64, fixed bool) *Batch {
	rng := NewRNG(seed)
	b := &Batch{Latents: rng.Normals(n * c * s), LatentShape: []int{n, c, 1, 1, s},
		Context: rng.Normals(n * 2 * 3), ContextShape: []int{n, 2, 3}}
	if fixed {
		b.Noise = rng.Normals(n * c * s)
		b.Sigmas = make([]float32, n)
		for i := range b.Sigmas {
			b.Sigmas[i] = float32(rng.Float64())
		}
	}
	return b
}
