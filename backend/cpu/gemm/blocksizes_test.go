//go:build amd64 && unix

package gemm

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"ferry/backend/cpu/parallel"
)

// BenchmarkBlockSizes sweeps the AVX-512 kernel's kc and mc on one worker,
// for retuning on a new CPU (FERRY_GEMM_TUNE=1 go test -bench BlockSizes).
// It reports the rate per second of CPU time as well, which other
// processes on a shared machine disturb less than wall time.
func BenchmarkBlockSizes(b *testing.B) {
	if os.Getenv("FERRY_GEMM_TUNE") == "" {
		b.Skip("a tuning sweep, not a regression benchmark: set FERRY_GEMM_TUNE=1 to run it")
	}
	if !hasKernel("avx512") {
		b.Skip("CPU lacks AVX-512")
	}
	save := *avx512Kernel
	defer func() { *avx512Kernel = save }()
	const maxM, maxN, maxK = 1280, 1536, 8960
	a, bb, c := make([]float32, maxM*maxK), make([]float32, maxN*maxK), make([]float32, maxM*maxN)
	for _, s := range [][3]int{{256, 1536, 1536}, {1280, 1536, 1536}, {1280, 1536, 8960}} {
		m, n, k := s[0], s[1], s[2]
		for _, kc := range []int{256, 384, 512, 768} {
			for _, mc := range []int{56, 98, 196} {
				avx512Kernel.kc, avx512Kernel.mc = kc, mc
				g := newGo(parallel.New(1), avx512Kernel)
				b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/kc=%d/mc=%d", m, n, k, kc, mc), func(b *testing.B) {
					g.Sgemm(false, true, m, n, k, 1, a, k, bb, k, 0, c, n)
					c0 := processCPU()
					for b.Loop() {
						g.Sgemm(false, true, m, n, k, 1, a, k, bb, k, 0, c, n)
					}
					flops := 2 * float64(m*n*k) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(flops/(processCPU()-c0)/1e9, "cpu-GFLOP/s")
				})
			}
		}
	}
}

func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
