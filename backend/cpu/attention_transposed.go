package cpu

import (
	"math"

	"ferry/backend/cpu/gemm"
)

// Attention with transposed tiles, the path for attention without a bias
// (every DiT and VAE attention). A tile's scores are computed as
// Sᵀ = K·Qᵀ, keys × queries: the keys packed once per head as the A
// operand, the query tile once per tile as B, so the score product packs
// nothing. The GEMM writes Sᵀ straight in the layout of a packed B
// operand (column panels of queries), the softmax runs down its columns
// (colMax, expCols: one query per lane) panel by panel, and the output is
// accumulated transposed too, Oᵀ = Vᵀ·Pᵀ, with the values packed once per
// head as A: neither product packs anything per key tile. Computing
// O = P·V instead packed every probability tile as an A operand, 8% of
// attention's time at head dimension 64 on AVX2; the row-wise path before
// that transposed every probability tile.

// transposedLayout is the tiling every worker's transposedHead shares.
type transposedLayout struct {
	p          *attnProblem
	tp         gemm.TilePacker
	tk         int // keys per tile: a multiple of the A row panel
	cols       int // queries per tile rounded up to whole B panels
	kLen, vLen int // floats of the packed keys, of one key tile's packed values
	qLen       int // floats of one packed query tile
}

func newTransposedLayout(p *attnProblem, tp gemm.TilePacker) transposedLayout {
	mr, nr := tp.RowPanel(), tp.PanelWidth()
	tk := max(mr, attnTileK/mr*mr) // key tiles start on row panel boundaries
	return transposedLayout{
		p: p, tp: tp, tk: tk,
		cols: (attnTileQ + nr - 1) / nr * nr,
		kLen: tp.PackedALen(p.lk, p.d),
		vLen: tp.PackedALen(p.d, tk),
		qLen: tp.PackedLen(attnTileQ, p.d),
	}
}

// transposedHead holds one head's keys, packed as row panels, and its
// values transposed, packed per key tile as row panels, in a buffer from
// packScratchPool.
type transposedHead struct {
	transposedLayout
	buf *[]float32
	k   *gemm.PackedA
	v   []*gemm.PackedA
}

func newTransposedHead(l transposedLayout) *transposedHead {
	tiles := (l.p.lk + l.tk - 1) / l.tk
	return &transposedHead{
		transposedLayout: l,
		buf:              getScratch(&packScratchPool, l.kLen+tiles*l.vLen),
		v:                make([]*gemm.PackedA, tiles),
	}
}

func (th *transposedHead) release() { packScratchPool.Put(th.buf) }

func (th *transposedHead) pack(bh int, run func(n int, fn func(i int))) error {
	p, vbuf := th.p, (*th.buf)[th.kLen:]
	return p.packHead(bh, run, th.tk, func(k []float32, ld int) (err error) {
		th.k, err = th.tp.PackA((*th.buf)[:th.kLen], false, p.lk, p.d, k, ld)
		return err
	}, func(t int, v []float32, ld, nk int) (err error) {
		th.v[t], err = th.tp.PackA(vbuf[t*th.vLen:(t+1)*th.vLen], true, p.d, nk, v, ld)
		return err
	})
}

// tile computes query tile qt of head bh. The operands were packed for
// this call's shapes, so the packed products and views cannot fail; their
// errors are dropped.
func (th *transposedHead) tile(sc *attnScratch, bh, qt int) {
	p := th.p
	b, h := bh/p.heads, bh%p.heads
	q0 := qt * attnTileQ
	mq := min(attnTileQ, p.lq-q0)
	qOff := ((b*p.lq+q0)*p.heads + h) * p.d
	queries, _ := th.tp.PackB(sc.q[:th.qLen], true, mq, p.d, p.q[qOff:], p.heads*p.d)

	nr := th.tp.PanelWidth()
	cols := (mq + nr - 1) / nr * nr // the padding columns score 0 and are never stored
	ot := sc.o[:p.d*cols]           // Oᵀ: d × cols
	clear(ot)
	m, l := sc.m[:cols], sc.l[:cols]
	for i := range m {
		m[i], l[i] = float32(math.Inf(-1)), 0
	}
	for k0 := 0; k0 < p.lk; k0 += th.tk {
		nk := min(th.tk, p.lk-k0)
		sc.keys, _ = th.k.Rows(k0, nk)
		sc.probs, _ = th.tp.SgemmPackedABToB(p.scale, &sc.keys, queries, sc.s) // Sᵀ, nk × mq, as panels
		onlineSoftmaxPanels(sc.s[:nk*cols], ot, nr, m, l, sc.mx[:cols], sc.cor[:cols], sc.sum[:cols])
		_ = th.tp.SgemmPackedAB(1, th.v[k0/th.tk], &sc.probs, 1, ot, cols)
	}
	p.storeLSE(m[:mq], l[:mq], bh, q0)
	p.storeTransposed(ot, cols, l[:mq], qOff)
}

// onlineSoftmaxPanels is onlineSoftmax for transposed tiles written as
// column panels of nr queries: panel j holds the scores of queries
// [j·nr, (j+1)·nr), key by key, at s[j·nr·keys:], query c's in column
// c%nr. ot is the accumulator transposed, [d, len(m)]; mx, cor and sum
// are scratch of one float per query.
func onlineSoftmaxPanels(s, ot []float32, nr int, m, l, mx, cor, sum []float32) {
	cols := len(m)
	keys := len(s) / cols
	panel := func(j int) []float32 { return s[j*keys : (j+nr)*keys] }
	copy(mx, m)
	for j := 0; j < cols; j += nr {
		colMax(mx[j:j+nr], panel(j))
	}
	masked := false
	for c := range m {
		cor[c] = m[c] - mx[c] // -Inf - finite = -Inf: exp gives 0
		if math.IsInf(float64(mx[c]), -1) {
			cor[c] = 0 // no key seen yet: keep (zero) state, exp(0) = 1
			masked = true
		}
	}
	expShift(cor, 0)
	clear(sum)
	for j := 0; j < cols; j += nr {
		expCols(panel(j), mx[j:j+nr], sum[j:j+nr])
		if masked {
			clearMaskedColumns(panel(j), mx[j:j+nr], sum[j:j+nr])
		}
	}
	rescale := false
	for c := range m {
		l[c] = l[c]*cor[c] + sum[c]
		rescale = rescale || cor[c] != 1
		m[c] = mx[c]
	}
	if rescale {
		for r := 0; r < len(ot); r += cols {
			mulScale(ot[r:r+cols], ot[r:r+cols], cor, 1) // (cor·1)·o: the row-wise o·cor
		}
	}
}

// clearMaskedColumns zeroes the probabilities and sums of the queries
// whose every score so far is -Inf (exp(-Inf - -Inf) is NaN), as the
// row-wise softmax clears their rows.
func clearMaskedColumns(s, mx, sum []float32) {
	cols := len(mx)
	for c, x := range mx {
		if !math.IsInf(float64(x), -1) {
			continue
		}
		sum[c] = 0
		for r := c; r < len(s); r += cols {
			s[r] = 0
		}
	}
}

// storeTransposed divides the accumulated outputs of a query tile, held
// transposed in ot [d, cols], by their sums l and writes them to the
// output rows starting at element qOff.
func (p *attnProblem) storeTransposed(ot []float32, cols int, l []float32, qOff int) {
	ld := p.heads * p.d
	for c, li := range l {
		inv := 1 / li
		row := p.out[qOff+c*ld : qOff+c*ld+p.d]
		for i := range row {
			row[i] = ot[i*cols+c] * inv
		}
	}
}
