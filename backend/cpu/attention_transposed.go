package cpu

import (
	"math"

	"ferry/backend/cpu/gemm"
)

// Attention with transposed score tiles, the path for attention without a
// bias (every DiT and VAE attention). A tile's scores are computed as
// Sᵀ = K·Qᵀ, keys × queries: the keys packed once per head as the A
// operand, the query tile once per tile as B, so the score product packs
// nothing. Sᵀ is then exactly the stored-transposed A operand of the
// second product, O = P·V, which packs it with plain copies of 14 queries
// per key. The row-wise path instead transposed every probability tile,
// and its query tile once per key tile, 13% of attention's time at head
// dimension 64. The softmax runs down the columns (colMax, expCols), one
// query per lane.

// transposedLayout is the tiling every worker's transposedHead shares.
type transposedLayout struct {
	p          *attnProblem
	tp         gemm.TilePacker
	tk         int // keys per tile: a multiple of the A row panel
	kLen, vLen int // floats of the packed keys, of one packed value tile
	qLen       int // floats of one packed query tile
}

func newTransposedLayout(p *attnProblem, tp gemm.TilePacker) transposedLayout {
	mr := tp.RowPanel()
	tk := max(mr, attnTileK/mr*mr) // key tiles start on row panel boundaries
	return transposedLayout{
		p: p, tp: tp, tk: tk,
		kLen: tp.PackedALen(p.lk, p.d),
		vLen: tp.PackedLen(p.d, tk),
		qLen: tp.PackedLen(attnTileQ, p.d),
	}
}

// transposedHead holds one head's keys, packed as row panels, and its
// values, packed per key tile as column panels, in a buffer from
// packScratchPool.
type transposedHead struct {
	transposedLayout
	buf *[]float32
	k   *gemm.PackedA
	v   []*gemm.Packed
}

func newTransposedHead(l transposedLayout) *transposedHead {
	tiles := (l.p.lk + l.tk - 1) / l.tk
	return &transposedHead{
		transposedLayout: l,
		buf:              getScratch(&packScratchPool, l.kLen+tiles*l.vLen),
		v:                make([]*gemm.Packed, tiles),
	}
}

func (th *transposedHead) release() { packScratchPool.Put(th.buf) }

func (th *transposedHead) pack(bh int, run func(n int, fn func(i int))) error {
	p := th.p
	return p.packHead(bh, run, th.tp, (*th.buf)[th.kLen:], th.vLen, th.tk, th.v, func(k []float32, ld int) (err error) {
		th.k, err = th.tp.PackA((*th.buf)[:th.kLen], false, p.lk, p.d, k, ld)
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

	o := sc.o[:mq*p.d]
	clear(o)
	m, l := sc.m[:mq], sc.l[:mq]
	for i := range m {
		m[i], l[i] = float32(math.Inf(-1)), 0
	}
	for k0 := 0; k0 < p.lk; k0 += th.tk {
		nk := min(th.tk, p.lk-k0)
		s := sc.s[:nk*mq] // Sᵀ: nk keys × mq queries
		keys, _ := th.k.Rows(k0, nk)
		_ = th.tp.SgemmPackedAB(p.scale, keys, queries, 0, s, mq)
		onlineSoftmaxColumns(s, o, p.d, m, l, sc.mx[:mq], sc.cor[:mq], sc.sum[:mq])
		_ = th.tp.SgemmPacked(true, mq, 1, s, mq, th.v[k0/th.tk], 1, o, p.d)
	}
	p.storeLSE(m, l, bh, q0)
	p.store(o, l, qOff)
}

// onlineSoftmaxColumns is onlineSoftmax for a transposed tile: s holds
// len(m) columns, the scores of query c in column c, and o the queries'
// accumulator rows [len(m), d]. mx, cor and sum are scratch of one float
// per query.
func onlineSoftmaxColumns(s, o []float32, d int, m, l, mx, cor, sum []float32) {
	copy(mx, m)
	colMax(mx, s)
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
	expCols(s, mx, sum)
	if masked {
		clearMaskedColumns(s, mx, sum)
	}
	for c := range m {
		l[c] = l[c]*cor[c] + sum[c]
		if cor[c] != 1 {
			scaleRow(o[c*d:(c+1)*d], cor[c])
		}
		m[c] = mx[c]
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
