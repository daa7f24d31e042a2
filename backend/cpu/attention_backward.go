package cpu

import (
	"fmt"
	"math"
	"sync"

	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// The backward of attention, as FlashAttention-2 computes it: the forward
// (AttentionLSE) keeps, besides its output O, the log-sum-exp of every
// query row's scaled scores, and the backward recomputes the probabilities
// tile by tile from it, never holding the [Lq, Lk] matrix of a head:
//
//	Dᵢ = Σ dOᵢ ∘ Oᵢ                       (per query row)
//	S = Q·Kᵀ·scale, P = exp(S − lse)
//	dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − D)
//	dQ += dS·K·scale, dK += dSᵀ·Q·scale
//
// Tiles are transposed as in the forward's packed path (attention_transposed.go):
// Sᵀ and dPᵀ are keys × queries, so the per-query lse and D are column
// vectors, the probabilities come out as the A operand Pᵀ of dV += Pᵀ·dO
// and dSᵀ as the A operand of dK += dSᵀ·Q (and, read transposed, of dQ).
//
// Work is split by (batch, head, group of query tiles): an item owns its
// query rows of dQ outright and sums its share of the head's dK and dV.
// With enough heads for every worker a head is one item (group 0) that
// writes dK and dV directly; with fewer, each head's query tiles are split
// into groups, group 0 writing dK and dV and the others partial sums that
// are added in afterwards, in group order (so results do not depend on
// scheduling).

// attnBwdItemsPerWorker is how many items per worker the split into query
// groups aims for (a variable so that tests can force either split).
var attnBwdItemsPerWorker = 3

// attnBwdProblem holds the operands of one AttentionBackward call.
type attnBwdProblem struct {
	q, k, v, out, dout, lse []float32
	dq, dk, dv              []float32
	b, lq, lk, heads, d     int
	scale                   float32
	tilesQ                  int       // query tiles of attnTileQ per head
	groups                  int       // query groups per head
	part                    []float32 // partial dK, dV of groups 1..: [groups-1][B·H][2][Lk·D]
}

// AttentionLSE is Attention without bias that also writes lse [B, H, Lq],
// each query row's log-sum-exp m + log(l) from the online softmax.
func (be *Backend) AttentionLSE(dst, lse, q, k, v *tensor.Tensor, scale float32) error {
	p, err := planAttention(dst, q, k, v, nil, scale)
	if err != nil {
		return err
	}
	if p.lse, err = f32("lse", lse); err != nil {
		return err
	}
	if !tensor.SameShape(lse.Shape(), []int{p.b, p.heads, p.lq}) {
		return fmt.Errorf("cpu: attention lse %v: want [%d %d %d] ([B, H, Lq])", lse, p.b, p.heads, p.lq)
	}
	if len(p.lse) == 0 {
		return nil
	}
	if len(p.out) == 0 {
		// D = 0: every score is an empty dot product, 0, so the sum is Lk
		// (the log of 0 keys being -Inf).
		fillT(be.pool, p.lse, float32(math.Log(float64(p.lk))))
		return nil
	}
	return be.attention(&p)
}

// AttentionBackward sets dq, dk and dv from the output gradient dout and
// what AttentionLSE kept (out, lse). The gradients must not alias the
// inputs.
func (be *Backend) AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse *tensor.Tensor, scale float32) error {
	p, err := planAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, scale)
	if err != nil {
		return err
	}
	if p.lq == 0 || p.lk == 0 || p.d == 0 {
		// No query, or no key: every gradient is an empty sum.
		for _, g := range [][]float32{p.dq, p.dk, p.dv} {
			fillT(be.pool, g, 0)
		}
		return nil
	}
	heads := p.b * p.heads
	p.groups = bwdGroups(heads, p.tilesQ, be.pool.Workers())
	var partBuf *[]float32
	if p.groups > 1 {
		partBuf = getScratch(&bwdPartPool, (p.groups-1)*heads*2*p.lk*p.d)
		defer bwdPartPool.Put(partBuf)
		p.part = *partBuf
	}
	newProducts := func() bwdProducts { return &plainBwd{p: &p, g: be.tiles} }
	if tp, ok := be.tiles.(gemm.TilePacker); ok {
		l := newPackedBwdLayout(&p, tp)
		newProducts = func() bwdProducts { return newPackedBwd(l) }
	}
	items := heads * p.groups
	errs := make([]error, items)
	be.pool.For(items, 1, func(lo, hi int) {
		w := newBwdWorker(&p, newProducts())
		defer w.release()
		for it := lo; it < hi; it++ {
			errs[it] = w.item(it/p.groups, it%p.groups)
		}
	})
	for _, err := range errs {
		if err != nil {
			return err // one line: the other items fail for the same reason
		}
	}
	if p.groups > 1 {
		be.addPartials(&p)
	}
	return nil
}

// bwdGroups is how many groups of query tiles to split each of heads
// heads into, so that workers get about attnBwdItemsPerWorker items each.
func bwdGroups(heads, tilesQ, workers int) int {
	want := attnBwdItemsPerWorker * workers
	return max(1, min(tilesQ, (want+heads-1)/heads))
}

// Scratch of the backward: partial sums, per-head packings, per-worker tiles.
var bwdPartPool, bwdHeadPool, bwdTilePool sync.Pool

func planAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse *tensor.Tensor, scale float32) (attnBwdProblem, error) {
	var p attnBwdProblem
	for _, op := range []struct {
		name string
		t    *tensor.Tensor
		data *[]float32
	}{
		{"dq", dq, &p.dq}, {"dk", dk, &p.dk}, {"dv", dv, &p.dv}, {"dout", dout, &p.dout},
		{"q", q, &p.q}, {"k", k, &p.k}, {"v", v, &p.v}, {"out", out, &p.out}, {"lse", lse, &p.lse},
	} {
		var err error
		if *op.data, err = f32(op.name, op.t); err != nil {
			return p, fmt.Errorf("cpu: attention backward: %w", err)
		}
	}
	if q.Rank() != 4 || k.Rank() != 4 || !tensor.SameShape(k.Shape(), v.Shape()) ||
		q.Dim(0) != k.Dim(0) || q.Dim(2) != k.Dim(2) || q.Dim(3) != k.Dim(3) {
		return p, fmt.Errorf("cpu: attention backward: q %v, k %v, v %v do not match ([B, L, H, D])", q, k, v)
	}
	for _, t := range []*tensor.Tensor{dq, dout, out} {
		if !tensor.SameShape(t.Shape(), q.Shape()) {
			return p, fmt.Errorf("cpu: attention backward: %v does not match q %v", t, q)
		}
	}
	for _, t := range []*tensor.Tensor{dk, dv} {
		if !tensor.SameShape(t.Shape(), k.Shape()) {
			return p, fmt.Errorf("cpu: attention backward: %v does not match k %v", t, k)
		}
	}
	p.b, p.lq, p.heads, p.d, p.lk = q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3), k.Dim(1)
	if !tensor.SameShape(lse.Shape(), []int{p.b, p.heads, p.lq}) {
		return p, fmt.Errorf("cpu: attention backward: lse %v: want [%d %d %d] ([B, H, Lq])", lse, p.b, p.heads, p.lq)
	}
	p.scale = scale
	p.tilesQ = (p.lq + attnTileQ - 1) / attnTileQ
	return p, nil
}

// addPartials adds the partial dK and dV of query groups 1.. to what group
// 0 wrote, group by group in order.
func (be *Backend) addPartials(p *attnBwdProblem) {
	rows := p.b * p.lk * p.heads // rows of D in dk and dv
	be.forRows(rows, p.d, grainStream, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			b, j, h := r/(p.lk*p.heads), r/p.heads%p.lk, r%p.heads
			for g := 1; g < p.groups; g++ {
				dk, dv := p.partial(g, b*p.heads+h)
				addRow(p.dk[r*p.d:(r+1)*p.d], dk[j*p.d:])
				addRow(p.dv[r*p.d:(r+1)*p.d], dv[j*p.d:])
			}
		}
	})
}

// partial returns group g's partial dK and dV of head bh ([Lk, D] each).
func (p *attnBwdProblem) partial(g, bh int) (dk, dv []float32) {
	n := p.lk * p.d
	at := ((g-1)*p.b*p.heads + bh) * 2 * n
	return p.part[at : at+n], p.part[at+n : at+2*n]
}

// bwdProducts computes the five products of a backward tile for the head
// and query tile last packed. Key tiles start at multiples of keyTile().
type bwdProducts interface {
	keyTile() int
	// packHead readies head bh's keys and values; packQueries query rows
	// [q0, q0+mq) of that head (queries and output gradients).
	packHead(bh int) error
	packQueries(q0, mq int) error
	// scores sets s [nk, mq] = scale · K[k0:k0+nk]·Qᵀ; dprobs sets
	// dp [nk, mq] = V[k0:k0+nk]·dOᵀ.
	scores(s []float32, k0, nk int)
	dprobs(dp []float32, k0, nk int)
	// gradV sets dv [nk, D] (row stride ld) = pt·dO + beta·dv, for pt the
	// transposed probabilities [nk, mq]; gradK sets dk = scale·dst·Q +
	// beta·dk for dst the transposed score gradients [nk, mq]; gradQ sets
	// dq [mq, D] = scale·dstᵀ·K[k0:k0+nk] + beta·dq.
	gradV(dv []float32, ld int, pt []float32, nk int, beta float32)
	gradK(dk []float32, ld int, dst []float32, nk int, beta float32)
	gradQ(dq []float32, ld int, dst []float32, k0, nk int, beta float32)
	release()
}

// bwdWorker is one worker's scratch for the backward.
type bwdWorker struct {
	p     *attnBwdProblem
	mul   bwdProducts
	buf   *[]float32
	s, dp []float32 // Pᵀ and dPᵀ (then dSᵀ) of one tile, [tk, tq]
	dd    []float32 // D of the query tile
	sum   []float32 // expCols' sums (unused)
}

func newBwdWorker(p *attnBwdProblem, mul bwdProducts) *bwdWorker {
	tile := mul.keyTile() * attnTileQ
	w := &bwdWorker{p: p, mul: mul, buf: getScratch(&bwdTilePool, 2*tile+2*attnTileQ)}
	b := *w.buf
	w.s, w.dp, w.dd, w.sum = b[:tile], b[tile:2*tile], b[2*tile:2*tile+attnTileQ], b[2*tile+attnTileQ:2*tile+2*attnTileQ]
	return w
}

func (w *bwdWorker) release() {
	bwdTilePool.Put(w.buf)
	w.mul.release()
}

// item computes query group g of head bh: its rows of dQ and its share of
// the head's dK and dV.
func (w *bwdWorker) item(bh, g int) error {
	p := w.p
	if err := w.mul.packHead(bh); err != nil {
		return err
	}
	b, h := bh/p.heads, bh%p.heads
	ld := p.heads * p.d
	kOff := (b*p.lk*p.heads + h) * p.d
	dk, dv, kld := p.dk[kOff:], p.dv[kOff:], ld
	if g > 0 {
		dk, dv = p.partial(g, bh)
		kld = p.d
	}
	t0, t1 := g*p.tilesQ/p.groups, (g+1)*p.tilesQ/p.groups
	tk := w.mul.keyTile()
	for qt := t0; qt < t1; qt++ {
		q0 := qt * attnTileQ
		mq := min(attnTileQ, p.lq-q0)
		qOff := ((b*p.lq+q0)*p.heads + h) * p.d
		if err := w.mul.packQueries(q0, mq); err != nil {
			return err
		}
		dd := w.dd[:mq]
		for i := range dd {
			dd[i] = dot(p.dout[qOff+i*ld:][:p.d], p.out[qOff+i*ld:][:p.d])
		}
		lse := p.lse[bh*p.lq+q0:][:mq]
		beta := float32(1)
		if qt == t0 {
			beta = 0
		}
		for k0 := 0; k0 < p.lk; k0 += tk {
			nk := min(tk, p.lk-k0)
			s, dp := w.s[:nk*mq], w.dp[:nk*mq]
			w.mul.scores(s, k0, nk)
			clear(w.sum[:mq])
			expCols(s, lse, w.sum[:mq]) // Pᵀ = exp(Sᵀ − lse), column by column
			w.mul.gradV(dv[k0*kld:], kld, s, nk, beta)
			w.mul.dprobs(dp, k0, nk)
			scoreGrads(dp, s, dd)
			w.mul.gradK(dk[k0*kld:], kld, dp, nk, beta)
			betaQ := float32(1)
			if k0 == 0 {
				betaQ = 0
			}
			w.mul.gradQ(p.dq[qOff:], ld, dp, k0, nk, betaQ)
		}
	}
	return nil
}

// scoreGrads turns dPᵀ into dSᵀ = Pᵀ ∘ (dPᵀ − D) in place: dp and pt hold
// rows of len(dd) queries, dd the queries' D. (Replaced by assembly on
// amd64 with AVX2 or AVX-512, attention_backward_amd64.go: as scalar Go
// it took 6% of the backward.)
var scoreGrads = scoreGradsGo

func scoreGradsGo(dp, pt, dd []float32) {
	cols := len(dd)
	for r := 0; r+cols <= len(dp); r += cols {
		row, prow := dp[r:r+cols], pt[r:r+cols]
		for c, d := range dd {
			row[c] = prow[c] * (row[c] - d)
		}
	}
}

// dot is the float32 dot product of a and b (len(b) >= len(a)); assembly
// on amd64 with AVX2 or AVX-512.
var dot = dotGo

func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, x := range a {
		s += x * b[i]
	}
	return s
}
