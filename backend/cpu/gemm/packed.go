package gemm

import "fmt"

// Packer is an Impl that can pack a B operand once and reuse it across
// products: the executor packs Linear weights when it moves them to the
// device, then every call skips the transposing copy.
type Packer interface {
	Impl
	// PackedLen is the number of float32s PackB writes for op(B) of
	// k×n (for memory accounting: 4·PackedLen bytes).
	PackedLen(n, k int) int
	// PackB packs op(B) (k×n; transB: b holds Bᵀ, n×k, as PyTorch stores
	// weights) into dst, which must hold PackedLen(n, k) floats; a nil
	// dst is allocated.
	PackB(dst []float32, transB bool, n, k int, b []float32, ldb int) (*Packed, error)
	// SgemmPacked computes C = alpha·op(A)·B + beta·C (+ B's bias, see
	// Packed.WithBias) with B packed by this Packer; m is the row count of
	// C.
	SgemmPacked(transA bool, m int, alpha float32, a []float32, lda int, b *Packed, beta float32, c []float32, ldc int) error
}

// Packed is a B operand (k×n) in a Go kernel's panel layout: column panels
// of nr, each k steps of nr floats, the last panel zero-padded. It takes
// 4·k·roundup(n, nr) bytes: the size of B itself when nr divides n (all
// DiT widths: nr is 32 or 16).
type Packed struct {
	n, k   int
	nr     int
	kernel string
	data   []float32
	bias   []float32 // n column biases (WithBias), or nil
}

// N is the column count of op(B) (the output width of a Linear).
func (p *Packed) N() int { return p.n }

// K is the row count of op(B) (the inner dimension).
func (p *Packed) K() int { return p.k }

// Bytes is the memory the packed data takes.
func (p *Packed) Bytes() int64 { return 4 * int64(len(p.data)) }

// PackedLen is the number of float32s a packed k×n operand takes.
func (g *Go) PackedLen(n, k int) int { return roundUp(max(n, 0), g.kern.nr) * max(k, 0) }

// PackB packs op(B) for SgemmPacked (see Packer). Packing is split across
// the pool.
func (g *Go) PackB(dst []float32, transB bool, n, k int, b []float32, ldb int) (*Packed, error) {
	if err := Check(false, transB, 0, n, k, nil, max(1, k), b, ldb, nil, max(1, n)); err != nil {
		return nil, fmt.Errorf("gemm: pack B: %w", err)
	}
	need := g.PackedLen(n, k)
	if dst == nil {
		dst = make([]float32, need)
	}
	if len(dst) < need {
		return nil, fmt.Errorf("gemm: pack B: %d×%d needs %d floats, dst has %d", k, n, need, len(dst))
	}
	pk := &Packed{n: n, k: k, nr: g.kern.nr, kernel: g.kern.name, data: dst[:need]}
	if n == 0 || k == 0 {
		return pk, nil
	}
	panels := ceilDiv(n, g.kern.nr)
	g.pool.For(panels, 1, func(q0, q1 int) {
		g.kern.packB(pk.data, b, ldb, transB, 0, n, 0, k, q0, q1)
	})
	return pk, nil
}

// SgemmPacked computes C = alpha·op(A)·B + beta·C with B from PackB, plus
// B's bias (WithBias) in every row.
func (g *Go) SgemmPacked(transA bool, m int, alpha float32, a []float32, lda int, b *Packed, beta float32, c []float32, ldc int) error {
	if b == nil {
		return fmt.Errorf("gemm: packed product with nil B")
	}
	if b.nr != g.kern.nr {
		return fmt.Errorf("gemm: B packed for kernel %s (nr=%d), this GEMM runs %s (nr=%d)",
			b.kernel, b.nr, g.kern.name, g.kern.nr)
	}
	ar, ac := m, b.k
	if transA {
		ar, ac = b.k, m
	}
	if m < 0 {
		return fmt.Errorf("gemm: packed product with m=%d", m)
	}
	if err := checkMatrix("A", ar, ac, len(a), lda); err != nil {
		return err
	}
	if err := checkMatrix("C", m, b.n, len(c), ldc); err != nil {
		return err
	}
	g.gemm(problem{
		transA: transA, m: m, n: b.n, k: b.k, alpha: alpha, a: a, lda: lda,
		packed: b, beta: beta, c: c, ldc: ldc,
	})
	return nil
}

// PackedView wraps data, packed by this GEMM's PackB for an op(B) of k×n
// (the executor packs weights into device memory and binds views).
func (g *Go) PackedView(data []float32, n, k int) (*Packed, error) {
	if n < 0 || k < 0 || len(data) != g.PackedLen(n, k) {
		return nil, fmt.Errorf("gemm: %d packed floats for a %d×%d operand, want %d", len(data), k, n, g.PackedLen(max(n, 0), max(k, 0)))
	}
	return &Packed{n: n, k: k, nr: g.kern.nr, kernel: g.kern.name, data: data}, nil
}

// NR is the panel width: Columns views must start at a multiple of it.
func (p *Packed) NR() int { return p.nr }

// Columns returns columns [j0, j0+n) of p as a Packed sharing p's data (no
// copy): attention packs a head's keys once and multiplies each key tile
// through such a view. j0 must be a multiple of NR().
func (p *Packed) Columns(j0, n int) (*Packed, error) {
	if j0 < 0 || n < 0 || j0+n > p.n || j0%p.nr != 0 {
		return nil, fmt.Errorf("gemm: columns [%d, %d) of a packed operand with %d columns in panels of %d", j0, j0+n, p.n, p.nr)
	}
	panels := ceilDiv(n, p.nr)
	start := j0 / p.nr * p.k * p.nr
	c := &Packed{n: n, k: p.k, nr: p.nr, kernel: p.kernel, data: p.data[start : start+panels*p.k*p.nr]}
	if p.bias != nil {
		c.bias = p.bias[j0 : j0+n]
	}
	return c, nil
}

// WithBias returns p (sharing its data) with a bias per column, which
// SgemmPacked adds to every row of C as it writes the first K block: a
// Linear's bias without a pass of its own over C. alpha does not scale it;
// it is added in float32 to alpha·A·B + beta·C of that block. A nil bias
// on p without one returns p.
func (p *Packed) WithBias(bias []float32) (*Packed, error) {
	if bias == nil && p.bias == nil {
		return p, nil
	}
	if bias != nil && len(bias) != p.n {
		return nil, fmt.Errorf("gemm: %d biases for a packed operand of %d columns", len(bias), p.n)
	}
	c := *p
	c.bias = bias
	return &c, nil
}

// PanelPacker is a Packer whose packed operands can be cut into column
// views (Packed.Columns) at multiples of PanelWidth.
type PanelPacker interface {
	Packer
	// PanelWidth is the column count of one packed panel.
	PanelWidth() int
	// Layout names the layout PackB writes (kernel and panel width): a
	// weight packed under another name cannot be read by this GEMM.
	Layout() string
	// PackedView wraps floats already packed by PackB for a k×n op(B).
	PackedView(data []float32, n, k int) (*Packed, error)
}

// Layout names PackB's layout, e.g. "f32-panels/avx512/32".
func (g *Go) Layout() string { return g.layout }

// PanelWidth is the kernel's panel width nr (32 with AVX-512, 16 else).
func (g *Go) PanelWidth() int { return g.kern.nr }
