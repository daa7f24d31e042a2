//go:build unix

package cpu

import (
	"fmt"
	"math"
	"os"
	"testing"

	"ferry/tensor"
)

// BenchmarkAttentionBackwardTiles sweeps the attention tile sizes (shared
// with the forward) for the backward at Wan-1.3B's self-attention shape,
// for retuning on a new CPU (FERRY_CPU_TUNE=1 go test -bench
// AttentionBackwardTiles). Reports GFLOP/s of the backward's five
// products, 10·H·L²·D, per second of wall and of CPU time.
func BenchmarkAttentionBackwardTiles(b *testing.B) {
	if os.Getenv("FERRY_CPU_TUNE") == "" {
		b.Skip("a tuning sweep: set FERRY_CPU_TUNE=1 to run it")
	}
	saved := [2]int{attnTileQ, attnTileK}
	defer func() { attnTileQ, attnTileK = saved[0], saved[1] }()
	be := New(NewDevice(0), nil)
	ops := tensor.NewOps(be)
	const l, h, d = 1280, 12, 128
	data := make([]float32, l*h*d)
	for i := range data {
		data[i] = float32(math.Sin(float64(i)))
	}
	x := ops.Upload(data, 1, l, h, d)
	out, lse := ops.AttentionLSE(x, x, x, 0.1)
	dq, dk, dv := ops.Zeros(1, l, h, d), ops.Zeros(1, l, h, d), ops.Zeros(1, l, h, d)
	if err := ops.Err(); err != nil {
		b.Fatal(err)
	}
	for _, tq := range []int{64, 128, 256} {
		for _, tk := range []int{128, 256, 512} {
			attnTileQ, attnTileK = tq, tk
			b.Run(fmt.Sprintf("tq=%d/tk=%d", tq, tk), func(b *testing.B) {
				run := func() {
					if err := be.AttentionBackward(dq, dk, dv, x, x, x, x, out, lse, 0.1); err != nil {
						b.Fatal(err)
					}
				}
				run()
				c0 := processCPU()
				for b.Loop() {
					run()
				}
				flops := 10 * float64(h*l*l*d) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(processCPU()-c0)/1e9, "cpu-GFLOP/s")
			})
		}
	}
}
