package gemm

//go:generate go run ./internal/kerngen -asm kernel_amd64.s -go kernel_amd64_gen.go

// kernelFunc is the signature of the assembly micro-kernels (written by
// internal/kerngen): C[mr×nr] = alpha·A·B + beta·C over k steps of packed
// panels, reading C only when flags has loadC, writing the columns in mask.
type kernelFunc func(k int, a, b, c *float32, ldc int, alpha, beta float32, mask uint64, flags uint64)

// loadC is the kernel flag that makes it read C (beta ≠ 0). Without it C is
// only written, so NaNs already in C never leak into a beta = 0 product.
const loadC = 1

// kernel is one micro-kernel family: mr×nr register tiles over packed
// panels, plus the block sizes its driver uses.
type kernel struct {
	name   string
	mr, nr int
	// byRows[r-1] is the assembly kernel for r ≤ mr rows; nil selects the
	// portable Go kernel.
	byRows []kernelFunc
	// masked kernels write partial-width tiles themselves; others get a
	// full-width scratch tile that the driver merges into C.
	masked bool
	// copyRows8 and transpose8 (AVX2) may pack A and B panels.
	copyRows8, transpose8 bool
	// transpose says transpose16 (AVX-512) may be used while packing.
	transpose bool
	// Cache blocking: kc steps of K per packed panel (the B micro-panel,
	// kc·nr floats, stays in L1), mc rows of A per packed block (in L2),
	// nc columns of B per packed block (in L3).
	kc, mc, nc int
	// streamRows: products with at most this many rows pack B panel by
	// panel as they go (see plan.stream); their whole A block (rows·kc
	// floats) must fit in L2.
	streamRows int
}

// portableKernel is plain Go, compiled everywhere: the fallback on CPUs
// without the assembly kernels and a second opinion in the tests.
var portableKernel = &kernel{name: "portable", mr: 4, nr: 16, kc: 256, mc: 128, nc: 2048, streamRows: 128}

// kernels lists the kernels this CPU can run, fastest first.
func kernels() []*kernel {
	return append(archKernels(), portableKernel)
}

// tile computes one register tile: rows×cols of C (cols ≤ kn.nr) from a
// packed A micro-panel (kc steps of rows values) and a packed B micro-panel
// (kc steps of kn.nr values). scratch holds at least kn.mr·kn.nr floats.
func (kn *kernel) tile(rows, cols, kc int, a, b, c []float32, ldc int, alpha, beta float32, scratch []float32) {
	a = a[:kc*rows]
	b = b[:kc*kn.nr]
	c = c[:(rows-1)*ldc+cols]
	if kn.byRows == nil {
		portableTile(rows, cols, kn.nr, kc, a, b, c, ldc, alpha, beta, scratch)
		return
	}
	var flags uint64
	if beta != 0 {
		flags = loadC
	}
	f := kn.byRows[rows-1]
	if cols == kn.nr || kn.masked {
		f(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, 1<<cols-1, flags)
		return
	}
	s := scratch[:rows*kn.nr]
	f(kc, &a[0], &b[0], &s[0], kn.nr, 1, 0, 1<<kn.nr-1, 0)
	mergeTile(c, ldc, s, kn.nr, rows, cols, alpha, beta)
}

// mergeTile stores C = alpha·S + beta·C for a rows×cols tile of S (row
// stride lds).
func mergeTile(c []float32, ldc int, s []float32, lds, rows, cols int, alpha, beta float32) {
	for i := range rows {
		ci := c[i*ldc : i*ldc+cols]
		si := s[i*lds : i*lds+cols]
		if beta == 0 {
			for j, v := range si {
				ci[j] = alpha * v
			}
			continue
		}
		for j, v := range si {
			ci[j] = alpha*v + beta*ci[j]
		}
	}
}

// portableTile is the Go micro-kernel: accumulate the tile in scratch
// (row stride nrp), then merge it into C.
func portableTile(rows, cols, nrp, kc int, a, b, c []float32, ldc int, alpha, beta float32, scratch []float32) {
	acc := scratch[:rows*nrp]
	clear(acc)
	for p := range kc {
		bp := b[p*nrp : p*nrp+cols]
		ap := a[p*rows : p*rows+rows]
		for i, av := range ap {
			row := acc[i*nrp : i*nrp+cols]
			for j, bv := range bp {
				row[j] += av * bv
			}
		}
	}
	mergeTile(c, ldc, acc, nrp, rows, cols, alpha, beta)
}
