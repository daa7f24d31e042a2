//go:build amd64

package gemm

func fmaLoopAVX2(n int)
func fmaLoopAVX512(n int)

// fmaLoop returns the register-only FMA loop of the named kernel's
// instruction set and the flops one of its iterations does (twelve FMAs
// of 8 or 16 lanes, two flops each), or nil.
func fmaLoop(kernel string) (loop func(n int), flops float64) {
	switch kernel {
	case "avx512":
		return fmaLoopAVX512, 12 * 16 * 2
	case "avx2":
		return fmaLoopAVX2, 12 * 8 * 2
	}
	return nil, 0
}
