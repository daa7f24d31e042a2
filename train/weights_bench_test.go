package train

import (
	"os"
	"strconv"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/catalog"
	"ferry/residency"
	"ferry/tensor"
)

// BenchmarkLoRAStep is one LoRA training step (fp32, rank 16) with the
// frozen weights resident against streamed from the host tier with one
// block of prefetch: the cost of streaming when compute outlasts the
// copies. By default on wan-tiny; FERRY_BENCH_WIDE=N runs N blocks of the
// 1.3B model's width (dim 1536, ffn 8960) on FERRY_BENCH_TOKENS tokens
// (default 256). Run the sub-benchmarks interleaved (-count) on a quiet
// machine. It reports the stalls and copy time per step, forward and
// backward apart.
func BenchmarkLoRAStep(b *testing.B) {
	w := catalog.WanTiny()
	tokens := 64
	if n, err := strconv.Atoi(os.Getenv("FERRY_BENCH_WIDE")); err == nil && n > 0 {
		w = catalog.Wan1_3B()
		w.Transformer.NumLayers = n
		tokens = 256
	}
	if n, err := strconv.Atoi(os.Getenv("FERRY_BENCH_TOKENS")); err == nil && n > 0 {
		tokens = n
	}
	cfg, set := synthTransformer(b, w)
	batch := tinyBatch(cfg)
	side := 2
	for side*side < tokens {
		side++
	}
	batch.LatentShape = []int{1, cfg.InChannels, 1, 2 * side, 2 * side}
	n := tensor.NumElems(batch.LatentShape)
	rng := NewRNG(9)
	batch.Latents, batch.Noise = rng.Normals(n), rng.Normals(n)
	for _, p := range plans()[:2] { // resident, stream k=1 from the host
		b.Run(p.Name, func(b *testing.B) {
			dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
			be, hostBe := cpu.New(dev, gemm.Best()), cpu.New(host, gemm.Best())
			ex, err := residency.New(residency.Config{Backend: be, HostBackend: hostBe, Plan: p, Dense: true})
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			opt := WanOptions{LoRA: LoRAOptions{Rank: 16, Alpha: 16}, Residency: &Residency{Exec: ex, Host: host}}
			net, err := NewWanNet(tensor.NewOps(be), cfg, set, opt, NewRNG(3))
			if err != nil {
				b.Fatal(err)
			}
			defer net.Close()
			tr, err := New(Config{Steps: b.N + 1, Adam: DefaultAdam(1e-4)}, net, FixedData{B: batch}, NewRNG(5))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.Train(); err != nil { // warm-up: first loads, first touch
				b.Fatal(err)
			}
			before := ex.Stats()
			b.ResetTimer()
			for range b.N {
				if _, err := tr.Train(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := ex.Stats()
			for _, ph := range []string{PhaseForward, PhaseBackward} {
				a, z := after.Phases[ph], before.Phases[ph]
				b.ReportMetric((a.CopyWait-z.CopyWait).Seconds()*1e3/float64(b.N), ph[:3]+"-wait-ms/op")
				b.ReportMetric((a.CopyTime-z.CopyTime).Seconds()*1e3/float64(b.N), ph[:3]+"-copy-ms/op")
			}
		})
	}
}
