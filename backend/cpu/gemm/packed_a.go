package gemm

import "fmt"

// TilePacker is a PanelPacker whose A operands can skip the per-call
// packing: packed once and multiplied as they are (SgemmPackedAB), or
// written into the kernel's panels by the caller (SgemmFilledA), and whose
// products can be written as the packed B operand of a next product
// (SgemmPackedABToB). Attention packs its keys and values once per head as
// A and each query tile once as B, and computes its scores transposed,
// Sᵀ = K·Qᵀ, straight into B panels for Oᵀ = Vᵀ·Pᵀ. Convolutions gather
// their input patches straight into panels.
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
	// goroutine: a product for work already shared out, such as one tile.
	SgemmPackedAB(alpha float32, a *PackedA, b *Packed, beta float32, c []float32, ldc int) error
	// SgemmFilledA computes C = alpha·A·B + beta·C on the calling
	// goroutine for an m×k A that fill writes straight into the GEMM's
	// row panels, one cache block at a time, just before the block is
	// used: convolutions gather input patches this way, never building
	// the patch matrix.
	SgemmFilledA(m, k int, alpha float32, fill AFiller, b *Packed, beta float32, c []float32, ldc int) error
	// SgemmPackedABToB computes C = alpha·A·B on the calling goroutine
	// and writes it into dst (PackedLen(b.N(), a.M()) floats) as the
	// packed B operand of a next product, C (a.M()×b.N()) being that
	// product's op(B): attention's probabilities, computed transposed,
	// are the B operand of Oᵀ = Vᵀ·Pᵀ without a packing copy. The
	// operand comes back by value, for the caller's scratch (it is made
	// once per key tile).
	SgemmPackedABToB(alpha float32, a *PackedA, b *Packed, dst []float32) (Packed, error)
}

// AFiller writes rows [i0, i0+rows) and K steps [p0, p0+steps) of an A
// operand into dst as row panels: panel q (rows i0+q·RowPanel…, the last
// one short) at q·RowPanel·steps, each steps steps of its row count. i0
// is a multiple of RowPanel.
type AFiller func(dst []float32, i0, rows, p0, steps int)

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
// copy), by value so that a caller taking views tile by tile can keep
// them in its own scratch instead of allocating one each. i0 must be a
// multiple of the row panel, and the view must end on a panel boundary or
// at p's last row, since only the last panel may be short.
func (p *PackedA) Rows(i0, m int) (PackedA, error) {
	end := i0 + m
	if i0 < 0 || m < 0 || end > p.m || i0%p.mr != 0 || (end%p.mr != 0 && end != p.m) {
		return PackedA{}, fmt.Errorf("gemm: rows [%d, %d) of a packed operand with %d rows in panels of %d", i0, end, p.m, p.mr)
	}
	return PackedA{m: m, k: p.k, mr: p.mr, kernel: p.kernel, data: p.data[i0*p.k : end*p.k]}, nil
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

// SgemmFilledA computes C = alpha·A·B + beta·C with A written block by
// block by fill and B packed by this GEMM (see TilePacker).
func (g *Go) SgemmFilledA(m, k int, alpha float32, fill AFiller, b *Packed, beta float32, c []float32, ldc int) error {
	kn := g.kern
	switch {
	case fill == nil || b == nil:
		return fmt.Errorf("gemm: filled product with a nil operand")
	case b.nr != kn.nr:
		return fmt.Errorf("gemm: B packed for kernel %s, this GEMM runs %s", b.kernel, kn.name)
	case b.bias != nil:
		return errNoBias
	case m < 0 || k != b.k:
		return fmt.Errorf("gemm: filled product of %d×%d by %d×%d", m, k, b.k, b.n)
	}
	if err := checkMatrix("C", m, b.n, len(c), ldc); err != nil {
		return err
	}
	if m == 0 || b.n == 0 {
		return nil
	}
	if k == 0 || alpha == 0 {
		scaleC(m, b.n, beta, c, ldc)
		return nil
	}
	kc := balancedBlock(k, kn.kc)
	ws := g.acquire(1, kn.mr*kn.nr, min(kn.mc, roundUp(m, kn.mr))*kc, 0, 0)
	defer g.release(ws)
	w := &ws.w[0]
	g.blocked(m, kc, alpha, b, beta, c, ldc, kn.nr, w.scratch, func(ic, mcb, pc, steps int) ([]float32, int, int) {
		fill(w.a[:mcb*steps], ic, mcb, pc, steps)
		return w.a, steps, 0 // the block alone, as the panels of one block
	})
	return nil
}

// blocked computes C = alpha·A·B + beta·C register tile by register tile
// on the calling goroutine, kc steps of K at a time (a step range of a
// panel is a contiguous piece of it) and mc rows of A swept over each B
// panel. block readies rows [ic, ic+mcb) for steps [pc, pc+steps) and says
// where they are: the row panel at row i (of rows rows) starts at
// a[(i-ic)·perRow + first·rows]. C's element (i, j) is at
// c[i·ldc + j/nr·cPanel + j%nr]: cPanel is nr for a row-major C, and the
// floats of one column panel for a C written as panels.
func (g *Go) blocked(m, kc int, alpha float32, b *Packed, beta float32, c []float32, ldc, cPanel int, scratch []float32,
	block func(ic, mcb, pc, steps int) (a []float32, perRow, first int)) {
	kn, k := g.kern, b.k
	for pc := 0; pc < k; pc += kc {
		steps := min(kc, k-pc)
		bet := beta
		if pc > 0 {
			bet = 1 // later K blocks accumulate onto the first
		}
		for ic := 0; ic < m; ic += kn.mc {
			mcb := min(kn.mc, m-ic)
			a, perRow, first := block(ic, mcb, pc, steps)
			for j := 0; j < b.n; j += kn.nr {
				cols := min(kn.nr, b.n-j)
				bp := b.data[j*k+pc*kn.nr:]
				for i := ic; i < ic+mcb; i += kn.mr {
					rows := min(kn.mr, ic+mcb-i)
					kn.tile(rows, cols, steps, a[(i-ic)*perRow+first*rows:], bp, c[i*ldc+j/kn.nr*cPanel:], ldc, alpha, bet, scratch)
				}
			}
		}
	}
}

// SgemmPackedAB computes C = alpha·A·B + beta·C with both operands packed
// by this GEMM (see TilePacker), blocked as the driver blocks its own
// products.
func (g *Go) SgemmPackedAB(alpha float32, a *PackedA, b *Packed, beta float32, c []float32, ldc int) error {
	kn := g.kern
	if err := g.checkPackedAB(a, b); err != nil {
		return err
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
	k := a.k
	g.blocked(a.m, balancedBlock(k, kn.kc), alpha, b, beta, c, ldc, kn.nr, ws.w[0].scratch, a.block)
	return nil
}

// checkPackedAB says whether a and b were packed for this GEMM's kernel
// and can be multiplied.
func (g *Go) checkPackedAB(a *PackedA, b *Packed) error {
	kn := g.kern
	switch {
	case a == nil || b == nil:
		return fmt.Errorf("gemm: packed product with a nil operand")
	case a.mr != kn.mr || b.nr != kn.nr:
		return fmt.Errorf("gemm: operands packed for kernels %s and %s, this GEMM runs %s", a.kernel, b.kernel, kn.name)
	case a.k != b.k:
		return fmt.Errorf("gemm: packed product of %d×%d by %d×%d", a.m, a.k, b.k, b.n)
	case b.bias != nil:
		return errNoBias
	}
	return nil
}

// errNoBias refuses a biased B (Packed.WithBias) where only SgemmPacked
// adds the bias.
var errNoBias = fmt.Errorf("gemm: this product adds no bias: multiply a B without one (WithBias is for SgemmPacked)")

// block is blocked's view of a packed A: every panel holds all k steps.
func (p *PackedA) block(ic, _, pc, _ int) ([]float32, int, int) { return p.data[ic*p.k:], p.k, pc }

// SgemmPackedABToB computes C = alpha·A·B into dst as a packed B operand
// (see TilePacker). Its padding columns, past b.N(), are A times B's
// padding: zero, as PackB pads.
func (g *Go) SgemmPackedABToB(alpha float32, a *PackedA, b *Packed, dst []float32) (Packed, error) {
	kn := g.kern
	if err := g.checkPackedAB(a, b); err != nil {
		return Packed{}, err
	}
	need := g.PackedLen(b.n, a.m)
	if len(dst) < need {
		return Packed{}, fmt.Errorf("gemm: packed product: %d×%d needs %d floats, dst has %d", a.m, b.n, need, len(dst))
	}
	c := Packed{n: b.n, k: a.m, nr: kn.nr, kernel: kn.name, data: dst[:need]}
	if need == 0 {
		return c, nil
	}
	if a.k == 0 || alpha == 0 {
		clear(c.data)
		return c, nil
	}
	ws := g.acquire(1, kn.mr*kn.nr, 0, 0, 0)
	defer g.release(ws)
	padded := *b // every panel full width, so the padding columns are written too
	padded.n = roundUp(b.n, kn.nr)
	g.blocked(a.m, balancedBlock(a.k, kn.kc), alpha, &padded, 0, c.data, kn.nr, a.m*kn.nr, ws.w[0].scratch, a.block)
	return c, nil
}
