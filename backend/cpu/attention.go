package cpu

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// Attention tiles: a worker takes attnTileQ query rows of one (batch, head)
// and streams over the keys attnTileK at a time, keeping a running maximum
// and sum per row (the online softmax of flash attention). Its scratch is a
// score tile [attnTileQ, attnTileK] and an accumulator [attnTileQ, D]:
// 128 KiB + 64 KiB at D = 128, inside L2. 128 query rows rather than 64
// halve the passes over each head's packed keys and values; a sweep
// (BenchmarkAttentionTiles) found 128×256 within noise of the best at
// D = 64 and 128. (Variables only so that tests can shrink them; the packed
// paths round the key tile down to a multiple of the GEMM's panel: its
// column panel row-wise, its row panel, 14 with AVX-512, transposed.)
var (
	attnTileQ = 128
	attnTileK = 256
	// attnHeadsPerWorker is how many (batch, head) pairs per worker make
	// the packed path give each worker whole heads (attentionPacked).
	attnHeadsPerWorker = 2
)

// attnScratch is one worker's memory for one query tile.
type attnScratch struct {
	s            []float32 // scores, then probabilities, of one key tile
	o            []float32 // unnormalised output rows
	m, l         []float32 // running max and sum per row
	mx, cor, sum []float32 // per row: the max after this tile, the rescale factor, the tile's sum
	q            []float32 // the query tile packed (transposed scores)
	// keys and probs are the transposed path's views of one key tile (its
	// packed keys, its probabilities as panels), kept here so that a tile
	// allocates nothing.
	keys  gemm.PackedA
	probs gemm.Packed
}

var attnScratchPool sync.Pool

// getAttnScratch returns scratch for query tiles of rows queries
// (attnTileQ, or more where a path pads it), key tiles of tk, head
// dimension d and a packed query tile of qLen floats.
func getAttnScratch(rows, d, tk, qLen int) *attnScratch {
	sc, _ := attnScratchPool.Get().(*attnScratch)
	if sc == nil || cap(sc.s) < rows*tk || cap(sc.m) < rows {
		sc = &attnScratch{
			s:   make([]float32, rows*tk),
			m:   make([]float32, rows),
			l:   make([]float32, rows),
			mx:  make([]float32, rows),
			cor: make([]float32, rows),
			sum: make([]float32, rows),
		}
	}
	if cap(sc.o) < rows*d {
		sc.o = make([]float32, rows*d)
	}
	if cap(sc.q) < qLen {
		sc.q = make([]float32, qLen)
	}
	return sc
}

// attnProblem holds the operands of one Attention call.
type attnProblem struct {
	q, k, v, out  []float32
	bias          []float32
	lse           []float32 // [B, H, Lq] log-sum-exp per query row (AttentionLSE), or nil
	b, lq, lk     int
	heads, d      int
	scale         float32
	biasB, biasH  int // bias element strides per batch and head (0: shared)
	biasQ         int // per query row (0: one row for all)
	tilesPerQuery int
}

// Attention sets dst = softmax(q·kᵀ·scale + bias)·v per batch and head, with
// q, k, v and dst in [B, L, H, D] layout.
func (be *Backend) Attention(dst, q, k, v, bias *tensor.Tensor, scale float32) error {
	p, err := planAttention(dst, q, k, v, bias, scale)
	if err != nil || len(p.out) == 0 {
		return err
	}
	return be.attention(&p)
}

// attention runs a planned Attention (AttentionLSE's too: with p.lse set
// the tiles also store each query row's log-sum-exp).
func (be *Backend) attention(p *attnProblem) error {
	if p.lk == 0 {
		// Softmax over no keys is undefined, as in PyTorch.
		fillT(be.pool, p.out, float32(math.NaN()))
		fillT(be.pool, p.lse, float32(math.Inf(-1))) // log of an empty sum
		return nil
	}
	if tp, ok := be.tiles.(gemm.TilePacker); ok && p.bias == nil {
		th := newTransposedLayout(p, tp)
		return be.attentionPacked(p, th.cols, th.tk, th.qLen, func() headRunner { return newTransposedHead(th) })
	}
	if pk, ok := be.tiles.(gemm.PanelPacker); ok {
		nr := pk.PanelWidth()
		tk := max(nr, attnTileK/nr*nr) // key tiles start on panel boundaries
		return be.attentionPacked(p, attnTileQ, tk, 0, func() headRunner { return newHeadPack(p, pk, tk) })
	}
	items := p.b * p.heads * p.tilesPerQuery
	mul := plainProducts{g: be.tiles, p: p}
	be.pool.For(items, 1, func(lo, hi int) {
		sc := getAttnScratch(attnTileQ, p.d, attnTileK, 0)
		for it := lo; it < hi; it++ {
			qt := it % p.tilesPerQuery
			bh := it / p.tilesPerQuery
			p.tile(sc, mul, bh/p.heads, bh%p.heads, qt, attnTileK)
		}
		attnScratchPool.Put(sc)
	})
	return nil
}

// headRunner holds one head's keys and values packed for the tile GEMM
// and computes the head's query tiles from them.
type headRunner interface {
	// pack packs the keys and values of head bh (batch bh/H, head bh%H);
	// run runs its two pieces, the keys and the values.
	pack(bh int, run func(n int, fn func(i int))) error
	// tile computes query tile qt of head bh, packed last.
	tile(sc *attnScratch, bh, qt int)
	// release returns the packing buffer.
	release()
}

// attentionPacked multiplies by keys and values packed once per (batch,
// head) (newRunner makes the holder of one head's packing; tk is its key
// tile, rows its query tile, padded, and qLen the packed query tile it
// needs). Packing per query tile instead moved every key and value once
// per tile, costing about as much as the products themselves.
//
// With attnHeadsPerWorker heads per worker, each worker packs and runs whole
// heads on its own: no barrier between heads, and the packing runs on every
// core at once. With fewer, the heads run one at a time: two workers pack
// the keys and the values, then the pool shares the head's query tiles.
func (be *Backend) attentionPacked(p *attnProblem, rows, tk, qLen int, newRunner func() headRunner) error {
	heads := p.b * p.heads
	if heads >= attnHeadsPerWorker*be.pool.Workers() {
		errs := make([]error, heads)
		be.pool.For(heads, 1, func(lo, hi int) {
			hr := newRunner()
			defer hr.release()
			sc := getAttnScratch(rows, p.d, tk, qLen)
			defer attnScratchPool.Put(sc)
			for bh := lo; bh < hi; bh++ {
				if errs[bh] = hr.pack(bh, sequential); errs[bh] != nil {
					return
				}
				for qt := range p.tilesPerQuery {
					hr.tile(sc, bh, qt)
				}
			}
		})
		return errors.Join(errs...)
	}
	hr := newRunner()
	defer hr.release()
	for bh := range heads {
		if err := hr.pack(bh, be.pool.Run); err != nil {
			return err
		}
		be.pool.For(p.tilesPerQuery, 1, func(lo, hi int) {
			sc := getAttnScratch(rows, p.d, tk, qLen)
			for qt := lo; qt < hi; qt++ {
				hr.tile(sc, bh, qt)
			}
			attnScratchPool.Put(sc)
		})
	}
	return nil
}

// sequential runs fn(0), ..., fn(n-1) on the calling goroutine, in the
// shape of parallel.Pool.Run.
func sequential(n int, fn func(i int)) {
	for i := range n {
		fn(i)
	}
}

// headPack holds one head's keys and values packed into column panels,
// in a buffer from packScratchPool: the scores are computed row by row,
// S = Q·Kᵀ (the path for attention with a bias).
type headPack struct {
	p          *attnProblem
	pk         gemm.PanelPacker
	buf        *[]float32
	kLen, vLen int
	mul        packedProducts
}

func newHeadPack(p *attnProblem, pk gemm.PanelPacker, tk int) *headPack {
	tiles := (p.lk + tk - 1) / tk
	hp := &headPack{p: p, pk: pk, kLen: pk.PackedLen(p.lk, p.d), vLen: pk.PackedLen(p.d, tk)}
	hp.buf = getScratch(&packScratchPool, hp.kLen+tiles*hp.vLen)
	hp.mul = packedProducts{pk: pk, p: p, tk: tk, v: make([]*gemm.Packed, tiles)}
	return hp
}

func (hp *headPack) release() { packScratchPool.Put(hp.buf) }

func (hp *headPack) tile(sc *attnScratch, bh, qt int) {
	hp.p.tile(sc, hp.mul, bh/hp.p.heads, bh%hp.p.heads, qt, hp.mul.tk)
}

func (hp *headPack) pack(bh int, run func(n int, fn func(i int))) error {
	m, p, vbuf := &hp.mul, hp.p, (*hp.buf)[hp.kLen:]
	return p.packHead(bh, run, m.tk, func(k []float32, ld int) (err error) {
		m.k, err = hp.pk.PackB((*hp.buf)[:hp.kLen], true, p.lk, p.d, k, ld)
		return err
	}, func(t int, v []float32, ld, nk int) (err error) {
		m.v[t], err = hp.pk.PackB(vbuf[t*hp.vLen:(t+1)*hp.vLen], false, p.d, nk, v, ld)
		return err
	})
}

// packHead runs the two packing pieces of head bh (batch bh/H, head bh%H)
// on run: packKeys, given the head's keys and their row stride, and
// packValues for each of the head's key tiles of tk, given the tile's
// index, its values, their row stride and its key count.
func (p *attnProblem) packHead(bh int, run func(n int, fn func(i int)), tk int,
	packKeys func(k []float32, ld int) error, packValues func(t int, v []float32, ld, nk int) error) error {
	ld := p.heads * p.d
	off := ((bh/p.heads)*p.lk*p.heads + bh%p.heads) * p.d
	var errK, errV error
	run(2, func(i int) {
		if i == 0 {
			errK = packKeys(p.k[off:], ld)
			return
		}
		for k0 := 0; k0 < p.lk && errV == nil; k0 += tk {
			errV = packValues(k0/tk, p.v[off+k0*ld:], ld, min(tk, p.lk-k0))
		}
	})
	if err := errors.Join(errK, errV); err != nil {
		return fmt.Errorf("cpu: attention: pack keys and values: %w", err)
	}
	return nil
}

var packScratchPool sync.Pool

// tileProducts computes the two products of an attention tile.
type tileProducts interface {
	// scores sets s [mq, nk] = scale · q rows [q0, q0+mq) · keys
	// [k0, k0+nk)ᵀ of batch b, head h.
	scores(s []float32, b, h, q0, mq, k0, nk int)
	// accumulate adds s [mq, nk] · values [k0, k0+nk) to o [mq, D].
	accumulate(o, s []float32, b, h, mq, k0, nk int)
}

// plainProducts multiplies the raw [B, L, H, D] operands (the GEMM packs
// them per call).
type plainProducts struct {
	g gemm.Impl
	p *attnProblem
}

func (m plainProducts) scores(s []float32, b, h, q0, mq, k0, nk int) {
	p := m.p
	ld := p.heads * p.d
	m.g.Sgemm(false, true, mq, nk, p.d, p.scale, p.q[((b*p.lq+q0)*p.heads+h)*p.d:], ld,
		p.k[((b*p.lk+k0)*p.heads+h)*p.d:], ld, 0, s, nk)
}

func (m plainProducts) accumulate(o, s []float32, b, h, mq, k0, nk int) {
	p := m.p
	m.g.Sgemm(false, false, mq, p.d, nk, 1, s, nk, p.v[((b*p.lk+k0)*p.heads+h)*p.d:], p.heads*p.d, 1, o, p.d)
}

// packedProducts multiplies by one head's keys and values packed once: k
// holds all keys (a column view per key tile), v[t] the values of key
// tile t.
type packedProducts struct {
	pk gemm.Packer
	p  *attnProblem
	tk int // keys per tile
	k  *gemm.Packed
	v  []*gemm.Packed
}

// The packed operands were built for this call's shapes, so SgemmPacked
// and Columns cannot fail here; their errors are dropped.
func (m packedProducts) scores(s []float32, b, h, q0, mq, k0, nk int) {
	p := m.p
	view, _ := m.k.Columns(k0, nk)
	_ = m.pk.SgemmPacked(false, mq, p.scale, p.q[((b*p.lq+q0)*p.heads+h)*p.d:], p.heads*p.d, view, 0, s, nk)
}

func (m packedProducts) accumulate(o, s []float32, b, h, mq, k0, nk int) {
	_ = m.pk.SgemmPacked(false, mq, 1, s, nk, m.v[k0/m.tk], 1, o, m.p.d)
}

func planAttention(dst, q, k, v, bias *tensor.Tensor, scale float32) (attnProblem, error) {
	var p attnProblem
	var err error
	if p.out, err = f32("dst", dst); err != nil {
		return p, err
	}
	if p.q, err = f32("q", q); err != nil {
		return p, err
	}
	if p.k, err = f32("k", k); err != nil {
		return p, err
	}
	if p.v, err = f32("v", v); err != nil {
		return p, err
	}
	if q.Rank() != 4 || k.Rank() != 4 || !tensor.SameShape(k.Shape(), v.Shape()) || !tensor.SameShape(dst.Shape(), q.Shape()) ||
		q.Dim(0) != k.Dim(0) || q.Dim(2) != k.Dim(2) || q.Dim(3) != k.Dim(3) {
		return p, fmt.Errorf("cpu: attention q %v, k %v, v %v, dst %v do not match ([B, L, H, D])", q, k, v, dst)
	}
	p.b, p.lq, p.heads, p.d = q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	p.lk = k.Dim(1)
	p.scale = scale
	p.tilesPerQuery = (p.lq + attnTileQ - 1) / attnTileQ
	if bias == nil {
		return p, nil
	}
	if p.bias, err = f32("bias", bias); err != nil {
		return p, err
	}
	bs := bias.Shape()
	if len(bs) != 4 || (bs[0] != 1 && bs[0] != p.b) || (bs[1] != 1 && bs[1] != p.heads) ||
		(bs[2] != 1 && bs[2] != p.lq) || bs[3] != p.lk {
		return p, fmt.Errorf("cpu: attention bias %v does not broadcast to [%d %d %d %d]", bias, p.b, p.heads, p.lq, p.lk)
	}
	st := strides(bs)
	for i, s := range []*int{&p.biasB, &p.biasH, &p.biasQ} {
		if bs[i] > 1 {
			*s = st[i]
		}
	}
	return p, nil
}

// tile computes query tile qt of batch b, head h, over key tiles of tk.
func (p *attnProblem) tile(sc *attnScratch, mul tileProducts, b, h, qt, tk int) {
	q0 := qt * attnTileQ
	mq := min(attnTileQ, p.lq-q0)
	qOff := ((b*p.lq+q0)*p.heads + h) * p.d

	o := sc.o[:mq*p.d]
	clear(o)
	m, l := sc.m[:mq], sc.l[:mq]
	for i := range m {
		m[i], l[i] = float32(math.Inf(-1)), 0
	}
	for k0 := 0; k0 < p.lk; k0 += tk {
		nk := min(tk, p.lk-k0)
		s := sc.s[:mq*nk]
		mul.scores(s, b, h, q0, mq, k0, nk)
		if p.bias != nil {
			p.addBias(s, b, h, q0, mq, k0, nk)
		}
		onlineSoftmax(s, o, nk, p.d, m, l, sc.mx[:mq], sc.cor[:mq])
		mul.accumulate(o, s, b, h, mq, k0, nk)
	}
	p.storeLSE(m, l, b*p.heads+h, q0)
	p.store(o, l, qOff)
}

// storeLSE writes m + log(l), the log-sum-exp of the scaled scores, for
// the query rows of a tile starting at row q0 of head bh (batch bh/H,
// head bh%H), when the caller asked for it (AttentionLSE).
func (p *attnProblem) storeLSE(m, l []float32, bh, q0 int) {
	if p.lse == nil {
		return
	}
	dst := p.lse[bh*p.lq+q0:][:len(m)]
	for i, mi := range m {
		dst[i] = mi + float32(math.Log(float64(l[i])))
	}
}

// store divides the accumulated output rows o of a query tile by their
// sums l and writes them to the output rows starting at element qOff.
func (p *attnProblem) store(o, l []float32, qOff int) {
	ld := p.heads * p.d
	for i, li := range l {
		row := o[i*p.d : (i+1)*p.d]
		scaleRow(row, 1/li)
		copy(p.out[qOff+i*ld:qOff+i*ld+p.d], row)
	}
}

// addBias adds the bias rows for query rows [q0, q0+mq) and keys
// [k0, k0+nk) to the score tile s.
func (p *attnProblem) addBias(s []float32, b, h, q0, mq, k0, nk int) {
	base := b*p.biasB + h*p.biasH + k0
	for i := range mq {
		addRow(s[i*nk:(i+1)*nk], p.bias[base+(q0+i)*p.biasQ:][:nk])
	}
}

// onlineSoftmax folds one tile of scores s [rows, nk] into the rows'
// running softmax: it replaces the scores by exp(score - max), and where a
// row's max grows it rescales the row's accumulator (o [rows, d]) and sum
// l by exp(old max - new max). m and l hold the running max and sum; mx and
// cor are scratch of one float per row (the rescale factors are computed in
// one vector call).
func onlineSoftmax(s, o []float32, nk, d int, m, l, mx, cor []float32) {
	for i := range m {
		mx[i] = rowMax(s[i*nk:(i+1)*nk], m[i])
		cor[i] = m[i] - mx[i] // -Inf - finite = -Inf: exp gives 0
		if math.IsInf(float64(mx[i]), -1) {
			cor[i] = 0 // no key seen yet: keep (zero) state, exp(0) = 1
		}
	}
	expShift(cor, 0)
	for i := range m {
		row := s[i*nk : (i+1)*nk]
		if math.IsInf(float64(mx[i]), -1) {
			// Every key so far is masked out: nothing to add yet.
			clear(row)
			continue
		}
		sum := expShift(row, mx[i])
		l[i] = l[i]*cor[i] + sum
		if cor[i] != 1 {
			scaleRow(o[i*d:(i+1)*d], cor[i])
		}
		m[i] = mx[i]
	}
}

// Rope rotates adjacent pairs of x [B, L, H, D] by the angles of the F64
// tables cos and sin [L, D/2], evaluating in float64.
func (be *Backend) Rope(dst, x, cos, sin *tensor.Tensor) error {
	d, xs, err := be.unaryArgs(dst, x)
	if err != nil {
		return err
	}
	if err := checkRopeTables(x, cos, sin); err != nil || len(d) == 0 {
		return err
	}
	be.ropeRows(d, xs, x, cos, sin, ropeRow)
	return nil
}

// ropeRows runs row (ropeRow or ropeBackRow) over every position of
// x [B, L, H, D], d and src being its destination and source data, with
// that position's angles from the F64 tables cos and sin [L, D/2].
func (be *Backend) ropeRows(d, src []float32, x, cos, sin *tensor.Tensor, row func(d, x []float32, c, s []float64)) {
	seq, width, half := x.Dim(1), x.Dim(2)*x.Dim(3), x.Dim(3)/2
	c, s := cos.F64(), sin.F64()
	be.forRows(len(d)/width, width, grainStream, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			pos := r % seq
			row(d[r*width:(r+1)*width], src[r*width:(r+1)*width],
				c[pos*half:(pos+1)*half], s[pos*half:(pos+1)*half])
		}
	})
}
