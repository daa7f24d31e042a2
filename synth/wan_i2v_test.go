package synth

import (
	"testing"

	"ferry/dtype"
)

// TestImageToVideoArchs: the TI2V-5B, Wan 2.1 I2V-14B and FLF2V-14B and
// Wan 2.2 I2V-A14B folders have the published layout: class, model_index
// settings, components and sizes (5.0B transformer parameters in float32
// for TI2V; 16.4B with the image layers for I2V-14B and FLF2V, whose CLIP
// ViT-H/14 has 632M in float32; 14.3B per float32 expert for I2V-A14B).
func TestImageToVideoArchs(t *testing.T) {
	cases := []struct {
		arch, class string
		expand      bool
		components  []string
		trParams    [2]float64 // billions, bounds
		trDType     dtype.DType
	}{
		{"wan2.2-ti2v-5b", "WanPipeline", true, []string{"scheduler", "text_encoder", "tokenizer", "transformer", "vae"},
			[2]float64{4.9, 5.1}, dtype.F32},
		{"wan2.1-i2v-14b", "WanImageToVideoPipeline", false,
			[]string{"scheduler", "text_encoder", "tokenizer", "transformer", "vae", "image_encoder", "image_processor"},
			[2]float64{16.3, 16.6}, dtype.BF16},
		{"wan2.1-flf2v-14b", "WanImageToVideoPipeline", false,
			[]string{"scheduler", "text_encoder", "tokenizer", "transformer", "vae", "image_encoder", "image_processor"},
			[2]float64{16.3, 16.6}, dtype.BF16},
		{"wan2.2-i2v-a14b", "WanImageToVideoPipeline", false,
			[]string{"scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae"},
			[2]float64{14.2, 14.4}, dtype.F32},
	}
	for _, c := range cases {
		t.Run(c.arch, func(t *testing.T) {
			a, err := Lookup(c.arch)
			if err != nil {
				t.Fatal(err)
			}
			if a.Class != c.class {
				t.Errorf("class %q, want %q", a.Class, c.class)
			}
			if got, _ := a.Settings["expand_timesteps"].(bool); got != c.expand {
				t.Errorf("expand_timesteps %v, want %v", got, c.expand)
			}
			var names []string
			for _, comp := range a.Components {
				names = append(names, comp.Name)
				if comp.Name != "transformer" {
					continue
				}
				var n int64
				for _, p := range comp.Params {
					n += numel(p.Shape)
				}
				if b := float64(n) / 1e9; b < c.trParams[0] || b > c.trParams[1] {
					t.Errorf("transformer has %.2fB parameters, want %.1f to %.1f", b, c.trParams[0], c.trParams[1])
				}
				dt := a.DType
				if dt == 0 {
					dt = dtype.BF16 // ferry synth's default
				}
				if got := comp.storage(Options{DType: dt}); got != c.trDType {
					t.Errorf("transformer stored as %v, want %v", got, c.trDType)
				}
			}
			if len(names) != len(c.components) {
				t.Fatalf("components %v, want %v", names, c.components)
			}
			for i := range names {
				if names[i] != c.components[i] {
					t.Fatalf("components %v, want %v", names, c.components)
				}
			}
		})
	}
}
