//go:build !amd64

package gemm

// fmaLoop: no assembly kernels outside amd64, so no peak to measure.
func fmaLoop(kernel string) (loop func(n int), flops float64) { return nil, 0 }
