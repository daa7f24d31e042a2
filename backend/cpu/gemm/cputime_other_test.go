//go:build !unix

package gemm_test

// cpuSeconds is unavailable here; the CPU-time metric is then left out.
func cpuSeconds() float64 { return 0 }
