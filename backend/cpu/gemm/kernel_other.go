//go:build !amd64

package gemm

// archKernels: no assembly kernels outside amd64 yet; the portable Go
// kernel runs.
func archKernels() []*kernel { return nil }

// transpose16 exists only so the packing code compiles; kernels that set
// transpose (AVX-512) are never selected here.
func transpose16(dst *float32, dstStride int, src *float32, srcStride int, rows int, storeMask uint32) {
	panic("gemm: transpose16 needs AVX-512")
}

// copyRows16 likewise: only AVX-512 kernels (transpose set) call it.
func copyRows16(dst, src *float32, lda, rows, kc int) {
	panic("gemm: copyRows16 needs AVX-512")
}

// copyRows8 likewise: only the AVX2 kernel calls it.
func copyRows8(dst, src *float32, lda, rows, kc, fast int) {
	panic("gemm: copyRows8 needs AVX2")
}

// copyPanel16 and copyPanel32 likewise: only the AVX2 and AVX-512
// kernels call them.
func copyPanel16(dst, src *float32, ldb, kc int) { panic("gemm: copyPanel16 needs AVX2") }
func copyPanel32(dst, src *float32, ldb, kc int) { panic("gemm: copyPanel32 needs AVX-512") }

// transpose8 likewise.
func transpose8(dst *float32, dstStride int, src *float32, srcStride int, rows, maskLast int) {
	panic("gemm: transpose8 needs AVX2")
}

// roundPairsVec: the vectorised bf16 rounding is amd64 assembly.
func roundPairsVec() bool { return false }

func roundPairsAVX512(dst *uint32, src *float32, pairs int) {
	panic("gemm: roundPairsAVX512 needs AVX-512")
}

// hasExpand: the vectorised expanding packers are amd64 assembly.
func hasExpand() bool { return false }

func expandBF16AVX2(dst *float32, src *uint16, n int) { panic("gemm: expandBF16AVX2 needs amd64") }
func expandF16AVX2(dst *float32, src *uint16, n int)  { panic("gemm: expandF16AVX2 needs amd64") }
func expandE4M3AVX2(dst *float32, src *uint8, n int)  { panic("gemm: expandE4M3AVX2 needs amd64") }
func expandE5M2AVX2(dst *float32, src *uint8, n int)  { panic("gemm: expandE5M2AVX2 needs amd64") }

// biasVec: the vectorised bias add is amd64 assembly.
func biasVec() bool { return false }

func addBiasAVX2(c *float32, ldc, rows int, bias *float32, cols int) {
	panic("gemm: addBiasAVX2 needs AVX2")
}
