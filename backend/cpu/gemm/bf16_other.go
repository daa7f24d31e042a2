//go:build !amd64

package gemm

// archBF16Kernels: no assembly bf16 kernels outside amd64; the portable Go
// kernel runs.
func archBF16Kernels() []*bf16Kernel { return nil }

// transposeWeightWords packs nothing here; the scalar loop does it all.
func transposeWeightWords(panel []uint32, nr int, w []uint16, ld, j0, cols, pc, kc int) int {
	return 0
}
