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
//     per-call transposing copy. Weights stored as bf16, fp16 or fp8
//     (F8_E4M3, F8_E5M2, with a per-tensor scale) can stay so: PackStored
//     packs them in their own dtype and SgemmStored widens each panel to
//     float32 as it packs it (AVX2 + F16C: VPMOVZXWD and VPSLLD for bf16,
//     VCVTPH2PS for fp16 and fp8) before the fp32 kernel runs, at the
//     fp32 rate; Expands(dt) says where that holds.
//   - NewGoBF16(pool) / DefaultBF16() is the bf16 GEMM (BF16Impl,
//     reported as "go-bf16"): float32 activations rounded to bf16 times
//     bf16 weights as stored ([out, in]), float32 accumulation, with
//     VDPBF16PS (AVX512-BF16, emitted as bytes: Go's assembler lacks it),
//     else the "expand" kernel (rounded activations times weights widened
//     by the expanding packers, on the fp32 kernel: the fp32 rate), else
//     portable Go. AvailableBF16() lists it for calibrate;
//     HasBF16Kernel() says whether the CPU runs VDPBF16PS.
//   - Best() picks Go wherever its AVX2 or AVX-512 kernel runs, else
//     OpenBLAS when it loads, else Go; the environment variable FERRY_GEMM
//     (go, openblas or naive) overrides. Available() lists what works here.
//
// The environment variable FERRY_CPU, read once at start-up, caps the
// instruction sets the kernels use, as backend/cpu reads it: "avx2" makes
// an AVX-512 machine choose what an AVX2 + FMA one chooses (the AVX2 6×16
// kernel, no VDPBF16PS, no AVX-512 transposes in the packers), "generic"
// the portable Go kernels; "", "auto" and "avx512" cap nothing. Tests
// select kernels through an internal hook (setISACap) instead, so one
// `go test` runs every selection the CPU supports; a selection the CPU
// lacks is skipped with a message.
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
