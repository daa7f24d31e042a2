package clipvision

import (
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/tensor"
)

// BenchmarkLayerViTH times one encoder layer of Wan 2.1 I2V's ViT-H/14
// (width 1280, MLP 5120 with exact GELU, 16 heads, 257 tokens) on the two
// images of a first-last-frame request, random weights resident: the
// embedding block runs untimed first. Reported: seconds per layer and
// the GFLOP/s of its matrix work.
func BenchmarkLayerViTH(b *testing.B) {
	cfg := tinyConfig(b, `{"hidden_size":1280,"intermediate_size":5120,"num_hidden_layers":2,"num_attention_heads":16,"image_size":224,"patch_size":14,"hidden_act":"gelu"}`)
	r := newRig(b, nil, gemm.Best())
	m := r.tower(b, cfg, synthesize(cfg, 1))
	const batch = 2
	pixels := modeltest.Randn(2, batch*3*cfg.ImageSize*cfg.ImageSize)
	r.encode(b, m, pixels, batch) // load the weights
	ops := r.Ex.Ops(component)
	var x *tensor.Tensor
	embed, layer := m.comp.Blocks[0], m.comp.Blocks[1]
	if err := r.Ex.Run(embed, func() error { x = m.embed.apply(ops, pixels, batch, &m.cfg); return ops.Err() }); err != nil {
		b.Fatal(err)
	}
	defer x.Free()
	b.ResetTimer()
	for range b.N {
		if err := r.Ex.Run(layer, func() error { m.layers[0].apply(ops, x, &m.cfg, m.act); return ops.Err() }); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	d, f, L := float64(cfg.HiddenSize), float64(cfg.IntermediateSize), float64(cfg.Tokens())
	flops := batch * 2 * (L*(4*d*d+2*d*f) + 2*L*L*d)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec, "s/layer")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
}
