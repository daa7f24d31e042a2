package gemm

import (
	"fmt"
	"sync"
	"sync/atomic"

	"ferry/backend/cpu/parallel"
)

// Go is the package's own GEMM: packed panels, a register-tile
// micro-kernel (AVX-512 or AVX2 assembly, else portable Go), and the one
// thread pool. Safe for concurrent use.
//
// The loop nest is the usual Goto/BLIS one, in three variants:
//
//   - many rows: for each block of nc columns and kc steps of K, the
//     workers pack B together into a shared buffer, then split the
//     block's register tiles by rows or columns; each packs mc rows of A
//     at a time into its own buffer and sweeps the kernel over them.
//   - few rows (m ≤ 256 with the AVX-512 kernel): the workers split the
//     columns; each packs all of A per K block and each B panel just
//     before use, so B (the weights, read once) never round-trips through
//     a large buffer. One parallel pass, no barrier per block.
//   - prepacked B (SgemmPacked): no B packing at all; one parallel pass.
//   - B prepacked in a 16- or 8-bit storage dtype (SgemmStored): as
//     prepacked, each worker widening a panel's K block into its own
//     panel buffer (L1) before sweeping an A block over it.
//
// Packing buffers live in workspaces that are kept and reused (fresh pages
// are slow to touch); HeldBytes reports their size.
type Go struct {
	pool   *parallel.Pool
	kern   *kernel
	layout string // names PackB's layout (see Layout)
	expand bool   // the vectorised expanding packers run (see Expands)

	mu   sync.Mutex
	free []*workspace
	held atomic.Int64 // bytes in all workspaces, idle or in use
}

// NewGo returns the Go GEMM with the fastest kernel this CPU runs, on
// pool (nil: parallel.Default()).
func NewGo(pool *parallel.Pool) *Go {
	return newGo(pool, kernels()[0])
}

// NewGoKernel returns the Go GEMM with the named kernel (one of
// GoKernels()), for tests and benchmarks.
func NewGoKernel(pool *parallel.Pool, kernel string) (*Go, error) {
	for _, kn := range kernels() {
		if kn.name == kernel {
			return newGo(pool, kn), nil
		}
	}
	return nil, fmt.Errorf("gemm: kernel %q not available on this CPU (have %v)", kernel, GoKernels())
}

// GoKernels names the micro-kernels this CPU runs, fastest first
// ("avx512", "avx2", "portable").
func GoKernels() []string {
	var names []string
	for _, kn := range kernels() {
		names = append(names, kn.name)
	}
	return names
}

func newGo(pool *parallel.Pool, kn *kernel) *Go {
	noteISACap()
	if pool == nil {
		pool = parallel.Default()
	}
	return &Go{pool: pool, kern: kn, layout: fmt.Sprintf("f32-panels/%s/%d", kn.name, kn.nr),
		expand: kn.byRows != nil && hasExpand()}
}

// Name is "go".
func (g *Go) Name() string { return "go" }

// Kernel names the micro-kernel in use.
func (g *Go) Kernel() string { return g.kern.name }

// HeldBytes is the Go heap memory g keeps for packing buffers: per
// concurrent call, up to 4·kc·nc bytes of shared B block (8 MiB with the
// AVX-512 kernel, only for unpacked products of more than 256 rows) and
// per worker an A block (4·mc·kc, 196-512 KiB), a B panel (64 KiB) and a
// tile. It grows to the largest products seen and is never returned.
func (g *Go) HeldBytes() int64 { return g.held.Load() }

// Sgemm computes C = alpha·op(A)·op(B) + beta·C (see Impl). It panics with
// Check's error on inconsistent arguments.
func (g *Go) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	if err := Check(transA, transB, m, n, k, a, lda, b, ldb, c, ldc); err != nil {
		panic(err)
	}
	g.gemm(problem{
		transA: transA, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda,
		b: b, ldb: ldb, transB: transB, beta: beta, c: c, ldc: ldc,
	})
}

// problem is one product; packed or stored, when set, replaces
// b/ldb/transB.
type problem struct {
	transA  bool
	m, n, k int
	alpha   float32
	a       []float32
	lda     int
	b       []float32
	ldb     int
	transB  bool
	packed  *Packed
	stored  *Stored
	beta    float32
	c       []float32
	ldc     int
}

// bias is the column biases the product adds to C: its B operand's
// (Packed.WithBias, Stored.WithBias), or nil.
func (p *problem) bias() []float32 {
	switch {
	case p.packed != nil:
		return p.packed.bias
	case p.stored != nil:
		return p.stored.bias
	}
	return nil
}

// minParallelFlops is the product size below which one worker does it all:
// handing out chunks costs a few microseconds, about what a core computes
// in this many flops.
const minParallelFlops = 1 << 22

// plan is how one product is blocked and shared out.
type plan struct {
	workers int
	kc, mc  int // K steps and A rows per packed block
	nc      int // B columns per block
	// stream: few rows (m ≤ kernel.streamRows) and B not prepacked. Each
	// worker owns a range of B panels, packs all rows of A once per K
	// block, and packs each B panel just before sweeping A with it, so B
	// goes from memory to L1 once and no large B buffer is written.
	stream bool
}

func (g *Go) plan(p *problem) plan {
	kn := g.kern
	pl := plan{workers: g.pool.Workers(), kc: balancedBlock(p.k, kn.kc), mc: kn.mc, nc: p.n}
	if 2*p.m*p.n*p.k < minParallelFlops {
		pl.workers = 1
	}
	switch {
	case p.packed != nil || p.stored != nil:
	case p.m <= kn.streamRows && ceilDiv(p.n, kn.nr) >= pl.workers:
		// (Streaming splits columns only: too few panels would idle a
		// worker, and then sharing a small B block is cheap anyway.)
		pl.stream, pl.mc = true, roundUp(p.m, kn.mr)
	default:
		pl.nc = min(p.n, kn.nc)
	}
	return pl
}

// gemm runs one product. The problem is copied into the workspace so that
// closures handed to the pool capture no fresh allocation.
func (g *Go) gemm(prob problem) {
	if prob.m == 0 || prob.n == 0 {
		return
	}
	if prob.k == 0 || prob.alpha == 0 {
		scaleC(prob.m, prob.n, prob.beta, prob.c, prob.ldc)
		if bias := prob.bias(); bias != nil {
			addBias(prob.c, prob.ldc, prob.m, bias)
		}
		return
	}
	kn := g.kern
	planned := g.plan(&prob)
	bLen, panelLen := 0, 0
	switch {
	case planned.stream || prob.stored != nil:
		panelLen = planned.kc * kn.nr // the panel packed (or widened) just before use
	case prob.packed == nil:
		bLen = planned.kc * roundUp(planned.nc, kn.nr)
	}
	aLen := min(planned.mc, roundUp(prob.m, kn.mr)) * planned.kc
	ws := g.acquire(planned.workers, kn.mr*kn.nr, aLen, panelLen, bLen)
	defer g.release(ws)
	ws.p, ws.pl = prob, planned
	p, pl := &ws.p, &ws.pl // in the workspace: closures capture no fresh allocation

	if pl.stream || p.packed != nil || p.stored != nil {
		// Workers share no buffer: one parallel pass, each worker running
		// every K block of its own rectangle of C.
		g.pass(ws, p, pl, nil, p.n)
		return
	}
	for jc := 0; jc < p.n; jc += pl.nc {
		ncb := min(pl.nc, p.n-jc)
		for pc := 0; pc < p.k; pc += pl.kc {
			ws.blk = pl.block(p, jc, ncb, pc)
			ws.blk.b = g.bBlock(ws, p, pl.workers, ws.blk)
			g.pass(ws, p, pl, &ws.blk, ncb)
		}
	}
}

// block returns K block pc of columns [jc, jc+nc).
func (pl *plan) block(p *problem, jc, nc, pc int) block {
	blk := block{jc: jc, nc: nc, pc: pc, kc: min(pl.kc, p.k-pc), beta: p.beta}
	if pc > 0 {
		blk.beta = 1 // later K blocks accumulate onto the first
	}
	if pk := p.packed; pk != nil {
		blk.b = bView{data: pk.data[jc*pk.k:], stride: pk.k * pk.nr, off: pc * pk.nr}
	}
	return blk
}

// block is one K block of one column block of the product.
type block struct {
	jc, nc int // columns [jc, jc+nc)
	pc, kc int // K range [pc, pc+kc)
	beta   float32
	b      bView // packed B panels (unset when streaming)
}

// bView locates the packed B micro-panels of one block.
type bView struct {
	data   []float32
	stride int // floats from one panel to the next
	off    int // first float of this block's k range within a panel
}

func (v bView) panel(q, kc, nr int) []float32 {
	s := q*v.stride + v.off
	return v.data[s : s+kc*nr]
}

// bBlock packs the B panels of a block, in parallel, into the shared
// buffer.
func (g *Go) bBlock(ws *workspace, p *problem, workers int, blk block) bView {
	nr := g.kern.nr
	panels := ceilDiv(blk.nc, nr)
	if workers == 1 {
		g.kern.packB(ws.b, p.b, p.ldb, p.transB, blk.jc, blk.nc, blk.pc, blk.kc, 0, panels)
	} else {
		g.pool.For(panels, 1, func(q0, q1 int) {
			g.kern.packB(ws.b, p.b, p.ldb, p.transB, blk.jc, blk.nc, blk.pc, blk.kc, q0, q1)
		})
	}
	return bView{data: ws.b, stride: blk.kc * nr}
}

// pass splits nc columns of C between the workers by rows or columns of
// register tiles and runs each worker's rectangle: for one block, or for
// every K block when blk is nil.
func (g *Go) pass(ws *workspace, p *problem, pl *plan, blk *block, nc int) {
	kn := g.kern
	mt, nt := ceilDiv(p.m, kn.mr), ceilDiv(nc, kn.nr)
	wm, wn := partition(mt, nt, pl.workers)
	if pl.stream {
		wm, wn = 1, min(pl.workers, nt) // each worker packs its own B panels
	}
	if wm*wn == 1 {
		g.rectangle(&ws.w[0], p, pl, blk, 0, p.m, 0, nt)
		return
	}
	g.pool.Run(wm*wn, func(i int) {
		im, in := i/wn, i%wn
		r0, r1 := im*mt/wm*kn.mr, min(p.m, (im+1)*mt/wm*kn.mr)
		q0, q1 := in*nt/wn, (in+1)*nt/wn
		g.rectangle(&ws.w[i], p, pl, blk, r0, r1, q0, q1)
	})
}

// rectangle computes rows [r0, r1) and B panels [q0, q1) for one block, or
// for all K blocks when blk is nil. Then it goes nc columns at a time, every
// K block of them before the next columns, so the B panels that its A
// blocks sweep stay in L3 (kc·nc floats): a worker sweeping all of a wide
// prepacked B per A block read it from memory each time.
func (g *Go) rectangle(w *workerSpace, p *problem, pl *plan, blk *block, r0, r1, q0, q1 int) {
	if blk != nil {
		g.region(w, p, pl, *blk, r0, r1, q0, q1)
		return
	}
	step := max(1, g.kern.nc/g.kern.nr)
	for j0 := q0; j0 < q1; j0 += step {
		for pc := 0; pc < p.k; pc += pl.kc {
			g.region(w, p, pl, pl.block(p, 0, p.n, pc), r0, r1, j0, min(q1, j0+step))
		}
	}
}

// partition splits mt×nt tiles into wm×wn = workers rectangles, minimising
// the tiles of the busiest worker. Splitting columns costs each worker a
// copy of the A packing, so rows win ties.
func partition(mt, nt, workers int) (wm, wn int) {
	best := -1.0
	for d := 1; d <= workers; d++ {
		if workers%d != 0 || d > mt || workers/d > nt {
			continue
		}
		e := workers / d
		cost := float64(ceilDiv(mt, d) * ceilDiv(nt, e))
		if e > 1 {
			cost *= 1.02
		}
		if best < 0 || cost < best {
			best, wm, wn = cost, d, e
		}
	}
	if best < 0 {
		return 1, 1
	}
	return wm, wn
}

// region computes rows [r0, r1) and B panels [q0, q1) of one block: for
// each A block of mc rows, sweep every B panel over its register tiles.
func (g *Go) region(w *workerSpace, p *problem, pl *plan, blk block, r0, r1, q0, q1 int) {
	kn := g.kern
	for ic := r0; ic < r1; ic += pl.mc {
		mcb := min(pl.mc, r1-ic)
		kn.packA(w.a, p.a, p.lda, p.transA, ic, mcb, blk.pc, blk.kc)
		for q := q0; q < q1; q++ {
			cols := min(kn.nr, blk.nc-q*kn.nr)
			cj := blk.jc + q*kn.nr
			var bp []float32
			switch {
			case pl.stream:
				bp = w.panel
				kn.packBPanel(bp, p.b, p.ldb, p.transB, cj, cols, blk.pc, blk.kc)
			case p.stored != nil:
				// Widened once per A block: amortised over its mc rows.
				bp = w.panel
				p.stored.panel(bp, blk.jc/kn.nr+q, blk.pc, blk.kc, g.expand)
			default:
				bp = blk.b.panel(q, blk.kc, kn.nr)
			}
			var bias []float32
			if all := p.bias(); all != nil && blk.pc == 0 {
				bias = all[cj : cj+cols]
			}
			for ir := 0; ir < mcb; ir += kn.mr {
				rows := min(kn.mr, mcb-ir)
				c := p.c[(ic+ir)*p.ldc+cj:]
				kn.tile(rows, cols, blk.kc, w.a[ir*blk.kc:], bp, c, p.ldc, p.alpha, blk.beta, w.scratch)
				if bias != nil {
					addBias(c, p.ldc, rows, bias)
				}
			}
		}
	}
}

// addBias adds bias (one per column) to rows of C, len(bias) columns each:
// a register tile the kernel has just written, still in L1 (the kernel
// prefetched its lines while it computed), so the bias costs no pass of
// its own over C, which for a Linear's output is tens of MB written and
// read back from memory. With AVX2 it adds eight columns at a time (a
// scalar loop took 1.2% of a 1.3B block's CPU samples, this 0.5%).
func addBias(c []float32, ldc, rows int, bias []float32) {
	if len(bias) == 0 || rows == 0 {
		return
	}
	if biasVec() {
		_ = c[(rows-1)*ldc+len(bias)-1] // the last row's columns are in c
		addBiasAVX2(&c[0], ldc, rows, &bias[0], len(bias))
		return
	}
	addBiasGo(c, ldc, rows, bias)
}

// addBiasGo is addBias in Go.
func addBiasGo(c []float32, ldc, rows int, bias []float32) {
	for i := range rows {
		ci := c[i*ldc : i*ldc+len(bias)]
		for j, v := range bias {
			ci[j] += v
		}
	}
}

// workspace holds the packing buffers of one call.
type workspace struct {
	p   problem       // the product in progress
	pl  plan          // its plan
	blk block         // the block in progress (shared B)
	b   []float32     // shared packed B block
	w   []workerSpace // one per worker
}

type workerSpace struct {
	a       []float32 // packed A block
	panel   []float32 // one packed B panel (streaming)
	scratch []float32 // one register tile
}

// acquire takes a workspace from the free list and grows it to the sizes
// asked for. Buffers only grow, so steady-state calls allocate nothing.
func (g *Go) acquire(workers, tile, aLen, panelLen, bLen int) *workspace {
	g.mu.Lock()
	var ws *workspace
	if n := len(g.free); n > 0 {
		ws, g.free = g.free[n-1], g.free[:n-1]
	}
	g.mu.Unlock()
	if ws == nil {
		ws = &workspace{}
	}
	ws.b = g.grow(ws.b, bLen)
	for len(ws.w) < workers {
		ws.w = append(ws.w, workerSpace{})
	}
	for i := range workers {
		ws.w[i].a = g.grow(ws.w[i].a, aLen)
		ws.w[i].panel = g.grow(ws.w[i].panel, panelLen)
		ws.w[i].scratch = g.grow(ws.w[i].scratch, tile)
	}
	return ws
}

func (g *Go) release(ws *workspace) {
	ws.p, ws.blk = problem{}, block{} // drop references to the caller's slices
	g.mu.Lock()
	g.free = append(g.free, ws)
	g.mu.Unlock()
}

// grow returns s resized to n, reallocating (and counting) only when it
// must grow.
func (g *Go) grow(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	g.held.Add(4 * int64(n-cap(s)))
	return make([]float32, n)
}

// balancedBlock splits n into the fewest blocks of at most max, of equal
// size (rounded up to 16 for the transposing packers), so no last block is
// tiny.
func balancedBlock(n, max int) int {
	blocks := ceilDiv(n, max)
	return min(n, roundUp(ceilDiv(n, blocks), 16))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(a, b int) int { return ceilDiv(a, b) * b }
