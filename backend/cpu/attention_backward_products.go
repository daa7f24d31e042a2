package cpu

import (
	"fmt"

	"ferry/backend/cpu/gemm"
)

// plainBwd multiplies the raw [B, L, H, D] operands with any tile GEMM
// (which packs them per call): the path when the tile GEMM cannot keep
// packed operands.
type plainBwd struct {
	p          *attnBwdProblem
	g          gemm.Impl
	b, h       int // the head
	kOff, qOff int // first element of the head's keys, of the query tile
	mq         int
	rows       gemm.PackedA // the key tile's view of kA or vA (see scores)
}

func (m *plainBwd) keyTile() int { return attnTileK }
func (m *plainBwd) release()     {}

func (m *plainBwd) packHead(bh int) error {
	p := m.p
	m.b, m.h = bh/p.heads, bh%p.heads
	m.kOff = (m.b*p.lk*p.heads + m.h) * p.d
	return nil
}

func (m *plainBwd) packQueries(q0, mq int) error {
	p := m.p
	m.qOff, m.mq = ((m.b*p.lq+q0)*p.heads+m.h)*p.d, mq
	return nil
}

func (m *plainBwd) ld() int { return m.p.heads * m.p.d }

func (m *plainBwd) scores(s []float32, k0, nk int) {
	p, ld := m.p, m.ld()
	m.g.Sgemm(false, true, nk, m.mq, p.d, p.scale, p.k[m.kOff+k0*ld:], ld, p.q[m.qOff:], ld, 0, s, m.mq)
}

func (m *plainBwd) dprobs(dp []float32, k0, nk int) {
	p, ld := m.p, m.ld()
	m.g.Sgemm(false, true, nk, m.mq, p.d, 1, p.v[m.kOff+k0*ld:], ld, p.dout[m.qOff:], ld, 0, dp, m.mq)
}

func (m *plainBwd) gradV(dv []float32, ldv int, pt []float32, nk int, beta float32) {
	p := m.p
	m.g.Sgemm(false, false, nk, p.d, m.mq, 1, pt, m.mq, p.dout[m.qOff:], m.ld(), beta, dv, ldv)
}

func (m *plainBwd) gradK(dk []float32, ldk int, dst []float32, nk int, beta float32) {
	p := m.p
	m.g.Sgemm(false, false, nk, p.d, m.mq, p.scale, dst, m.mq, p.q[m.qOff:], m.ld(), beta, dk, ldk)
}

func (m *plainBwd) gradQ(dq []float32, ldq int, dst []float32, k0, nk int, beta float32) {
	p, ld := m.p, m.ld()
	m.g.Sgemm(true, false, m.mq, p.d, nk, p.scale, dst, m.mq, p.k[m.kOff+k0*ld:], ld, beta, dq, ldq)
}

// packedBwdLayout is the packing every worker's packedBwd shares.
type packedBwdLayout struct {
	p           *attnBwdProblem
	tp          gemm.TilePacker
	tk          int // keys per tile: a multiple of the A row panel
	aLen        int // floats of the keys (or values) packed as A
	kbLen       int // floats of one key tile packed as B
	qtLen, qLen int // floats of a query tile packed as B transposed (k = D), as is (k = rows)
}

func newPackedBwdLayout(p *attnBwdProblem, tp gemm.TilePacker) packedBwdLayout {
	mr := tp.RowPanel()
	tk := max(mr, attnTileK/mr*mr) // key tiles start on row panel boundaries, as the forward's
	return packedBwdLayout{
		p: p, tp: tp, tk: tk,
		aLen:  tp.PackedALen(p.lk, p.d),
		kbLen: tp.PackedLen(p.d, tk),
		qtLen: tp.PackedLen(attnTileQ, p.d),
		qLen:  tp.PackedLen(p.d, attnTileQ),
	}
}

// packedBwd holds one head's keys and values packed as A (row panels,
// for Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ) and its keys per key tile as B (for dQ),
// and one query tile's queries and output gradients packed as B both
// ways: transposed (k = D) for Sᵀ and dPᵀ, as they are (k = queries) for
// dK and dV; all in one buffer from bwdHeadPool.
type packedBwd struct {
	packedBwdLayout
	buf        *[]float32
	kA, vA     *gemm.PackedA
	kB         []*gemm.Packed
	qT, q      *gemm.Packed
	doT, do    *gemm.Packed
	b, h       int // the head
	kOff, qOff int // first element of the head's keys, of the query tile
	mq         int
	rows       gemm.PackedA // the key tile's view of kA or vA (see scores)
}

func newPackedBwd(l packedBwdLayout) *packedBwd {
	tiles := (l.p.lk + l.tk - 1) / l.tk
	n := 2*l.aLen + tiles*l.kbLen + 2*l.qtLen + 2*l.qLen
	return &packedBwd{packedBwdLayout: l, buf: getScratch(&bwdHeadPool, n), kB: make([]*gemm.Packed, tiles)}
}

func (m *packedBwd) keyTile() int { return m.tk }
func (m *packedBwd) release()     { bwdHeadPool.Put(m.buf) }

func (m *packedBwd) packHead(bh int) (err error) {
	p, ld := m.p, m.p.heads*m.p.d
	buf := *m.buf
	m.b, m.h = bh/p.heads, bh%p.heads
	m.kOff = (m.b*p.lk*p.heads + m.h) * p.d
	if m.kA, err = m.tp.PackA(buf[:m.aLen], false, p.lk, p.d, p.k[m.kOff:], ld); err != nil {
		return fmt.Errorf("cpu: attention backward: pack keys: %w", err)
	}
	if m.vA, err = m.tp.PackA(buf[m.aLen:2*m.aLen], false, p.lk, p.d, p.v[m.kOff:], ld); err != nil {
		return fmt.Errorf("cpu: attention backward: pack values: %w", err)
	}
	kb := buf[2*m.aLen:]
	for t := range m.kB {
		k0 := t * m.tk
		if m.kB[t], err = m.tp.PackB(kb[t*m.kbLen:(t+1)*m.kbLen], false, p.d, min(m.tk, p.lk-k0), p.k[m.kOff+k0*ld:], ld); err != nil {
			return fmt.Errorf("cpu: attention backward: pack key tile: %w", err)
		}
	}
	return nil
}

func (m *packedBwd) packQueries(q0, mq int) (err error) {
	p, ld := m.p, m.p.heads*m.p.d
	m.qOff, m.mq = ((m.b*p.lq+q0)*p.heads+m.h)*p.d, mq
	buf := (*m.buf)[2*m.aLen+len(m.kB)*m.kbLen:]
	qt, q := buf[:m.qtLen], buf[m.qtLen:m.qtLen+m.qLen]
	buf = buf[m.qtLen+m.qLen:]
	doT, do := buf[:m.qtLen], buf[m.qtLen:m.qtLen+m.qLen]
	pack := func(dst []float32, trans bool, src []float32) (*gemm.Packed, error) {
		if trans {
			return m.tp.PackB(dst, true, mq, p.d, src[m.qOff:], ld)
		}
		return m.tp.PackB(dst, false, p.d, mq, src[m.qOff:], ld)
	}
	if m.qT, err = pack(qt, true, p.q); err == nil {
		if m.q, err = pack(q, false, p.q); err == nil {
			if m.doT, err = pack(doT, true, p.dout); err == nil {
				m.do, err = pack(do, false, p.dout)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("cpu: attention backward: pack query tile: %w", err)
	}
	return nil
}

// The packed operands were built for this call's shapes, so the packed
// products and row views cannot fail here; their errors are dropped. The
// key tile's views go in m.rows, not a fresh value per tile.
func (m *packedBwd) scores(s []float32, k0, nk int) {
	m.rows, _ = m.kA.Rows(k0, nk)
	_ = m.tp.SgemmPackedAB(m.p.scale, &m.rows, m.qT, 0, s, m.mq)
}

func (m *packedBwd) dprobs(dp []float32, k0, nk int) {
	m.rows, _ = m.vA.Rows(k0, nk)
	_ = m.tp.SgemmPackedAB(1, &m.rows, m.doT, 0, dp, m.mq)
}

func (m *packedBwd) gradV(dv []float32, ldv int, pt []float32, nk int, beta float32) {
	_ = m.tp.SgemmPacked(false, nk, 1, pt, m.mq, m.do, beta, dv, ldv)
}

func (m *packedBwd) gradK(dk []float32, ldk int, dst []float32, nk int, beta float32) {
	_ = m.tp.SgemmPacked(false, nk, m.p.scale, dst, m.mq, m.q, beta, dk, ldk)
}

func (m *packedBwd) gradQ(dq []float32, ldq int, dst []float32, k0, nk int, beta float32) {
	_ = m.tp.SgemmPacked(true, m.mq, m.p.scale, dst, m.mq, m.kB[k0/m.tk], beta, dq, ldq)
}
