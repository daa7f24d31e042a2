//go:build unix

package cpu

import (
	"fmt"
	"math"
	"os"
	"syscall"
	"testing"

	"ferry/tensor"
)

// BenchmarkAttentionTiles sweeps the attention tile sizes on one
// (batch, head)-rich problem, for retuning on a new CPU
// (FERRY_CPU_TUNE=1 go test -bench AttentionTiles). cpu-GFLOP/s is per
// second of CPU time, which other processes disturb less than wall time.
func BenchmarkAttentionTiles(b *testing.B) {
	if os.Getenv("FERRY_CPU_TUNE") == "" {
		b.Skip("a tuning sweep: set FERRY_CPU_TUNE=1 to run it")
	}
	saved := [2]int{attnTileQ, attnTileK}
	defer func() { attnTileQ, attnTileK = saved[0], saved[1] }()
	be := New(NewDevice(0), nil)
	ops := tensor.NewOps(be)
	const l, h = 1280, 12
	for _, d := range []int{64, 128} {
		data := make([]float32, l*h*d)
		for i := range data {
			data[i] = float32(math.Sin(float64(i)))
		}
		q := ops.Upload(data, 1, l, h, d)
		out := ops.Zeros(1, l, h, d)
		for _, tq := range []int{64, 128, 256} {
			for _, tk := range []int{128, 256, 512} {
				attnTileQ, attnTileK = tq, tk
				b.Run(fmt.Sprintf("D=%d/tq=%d/tk=%d", d, tq, tk), func(b *testing.B) {
					_ = be.Attention(out, q, q, q, nil, 0.1)
					c0 := processCPU()
					for b.Loop() {
						if err := be.Attention(out, q, q, q, nil, 0.1); err != nil {
							b.Fatal(err)
						}
					}
					flops := 4 * float64(h*l*l*d) * float64(b.N)
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
