package wanvae

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

func TestParseConfigDefaultsAreWan21(t *testing.T) {
	for _, raw := range []string{`{}`, `{"latents_mean": null, "latents_std": null, "decoder_base_dim": null, "patch_size": null}`} {
		cfg, err := ParseConfig([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, ConfigWan21()) {
			t.Errorf("ParseConfig(%s) = %+v, want ConfigWan21", raw, cfg)
		}
	}
}

func TestParseGoldenConfig(t *testing.T) {
	cfg := loadGolden(t).cfg
	if cfg.BaseDim != 8 || cfg.ZDim != 16 || !reflect.DeepEqual(cfg.DimMult, []int{1, 2, 2, 2}) ||
		!reflect.DeepEqual(cfg.TemperalDownsample, []bool{false, true, true}) || cfg.NumResBlocks != 2 {
		t.Errorf("golden config parsed as %+v", cfg)
	}
	if cfg.SpatialScale() != 8 || cfg.TemporalScale() != 4 || cfg.DecodedFrames(3) != 9 {
		t.Errorf("scales %d, %d, frames %d; want 8, 4, 9", cfg.SpatialScale(), cfg.TemporalScale(), cfg.DecodedFrames(3))
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`{"base_dim": 0}`, "base_dim must be 1 to"},
		{`{"decoder_base_dim": -1}`, "decoder_base_dim must be 1 to"},
		{`{"num_res_blocks": 1000000000}`, "num_res_blocks must be 1 to 65536"},
		{`{"dim_mult": []}`, "dim_mult has 0 levels"},
		{`{"dim_mult": [1, 0, 4, 4]}`, "dim_mult[1] must be > 0"},
		{`{"temperal_downsample": [true]}`, "temperal_downsample has 1 entries, want 3"},
		{`{"attn_scales": [0.5]}`, "attn_scales"},
		{`{"patch_size": 0}`, "patch_size must be > 0"},
		{`{"patch_size": 2}`, "multiples of patch_size² = 4"},
		{`{"scale_factor_spatial": 16}`, "scale_factor_spatial 16, but patch_size and temperal_downsample give 8"},
		{`{"scale_factor_temporal": 8}`, "scale_factor_temporal 8, but temperal_downsample gives 4"},
		{`{"is_residual": true, "base_dim": 6, "dim_mult": [1, 3, 4, 4]}`, "cannot average"},
		{`{"is_residual": true, "dim_mult": [1, 1, 8, 8]}`, "decoder level 2 (768 to 96 channels) cannot duplicate"},
		{`{"z_dim": 8}`, "want z_dim = 8"},
		{`{"base_dim": 3, "dim_mult": [1, 1]}`, "temperal_downsample has 3 entries, want 1"},
		{`{"base_dim": 3, "dim_mult": [1, 1], "temperal_downsample": [true]}`, "cannot halve"},
		{`{"latents_std": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0]}`, "latents_std[15] must be > 0"},
		{`{"base_dim": "x"}`, "wanvae config"},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.raw))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tt.raw, err, tt.want)
		}
	}
}

// TestWan21ParameterCount checks Params of the real architecture against
// 126,892,531 parameters, counted separately from diffusers' module
// structure (encoder 53,595,872 + decoder 73,295,331 + quant_conv 1,056 +
// post_quant_conv 272); the float32 Wan2.1_VAE.pth is 508 MB.
func TestWan21ParameterCount(t *testing.T) {
	count := func(ps []residency.ParamSpec) int {
		n := 0
		for _, p := range ps {
			n += tensor.NumElems(p.Shape)
		}
		return n
	}
	cfg := ConfigWan21()
	if got := count(cfg.Params()); got != 126_892_531 {
		t.Errorf("Wan 2.1 VAE has %d parameters, want 126892531", got)
	}
	if got := count(cfg.DecoderParams()); got != 73_295_331+272 {
		t.Errorf("Wan 2.1 decoder (with post_quant_conv) has %d parameters, want %d", got, 73_295_331+272)
	}
	if got := count(cfg.EncoderParams()); got != 53_595_872+1_056 {
		t.Errorf("Wan 2.1 encoder (with quant_conv) has %d parameters, want %d", got, 53_595_872+1_056)
	}
}

func TestDenormalize(t *testing.T) {
	cfg := ConfigWan21()
	shape := []int{2, 16, 3, 1, 2}
	z := modeltest.Randn(7, tensor.NumElems(shape))
	orig := append([]float32(nil), z...)
	if err := cfg.Denormalize(z, shape); err != nil {
		t.Fatal(err)
	}
	for i, v := range z {
		ch := i / 6 % 16
		want := float64(orig[i])*cfg.LatentsStd[ch] + cfg.LatentsMean[ch]
		if math.Abs(float64(v)-want) > 1e-5*(1+math.Abs(want)) {
			t.Fatalf("Denormalize[%d] (channel %d) = %g, want %g", i, ch, v, want)
		}
	}
	if err := cfg.Normalize(z, shape); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(z, orig); d > 1e-5 {
		t.Errorf("Normalize(Denormalize(z)) is %g away from z", d)
	}
	if err := cfg.Denormalize(z, []int{2, 8, 6, 1, 2}); err == nil {
		t.Error("Denormalize accepted 8 channels")
	}
}

func TestSquareTiling(t *testing.T) {
	tests := []struct {
		tile, stride int
		want         *Tiling
	}{
		{0, 0, nil},
		{256, 0, &Tiling{256, 256, 192, 192}},
		{128, 100, &Tiling{128, 128, 100, 100}},
	}
	for _, tt := range tests {
		if got := SquareTiling(tt.tile, tt.stride); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SquareTiling(%d, %d) = %+v, want %+v", tt.tile, tt.stride, got, tt.want)
		}
	}
	if d := DefaultTiling(); *SquareTiling(256, 192) != d {
		t.Errorf("DefaultTiling() = %+v, want 256-pixel tiles every 192", d)
	}
}
