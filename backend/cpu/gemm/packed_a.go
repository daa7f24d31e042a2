package gemm

import "fmt"

// TilePacker is a PanelPacker that can also pack an A operand once and
// multiply two packed operands with no packing at all. Attention uses it to
// compute its scores transposed, Sᵀ = K·Qᵀ: the keys are packed once per
// head as A and each query tile once as B, and the probabilities come out
// with the queries contiguous, which is the order the next product
// (P·V, P read transposed) packs with plain copies.
type TilePacker interface {
	PanelPacker
	// RowPanel is the row count of one packed A panel: Rows views must
	// start at a multiple of it.
	RowPanel() int
	// PackedALen is the number of float32s PackA writes for an m×k op(A).
	PackedALen(m, k int) int
	// PackA packs op(A) (m×k; transA: a holds Aᵀ, k×m) into dst, which
	// must hold PackedALen(m, k) floats; a nil dst is allocated.
	PackA(dst []float32, transA bool, m, k int, a []float32, lda int) (*PackedA, error)
	// SgemmPackedAB computes C = alpha·A·B + beta·C on the calling
	// goroutine, register tile by register tile. It is meant for tiles:
	// with no cache blocking it suits a K of a few hundred.
	SgemmPackedAB(alpha float32, a *PackedA, b *Packed, beta float32, c []float32, ldc int) error
}

// PackedA is an A operand (m×k) in a Go kernel's row panels: panel q holds
// rows [q·mr, min(m, (q+1)·mr)) as k steps of its row count, the layout
// packA writes for one block (the last panel is not padded).
type PackedA struct {
	m, k   int
	mr     int
	kernel string
	data   []float32
}

// M is the row count of op(A).
func (p *PackedA) M() int { return p.m }

// K is the column count of op(A) (the inner dimension).
func (p *PackedA) K() int { return p.k }

// Rows returns rows [i0, i0+m) of p as a PackedA sharing p's data (no
// copy). i0 must be a multiple of the row panel, and the view must end on
// a panel boundary or at p's last row, since only the last panel may be
// short.
func (p *PackedA) Rows(i0, m int) (*PackedA, error) {
	end := i0 + m
	if i0 < 0 || m < 0 || end > p.m || i0%p.mr != 0 || (end%p.mr != 0 && end != p.m) {
		return nil, fmt.Errorf("gemm: rows [%d, %d) of a packed operand with %d rows in panels of %d", i0, end, p.m, p.mr)
	}
	return &PackedA{m: m, k: p.k, mr: p.mr, kernel: p.kernel, data: p.data[i0*p.k : end*p.k]}, nil
}

// RowPanel is the kernel's row panel mr (14 with AVX-512).
func (g *Go) RowPanel() int { return g.kern.mr }

// PackedALen is m·k: row panels are not padded.
func (g *Go) PackedALen(m, k int) int { return max(m, 0) * max(k, 0) }

// PackA packs op(A) for SgemmPackedAB (see TilePacker), on the calling
// goroutine.
func (g *Go) PackA(dst []float32, transA bool, m, k int, a []float32, lda int) (*PackedA, error) {
	if err := Check(transA, false, m, 0, k, a, lda, nil, 1, nil, 1); err != nil {
		return nil, fmt.Errorf("gemm: pack A: %w", err)
	}
	need := g.PackedALen(m, k)
	if dst == nil {
		dst = make([]float32, need)
	}
	if len(dst) < need {
		return nil, fmt.Errorf("gemm: pack A: %d×%d needs %d floats, dst has %d", m, k, need, len(dst))
	}
	pa := &PackedA{m: m, k: k, mr: g.kern.mr, kernel: g.kern.name, data: dst[:need]}
	if need > 0 {
		g.kern.packA(pa.data, a, lda, transA, 0, m, 0, k)
	}
	return pa, nil
}

// SgemmPackedAB computes C = alpha·A·B + beta·C with both operands packed
// by this GEMM (see TilePacker). Each B panel stays in L1 while every A
// panel passes over it.
func (g *Go) SgemmPackedAB(alpha float32, a *PackedA, b *Packed, beta float32, c []float32, ldc int) error {
	kn := g.kern
	switch {
	case a == nil || b == nil:
		return fmt.Errorf("gemm: packed product with a nil operand")
	case a.mr != kn.mr || b.nr != kn.nr:
		return fmt.Errorf("gemm: operands packed for kernels %s and %s, this GEMM runs %s", a.kernel, b.kernel, kn.name)
	case a.k != b.k:
		return fmt.Errorf("gemm: packed product of %d×%d by %d×%d", a.m, a.k, b.k, b.n)
	}
	if err := checkMatrix("C", a.m, b.n, len(c), ldc); err != nil {
		return err
	}
	if a.m == 0 || b.n == 0 {
		return nil
	}
	if a.k == 0 || alpha == 0 {
		scaleC(a.m, b.n, beta, c, ldc)
		return nil
	}
	ws := g.acquire(1, kn.mr*kn.nr, 0, 0, 0)
	defer g.release(ws)
	scratch := ws.w[0].scratch
	k := a.k
	for j := 0; j < b.n; j += kn.nr {
		cols := min(kn.nr, b.n-j)
		bp := b.data[j*k : (j+kn.nr)*k]
		for i := 0; i < a.m; i += kn.mr {
			rows := min(kn.mr, a.m-i)
			kn.tile(rows, cols, k, a.data[i*k:], bp, c[i*ldc+j:], ldc, alpha, beta, scratch)
		}
	}
	return nil
}
