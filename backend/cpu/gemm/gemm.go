// Package gemm holds the CPU matrix-multiply implementations behind one
// interface: OpenBLAS loaded at run time (purego, no cgo), our own Go
// kernels, and a naive reference. One conformance suite (package gemmtest)
// tests them all.
//
//   - OpenBLAS() loads libopenblas once, choosing its core type from the
//     CPU (SkylakeX kernels on AVX-512) before it loads; OpenBLASInfo()
//     says what loaded.
//   - NewGo(pool) is the Go GEMM: packed panels and an assembly register
//     tile kernel (AVX-512 14×32 or AVX2 6×16, written by internal/kerngen)
//     or a portable Go kernel, on the one thread pool. It also implements
//     Packer: weights packed once (PackB) feed SgemmPacked without the
//     per-call transposing copy.
//   - NewGoBF16(pool) / DefaultBF16() is the bf16 GEMM (BF16Impl,
//     reported as "go-bf16"): float32 activations rounded to bf16 times
//     bf16 weights as stored ([out, in]), float32 accumulation, with
//     VDPBF16PS (AVX512-BF16, emitted as bytes: Go's assembler lacks it)
//     or portable Go. AvailableBF16() lists it for calibrate;
//     HasBF16Kernel() says whether the CPU runs the fast kernel.
//   - Best() picks OpenBLAS when it loads, else Go; the environment
//     variable FERRY_GEMM (go, openblas or naive) overrides. Available()
//     lists what works here.
package gemm

// Impl multiplies row-major float32 matrices:
//
//	C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C
//
// where op(X) is X or Xᵀ. lda, ldb, ldc are row strides in elements, as in
// CBLAS with CblasRowMajor. Implementations are safe for concurrent use.
type Impl interface {
	// Name identifies the implementation in reports ("openblas", "go", "naive").
	Name() string
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
		b []float32, ldb int, beta float32, c []float32, ldc int)
}

// Naive is the reference: a triple loop accumulating in float64. Slow; for
// tests only.
type Naive struct{}

// Name is "naive".
func (Naive) Name() string { return "naive" }

// Sgemm computes the product in float64 and rounds once.
func (Naive) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				// Index first, then read: reading a[i*lda+p] before
				// checking transA would run past a transposed operand.
				ai, bi := i*lda+p, p*ldb+j
				if transA {
					ai = p*lda + i
				}
				if transB {
					bi = j*ldb + p
				}
				s += float64(a[ai]) * float64(b[bi])
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(v)
		}
	}
}
