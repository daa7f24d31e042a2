package gemm

import "fmt"

// BF16Packer is a BF16Impl that can pack weights once (GoBF16).
type BF16Packer interface {
	BF16Impl
	// Layout names the layout PackWeights writes (kernel and panel
	// width): a weight packed under another name cannot be read here.
	Layout() string
	// PanelWidth is the number of weight rows (output columns) in one
	// packed panel: PackWeights over whole panels of rows [r0, r0+rows)
	// writes exactly words [r0/PanelWidth·PackedWords(PanelWidth, k), ...)
	// of the whole weight's packing.
	PanelWidth() int
	PackedWords(n, k int) int
	PackWeights(dst []uint32, n, k int, w []uint16, ldw int) (*PackedBF16, error)
	// PackedView wraps words already packed by PackWeights for an n×k
	// weight (the executor packs into device memory and binds views).
	PackedView(data []uint32, n, k int) (*PackedBF16, error)
	GemmBF16Packed(m int, a []float32, lda int, w *PackedBF16, beta float32, c []float32, ldc int) error
}

var _ BF16Packer = (*GoBF16)(nil)

// Layout names PackWeights' layout, e.g. "bf16-panels/avx512bf16/32".
func (g *GoBF16) Layout() string { return g.layout }

// PanelWidth is the bf16 kernel's panel width nr.
func (g *GoBF16) PanelWidth() int { return g.kern.nr }

// PackedView wraps data, packed by this GEMM's kernel, as an n×k weight.
func (g *GoBF16) PackedView(data []uint32, n, k int) (*PackedBF16, error) {
	if n < 0 || k < 0 || len(data) != g.PackedWords(n, k) {
		return nil, fmt.Errorf("gemm: %d packed words for a %d×%d bf16 weight, want %d", len(data), n, k, g.PackedWords(max(n, 0), max(k, 0)))
	}
	return &PackedBF16{n: n, k: k, nr: g.kern.nr, kernel: g.kern.name, data: data}, nil
}

// PackedBF16 is a bf16 weight W (n×k, PyTorch's [out, in]) packed once in
// the bf16 kernel's panel layout, so that products skip the per-call
// 32-bit transpose: column panels of nr output columns, each holding all
// ceil(k/2) pair words of its columns (nr words per pair step), zero past
// n and past k. It takes 4·roundup(n, nr)·ceil(k/2) bytes: W's own 2·n·k
// when nr divides n and k is even (every DiT Linear).
type PackedBF16 struct {
	n, k   int
	nr     int
	kernel string
	data   []uint32
}

// N is the output width (W's row count).
func (p *PackedBF16) N() int { return p.n }

// K is the inner dimension (W's column count).
func (p *PackedBF16) K() int { return p.k }

// Bytes is the memory the packed words take.
func (p *PackedBF16) Bytes() int64 { return 4 * int64(len(p.data)) }

// PackedWords is the number of 32-bit words PackWeights writes for an n×k
// weight.
func (g *GoBF16) PackedWords(n, k int) int {
	return roundUp(max(n, 0), g.kern.nr) * ceilDiv(max(k, 0), 2)
}

// PackWeights packs the n×k bf16 weight w (row stride ldw) into dst, which
// must hold PackedWords(n, k) words (nil: allocated). Panels are packed in
// parallel on the pool.
func (g *GoBF16) PackWeights(dst []uint32, n, k int, w []uint16, ldw int) (*PackedBF16, error) {
	if n < 0 || k < 0 {
		return nil, fmt.Errorf("gemm: pack bf16 weight %d×%d", n, k)
	}
	if err := checkMatrix("W", n, k, len(w), ldw); err != nil {
		return nil, fmt.Errorf("gemm: pack bf16 weight: %w", err)
	}
	need := g.PackedWords(n, k)
	if dst == nil {
		dst = make([]uint32, need)
	}
	if len(dst) < need {
		return nil, fmt.Errorf("gemm: pack bf16 weight %d×%d needs %d words, dst has %d", n, k, need, len(dst))
	}
	pw := &PackedBF16{n: n, k: k, nr: g.kern.nr, kernel: g.kern.name, data: dst[:need]}
	if need == 0 {
		return pw, nil
	}
	if g.wide != nil {
		if err := g.packWide(pw.data, n, k, w, ldw); err != nil {
			return nil, fmt.Errorf("gemm: pack bf16 weight: %w", err)
		}
		return pw, nil
	}
	nr, pairs := g.kern.nr, ceilDiv(k, 2)
	g.pool.For(ceilDiv(n, nr), 1, func(q0, q1 int) {
		for q := q0; q < q1; q++ {
			panel := pw.data[q*pairs*nr : (q+1)*pairs*nr]
			packWeightPanel(panel, nr, w, ldw, k, q*nr, min(nr, n-q*nr), 0, pairs)
		}
	})
	return pw, nil
}

// GemmBF16Packed computes C[m×n] = A·Wᵀ + beta·C with W packed by
// PackWeights (see GemmBF16 for the rounding of A). With no weight block
// to pack, the workers share nothing: one parallel pass, each running
// every K block of its own rectangle of C.
func (g *GoBF16) GemmBF16Packed(m int, a []float32, lda int, w *PackedBF16, beta float32, c []float32, ldc int) error {
	if w == nil {
		return fmt.Errorf("gemm: bf16 product with nil packed weight")
	}
	if w.nr != g.kern.nr || (w.kernel == "expand") != (g.wide != nil) {
		return fmt.Errorf("gemm: weight packed for bf16 kernel %s (nr=%d), this GEMM runs %s (nr=%d)",
			w.kernel, w.nr, g.kern.name, g.kern.nr)
	}
	if m < 0 {
		return fmt.Errorf("gemm: bf16 product with m=%d", m)
	}
	n, k := w.n, w.k
	if err := checkMatrix("A", m, k, len(a), lda); err != nil {
		return fmt.Errorf("gemm: bf16 product: %w", err)
	}
	if err := checkMatrix("C", m, n, len(c), ldc); err != nil {
		return fmt.Errorf("gemm: bf16 product: %w", err)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return nil
	}
	if g.wide != nil {
		if err := g.gemmWidePacked(m, a, lda, w, beta, c, ldc); err != nil {
			return fmt.Errorf("gemm: bf16 product: %w", err)
		}
		return nil
	}
	g.runPacked(bf16Problem{m: m, n: n, k: k, a: a, lda: lda, beta: beta, c: c, ldc: ldc}, w)
	return nil
}

func (g *GoBF16) runPacked(p bf16Problem, w *PackedBF16) {
	kn := g.kern
	pairs := ceilDiv(p.k, 2)
	kc := balancedPairs(pairs, kn.kc)
	workers := g.pool.Workers()
	if 2*p.m*p.n*p.k < minParallelFlops {
		workers = 1
	}
	ws := g.acquire(workers, 0, min(kn.mc, roundUp(p.m, kn.mr))*kc, kn.mr*kn.nr)
	defer g.release(ws)
	mt, nt := ceilDiv(p.m, kn.mr), ceilDiv(p.n, kn.nr)
	wm, wn := partition(mt, nt, workers)
	shared := g.shareA(ws, &p, wn, pairs, kc)
	rect := func(i, r0, r1, q0, q1 int) {
		for pc := 0; pc < pairs; pc += kc {
			blk := bf16Block{nc: p.n, pc: pc, kc: min(kc, pairs-pc), beta: p.beta}
			if pc > 0 {
				blk.beta = 1
			}
			var a []uint32
			if shared != nil {
				a = shared[roundUp(p.m, kn.mr)*pc:]
			}
			b := wordPanels{data: w.data, stride: pairs * kn.nr, off: pc * kn.nr}
			g.rectangle(ws, i, &p, blk, a, b, r0, r1, q0, q1)
		}
	}
	if wm*wn == 1 {
		rect(0, 0, p.m, 0, nt)
		return
	}
	g.pool.Run(wm*wn, func(i int) {
		im, in := i/wn, i%wn
		rect(i, im*mt/wm*kn.mr, min(p.m, (im+1)*mt/wm*kn.mr), in*nt/wn, (in+1)*nt/wn)
	})
}

// sharedALimit bounds the all-of-A packing shared by workers that split
// the columns (a few hundred rows: short products).
const sharedALimit = 8 << 20

// shareA packs all of A once, rows split over the pool, when the workers
// split the columns (wn > 1): each would otherwise round and pack every
// row itself, which at 256 rows cost a fifth of its time. K block pc's
// packing of all rows starts at roundup(m, mr)·pc words. It returns nil
// (each worker packs its own rows) for one column group or a large A.
func (g *GoBF16) shareA(ws *bf16Workspace, p *bf16Problem, wn, pairs, kc int) []uint32 {
	kn := g.kern
	rows := roundUp(p.m, kn.mr)
	if wn < 2 || 4*rows*pairs > sharedALimit {
		return nil
	}
	ws.sharedA = growWords(&g.held, ws.sharedA, rows*pairs)
	a := ws.sharedA
	g.pool.For(ceilDiv(p.m, kn.mr), 1, func(t0, t1 int) {
		r0, r1 := t0*kn.mr, min(t1*kn.mr, p.m)
		for pc := 0; pc < pairs; pc += kc {
			kcb := min(kc, pairs-pc)
			packActivations(a[rows*pc+r0*kcb:], kn.mr, p.a, p.lda, p.k, r0, r1-r0, pc, kcb)
		}
	})
	return a
}
