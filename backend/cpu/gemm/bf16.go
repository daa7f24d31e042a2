package gemm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"ferry/backend/cpu/parallel"
	"ferry/dtype"
)

// BF16Impl multiplies float32 activations by bfloat16 weights: the compute
// dtype bf16 of a plan. Calibrate reports it as "go-bf16".
type BF16Impl interface {
	// Name identifies the implementation in reports ("go-bf16").
	Name() string
	// GemmBF16 computes C[m×n] = A[m×k]·Wᵀ + beta·C. W is n×k bfloat16
	// (raw bits, row stride ldw: PyTorch's [out, in] Linear layout), A is
	// float32 (row stride lda) and is rounded to bfloat16 (nearest even)
	// as it is packed; products accumulate in float32. beta = 0 never
	// reads C.
	GemmBF16(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) error
}

// GoBF16 is the bf16 GEMM: the Goto loop nest of Go, over bf16 pairs. A
// packed "k step" is one 32-bit word holding two consecutive bf16 values of
// K, so the packed panels have the fp32 layout with half as many steps, and
// the AVX512-BF16 kernel (VDPBF16PS: per float32 lane, acc += a0·b0 + a1·b1)
// is the fp32 kernel with the FMA swapped. Packing a weight panel is then a
// 32-bit transpose of the [out, in] weight rows (no widening), and packing
// A rounds float32 pairs to bf16 words.
//
// Weights are packed per call, one shared block of kc pairs × nc columns
// at a time (at most 4 MiB), so bf16 weights stay as they are on the
// device: 2 bytes per parameter.
type GoBF16 struct {
	pool   *parallel.Pool
	kern   *bf16Kernel
	layout string // names PackWeights' layout (see Layout)
	// wide is the fp32 GEMM the expand kernel multiplies with (nil for
	// the others).
	wide *Go

	mu   sync.Mutex
	free []*bf16Workspace
	held atomic.Int64
}

// bf16Kernel is one micro-kernel family over bf16 pairs.
type bf16Kernel struct {
	name   string
	mr, nr int
	// byRows[r-1] computes r ≤ mr rows (kernelFunc with k counting pairs and
	// a, b pointing at packed 32-bit words); nil selects the portable Go
	// kernel.
	byRows []kernelFunc
	// kc pairs of K per block (the B micro-panel, 4·kc·nr bytes, stays in
	// L1), mc rows per packed A block (L2), nc columns per B block (L3).
	kc, mc, nc int
	// expand, for the expand kernel (bf16_expand.go), is the fp32 kernel
	// it runs; byRows is then unused.
	expand *kernel
}

// portableBF16Kernel is plain Go: the fallback without AVX512-BF16, and
// the reference the assembly kernel is tested against.
var portableBF16Kernel = &bf16Kernel{name: "portable", mr: 4, nr: 16, kc: 128, mc: 64, nc: 1024}

func bf16Kernels() []*bf16Kernel {
	ks := archBF16Kernels()
	if e := expandBF16Kernel(); e != nil {
		ks = append(ks, e)
	}
	return append(ks, portableBF16Kernel)
}

// BF16Kernels names the bf16 micro-kernels this CPU runs, fastest first
// ("avx512bf16", "expand", "portable").
func BF16Kernels() []string {
	var names []string
	for _, kn := range bf16Kernels() {
		names = append(names, kn.name)
	}
	return names
}

// NewGoBF16 returns the bf16 GEMM with the fastest kernel this CPU runs,
// on pool (nil: parallel.Default()).
func NewGoBF16(pool *parallel.Pool) *GoBF16 {
	return newGoBF16(pool, bf16Kernels()[0])
}

// NewGoBF16Kernel returns the bf16 GEMM with the named kernel (one of
// BF16Kernels()), for tests and benchmarks.
func NewGoBF16Kernel(pool *parallel.Pool, kernel string) (*GoBF16, error) {
	for _, kn := range bf16Kernels() {
		if kn.name == kernel {
			return newGoBF16(pool, kn), nil
		}
	}
	return nil, fmt.Errorf("gemm: bf16 kernel %q not available on this CPU (have %v)", kernel, BF16Kernels())
}

func newGoBF16(pool *parallel.Pool, kn *bf16Kernel) *GoBF16 {
	if pool == nil {
		pool = parallel.Default()
	}
	g := &GoBF16{pool: pool, kern: kn, layout: fmt.Sprintf("bf16-panels/%s/%d", kn.name, kn.nr)}
	if kn.expand != nil {
		g.wide = newGo(pool, kn.expand)
	}
	return g
}

var (
	defaultBF16Once sync.Once
	defaultBF16     *GoBF16
)

// DefaultBF16 is the process-wide bf16 GEMM (best kernel, default pool).
func DefaultBF16() *GoBF16 {
	defaultBF16Once.Do(func() { defaultBF16 = NewGoBF16(nil) })
	return defaultBF16
}

// AvailableBF16 lists the bf16 implementations usable here: "go-bf16"
// (with its AVX512-BF16 kernel where the CPU has one, else the expand
// kernel where it has AVX2 and F16C, else portable Go).
func AvailableBF16() []BF16Impl { return []BF16Impl{DefaultBF16()} }

// HasBF16Kernel reports whether the CPU runs the AVX512-BF16 kernel, the
// case where compute dtype bf16 is faster than fp32 (the expand kernel
// runs at the fp32 rate, the portable one far below it).
func HasBF16Kernel() bool { return bf16Kernels()[0].byRows != nil }

// Name is "go-bf16".
func (g *GoBF16) Name() string { return "go-bf16" }

// Kernel names the micro-kernel in use.
func (g *GoBF16) Kernel() string { return g.kern.name }

// HeldBytes is the Go heap memory g keeps for packing buffers (a shared
// B block of 4·kc·nc bytes per concurrent call and an A block per worker).
func (g *GoBF16) HeldBytes() int64 { return g.held.Load() }

// GemmBF16 computes C = A·Wᵀ + beta·C (see BF16Impl).
func (g *GoBF16) GemmBF16(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) error {
	if err := checkBF16(m, n, k, a, lda, w, ldw, c, ldc); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return nil
	}
	if g.wide != nil {
		g.gemmWide(m, n, k, a, lda, w, ldw, beta, c, ldc)
		return nil
	}
	g.run(bf16Problem{m: m, n: n, k: k, a: a, lda: lda, w: w, ldw: ldw, beta: beta, c: c, ldc: ldc})
	return nil
}

func checkBF16(m, n, k int, a []float32, lda int, w []uint16, ldw int, c []float32, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: bf16 product with negative size m=%d n=%d k=%d", m, n, k)
	}
	if err := checkMatrix("A", m, k, len(a), lda); err != nil {
		return fmt.Errorf("gemm: bf16 product: %w", err)
	}
	if err := checkMatrix("W", n, k, len(w), ldw); err != nil {
		return fmt.Errorf("gemm: bf16 product: %w", err)
	}
	if err := checkMatrix("C", m, n, len(c), ldc); err != nil {
		return fmt.Errorf("gemm: bf16 product: %w", err)
	}
	return nil
}

// bf16Problem is one product.
type bf16Problem struct {
	m, n, k int
	a       []float32
	lda     int
	w       []uint16
	ldw     int
	beta    float32
	c       []float32
	ldc     int
}

// bf16Block is one K block of one column block.
type bf16Block struct {
	jc, nc int // columns [jc, jc+nc)
	pc, kc int // pairs [pc, pc+kc)
	beta   float32
}

// bf16Workspace holds one call's packing buffers.
type bf16Workspace struct {
	b       []uint32   // shared packed B block
	sharedA []uint32   // all of A packed, shared (prepacked B, columns split)
	a       [][]uint32 // one packed A block per worker
	s       [][]float32
}

func (g *GoBF16) run(p bf16Problem) {
	kn := g.kern
	pairs := ceilDiv(p.k, 2)
	kc := balancedPairs(pairs, kn.kc)
	nc := min(roundUp(p.n, kn.nr), kn.nc)
	workers := g.pool.Workers()
	if 2*p.m*p.n*p.k < minParallelFlops {
		workers = 1
	}
	ws := g.acquire(workers, kc*nc, min(kn.mc, roundUp(p.m, kn.mr))*kc, kn.mr*kn.nr)
	defer g.release(ws)
	for jc := 0; jc < p.n; jc += nc {
		for pc := 0; pc < pairs; pc += kc {
			blk := bf16Block{jc: jc, nc: min(nc, p.n-jc), pc: pc, kc: min(kc, pairs-pc), beta: p.beta}
			if pc > 0 {
				blk.beta = 1 // later K blocks accumulate onto the first
			}
			g.packBBlock(ws.b, &p, blk, workers)
			g.sweep(ws, &p, blk, workers)
		}
	}
}

// balancedPairs splits n pairs into the fewest blocks of at most max, of
// equal size rounded up to 16 (the transpose width).
func balancedPairs(n, max int) int {
	blocks := ceilDiv(n, max)
	return min(n, roundUp(ceilDiv(n, blocks), 16))
}

// packBBlock packs the block's weight panels into dst, split over the
// workers.
func (g *GoBF16) packBBlock(dst []uint32, p *bf16Problem, blk bf16Block, workers int) {
	nr := g.kern.nr
	panels := ceilDiv(blk.nc, nr)
	pack := func(q0, q1 int) {
		for q := q0; q < q1; q++ {
			panel := dst[q*blk.kc*nr : (q+1)*blk.kc*nr]
			packWeightPanel(panel, nr, p.w, p.ldw, p.k, blk.jc+q*nr, min(nr, blk.nc-q*nr), blk.pc, blk.kc)
		}
	}
	if workers == 1 {
		pack(0, panels)
		return
	}
	g.pool.For(panels, 1, pack)
}

// sweep splits the block's register tiles between the workers by rows or
// columns and runs each worker's rectangle.
func (g *GoBF16) sweep(ws *bf16Workspace, p *bf16Problem, blk bf16Block, workers int) {
	kn := g.kern
	mt, nt := ceilDiv(p.m, kn.mr), ceilDiv(blk.nc, kn.nr)
	wm, wn := partition(mt, nt, workers)
	b := wordPanels{data: ws.b, stride: blk.kc * kn.nr}
	if wm*wn == 1 {
		g.rectangle(ws, 0, p, blk, nil, b, 0, p.m, 0, nt)
		return
	}
	g.pool.Run(wm*wn, func(i int) {
		im, in := i/wn, i%wn
		r0, r1 := im*mt/wm*kn.mr, min(p.m, (im+1)*mt/wm*kn.mr)
		g.rectangle(ws, i, p, blk, nil, b, r0, r1, in*nt/wn, (in+1)*nt/wn)
	})
}

// wordPanels locates packed B micro-panels: panel q of a block starts at
// q·stride + off (a shared block: stride kc·nr, off 0; prepacked weights:
// stride pairs·nr, off the block's first pair·nr).
type wordPanels struct {
	data        []uint32
	stride, off int
}

func (v wordPanels) panel(q, kc, nr int) []uint32 {
	s := q*v.stride + v.off
	return v.data[s : s+kc*nr]
}

// rectangle computes rows [r0, r1) and panels [q0, q1) of one block with
// worker slot i's buffers: for each A block of mc rows, sweep every panel
// over its register tiles (the panel stays in L1 across the tiles). A
// non-nil a holds the block's A already packed, every row from row 0.
func (g *GoBF16) rectangle(ws *bf16Workspace, i int, p *bf16Problem, blk bf16Block, a []uint32, b wordPanels, r0, r1, q0, q1 int) {
	kn := g.kern
	abuf, scratch := ws.a[i], ws.s[i]
	for ic := r0; ic < r1; ic += kn.mc {
		rows := min(kn.mc, r1-ic)
		if a != nil {
			abuf = a[ic*blk.kc:]
		} else {
			packActivations(abuf, kn.mr, p.a, p.lda, p.k, ic, rows, blk.pc, blk.kc)
		}
		for q := q0; q < q1; q++ {
			cols := min(kn.nr, blk.nc-q*kn.nr)
			panel := b.panel(q, blk.kc, kn.nr)
			cj := blk.jc + q*kn.nr
			for ir := 0; ir < rows; ir += kn.mr {
				rr := min(kn.mr, rows-ir)
				kn.tile(rr, cols, blk.kc, abuf[ir*blk.kc:], panel, p.c[(ic+ir)*p.ldc+cj:], p.ldc, blk.beta, scratch)
			}
		}
	}
}

// tile computes rows×cols of C from an A micro-panel (kc words of rows
// pairs each) and a B micro-panel (kc words of nr pairs).
func (kn *bf16Kernel) tile(rows, cols, kc int, a, b []uint32, c []float32, ldc int, beta float32, scratch []float32) {
	a = a[:kc*rows]
	b = b[:kc*kn.nr]
	c = c[:(rows-1)*ldc+cols]
	if kn.byRows == nil {
		portableBF16Tile(rows, cols, kn.nr, kc, a, b, c, ldc, beta, scratch)
		return
	}
	var flags uint64
	if beta != 0 {
		flags = loadC
	}
	kn.byRows[rows-1](kc, (*float32)(unsafe.Pointer(&a[0])), (*float32)(unsafe.Pointer(&b[0])), &c[0], ldc, 1, beta, 1<<cols-1, flags)
}

// portableBF16Tile is the Go micro-kernel: acc += a0·b0 + a1·b1 per pair
// in float32, as VDPBF16PS does, then C = acc + beta·C.
func portableBF16Tile(rows, cols, nr, kc int, a, b []uint32, c []float32, ldc int, beta float32, scratch []float32) {
	acc := scratch[:rows*nr]
	clear(acc)
	for p := range kc {
		bp := b[p*nr : p*nr+cols]
		for i, aw := range a[p*rows : p*rows+rows] {
			a0, a1 := lowBF16(aw), highBF16(aw)
			row := acc[i*nr : i*nr+cols]
			for j, bw := range bp {
				row[j] += a0*lowBF16(bw) + a1*highBF16(bw)
			}
		}
	}
	mergeTile(c, ldc, acc, nr, rows, cols, 1, beta)
}

func lowBF16(w uint32) float32  { return dtype.BF16ToF32(uint16(w)) }
func highBF16(w uint32) float32 { return dtype.BF16ToF32(uint16(w >> 16)) }

// packActivations rounds rows [i0, i0+rows) of A, pairs [pc, pc+kc), to
// bf16 words in mr-row panels: panel q starts at q·mr·kc and holds kc
// steps of rows(q) words; word (p, r) = bf16(A[r, 2j]) | bf16(A[r, 2j+1])<<16
// with j = pc+p, the high half zero past K.
func packActivations(dst []uint32, mr int, a []float32, lda, k, i0, rows, pc, kc int) {
	for q := 0; q*mr < rows; q++ {
		rq := min(mr, rows-q*mr)
		panel := dst[q*mr*kc : q*mr*kc+rq*kc]
		for r := range rq {
			row := a[(i0+q*mr+r)*lda : (i0+q*mr+r)*lda+k]
			packRowPairs(panel[r:], rq, row, pc, kc)
		}
	}
}

// packRowPairs writes kc pair words of one row, starting at pair pc, to
// dst[0], dst[step], dst[2·step], ...
func packRowPairs(dst []uint32, step int, row []float32, pc, kc int) {
	k := len(row)
	full := min(kc, k/2-pc) // pairs with both halves inside K
	src := row[2*pc:]
	p := 0
	if roundPairsVec() {
		// Rounded 64 pairs at a time into a buffer, then spread (a
		// scatter store would cost more than the loop).
		var buf [64]uint32
		for ; p+len(buf) <= full; p += len(buf) {
			_ = src[2*(p+len(buf))-1]
			roundPairsAVX512(&buf[0], &src[2*p], len(buf))
			for i, w := range buf {
				dst[(p+i)*step] = w
			}
		}
	}
	for ; p < full; p++ {
		dst[p*step] = uint32(dtype.F32ToBF16(src[2*p])) | uint32(dtype.F32ToBF16(src[2*p+1]))<<16
	}
	for p := max(full, 0); p < kc; p++ {
		var w uint32
		if j := 2 * (pc + p); j < k {
			w = uint32(dtype.F32ToBF16(row[j]))
		}
		dst[p*step] = w
	}
}

// packWeightPanel packs weight rows [j0, j0+cols) (output columns), pairs
// [pc, pc+kc), into panel: word (p, j) at p·nr+j is the pair (W[j, 2i],
// W[j, 2i+1]) with i = pc+p, i.e. the 32-bit word of the weight row, so
// packing is a 32-bit transpose. Columns past cols and the high half past K
// are zero.
func packWeightPanel(panel []uint32, nr int, w []uint16, ldw, k, j0, cols, pc, kc int) {
	p := 0
	if k%2 == 0 && ldw%2 == 0 && uintptr(unsafe.Pointer(&w[0]))%4 == 0 {
		p = transposeWeightWords(panel, nr, w, ldw/2, j0, cols, pc, kc)
	}
	for j := range cols {
		row := w[(j0+j)*ldw : (j0+j)*ldw+k]
		for i := p; i < kc; i++ {
			var word uint32
			if c := 2 * (pc + i); c+1 < k {
				word = uint32(row[c]) | uint32(row[c+1])<<16
			} else if c < k {
				word = uint32(row[c])
			}
			panel[i*nr+j] = word
		}
	}
	for i := p; i < kc; i++ {
		clear(panel[i*nr+cols : (i+1)*nr])
	}
}

func (g *GoBF16) acquire(workers, bLen, aLen, tile int) *bf16Workspace {
	g.mu.Lock()
	var ws *bf16Workspace
	if n := len(g.free); n > 0 {
		ws, g.free = g.free[n-1], g.free[:n-1]
	}
	g.mu.Unlock()
	if ws == nil {
		ws = &bf16Workspace{}
	}
	ws.b = growWords(&g.held, ws.b, bLen)
	for len(ws.a) < workers {
		ws.a = append(ws.a, nil)
		ws.s = append(ws.s, nil)
	}
	for i := range workers {
		ws.a[i] = growWords(&g.held, ws.a[i], aLen)
		if cap(ws.s[i]) < tile {
			g.held.Add(4 * int64(tile-cap(ws.s[i])))
			ws.s[i] = make([]float32, tile)
		}
		ws.s[i] = ws.s[i][:tile]
	}
	return ws
}

func (g *GoBF16) release(ws *bf16Workspace) {
	g.mu.Lock()
	g.free = append(g.free, ws)
	g.mu.Unlock()
}

// growWords returns s resized to n, reallocating (and counting in held)
// only when it must grow.
func growWords(held *atomic.Int64, s []uint32, n int) []uint32 {
	if cap(s) >= n {
		return s[:n]
	}
	held.Add(4 * int64(n-cap(s)))
	return make([]uint32, n)
}
