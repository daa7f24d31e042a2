package wan

import (
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// BenchmarkBlock1_3B times one Wan2.1-1.3B transformer layer (dim 1536,
// 12 heads, ffn 8960) at 1280 tokens (256x256, 17 frames), batch 2 (the
// CFG pair), text length 512, random weights all resident. Reported:
// seconds per block and the GFLOP/s of its matrix work.
func BenchmarkBlock1_3B(b *testing.B) {
	cfg := Config1_3B()
	cfg.NumLayers = 1
	src := synthesize(cfg, 1)
	dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
	g := gemm.Best()
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, g), HostBackend: cpu.New(host, g)})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	m := New(cfg)
	if err := ex.Register(m.Component("transformer", src)); err != nil {
		b.Fatal(err)
	}
	ops := ex.Ops("transformer")
	// 5 latent frames of 32x32 -> 5*16*16 = 1280 tokens.
	shape := []int{2, cfg.InChannels, 5, 32, 32}
	x := ops.Upload(modeltest.Randn(2, tensor.NumElems(shape)), shape...)
	ctx := ops.Upload(modeltest.Randn(3, 2*512*cfg.TextDim), 2, 512, cfg.TextDim)
	defer tensor.Free(x, ctx)
	run := func() {
		out, err := m.Forward(ex, ops, x, []float32{500, 500}, ctx)
		if err != nil {
			b.Fatal(err)
		}
		out.Free()
	}
	run() // load the weights
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	// One layer's linear work: q,k,v,o (4·d²) and the FFN (2·d·ffn) per
	// token, cross-attention q and o per token and k,v per text token,
	// plus self- and cross-attention scores and values.
	d, f, L, T := float64(cfg.InnerDim()), float64(cfg.FFNDim), 1280.0, 512.0
	flops := 2 * 2 * (L*(4*d*d+2*d*f+2*d*d) + T*2*d*d + 2*L*L*d + 2*L*T*d)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec, "s/block")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
}
