//go:build amd64 && unix

package gemm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"ferry/backend/cpu/parallel"
)

// BenchmarkBF16Blocking compares block sizes of the AVX512-BF16 kernel on
// one worker at two DiT shapes, for retuning kc, mc, nc on a new CPU
// (FERRY_GEMM_TUNE=1 go test -bench BF16Blocking).
func BenchmarkBF16Blocking(b *testing.B) {
	if os.Getenv("FERRY_GEMM_TUNE") == "" {
		b.Skip("a tuning sweep, not a regression benchmark: set FERRY_GEMM_TUNE=1 to run it")
	}
	if len(archBF16Kernels()) == 0 {
		b.Skip("no AVX512-BF16")
	}
	shapes := [][3]int{{512, 1536, 8960}, {512, 8960, 1536}}
	blockings := [][3]int{{256, 168, 4096}, {256, 168, 9216}, {256, 336, 9216}, {128, 168, 4096}}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		a := make([]float32, m*k)
		for i := range a {
			a[i] = rng.Float32()
		}
		w := make([]uint16, n*k)
		for i := range w {
			w[i] = uint16(0x3f00 + rng.IntN(255))
		}
		c := make([]float32, m*n)
		for _, bl := range blockings {
			kn := *avx512BF16Kernel
			kn.kc, kn.mc, kn.nc = bl[0], bl[1], bl[2]
			g := newGoBF16(parallel.New(1), &kn)
			b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/kc=%d/mc=%d/nc=%d", m, k, n, bl[0], bl[1], bl[2]), func(b *testing.B) {
				_ = g.GemmBF16(m, n, k, a, k, w, k, 0, c, n)
				c0 := processCPU()
				for b.Loop() {
					_ = g.GemmBF16(m, n, k, a, k, w, k, 0, c, n)
				}
				flops := 2 * float64(m*n*k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(processCPU()-c0)/1e9, "cpu-GFLOP/s")
			})
		}
	}
}
