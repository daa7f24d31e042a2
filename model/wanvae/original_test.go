package wanvae

import (
	"testing"

	"ferry/model/wan/wantest"
)

// Pairs from Wan2.1_VAE.pth beside the names diffusers' converter gives
// them, written out by hand.
var originalPairs = [][2]string{
	{"conv1.weight", "quant_conv.weight"},
	{"conv2.bias", "post_quant_conv.bias"},
	{"encoder.conv1.weight", "encoder.conv_in.weight"},
	{"decoder.conv1.bias", "decoder.conv_in.bias"},
	{"encoder.head.0.gamma", "encoder.norm_out.gamma"},
	{"decoder.head.2.weight", "decoder.conv_out.weight"},
	{"encoder.middle.0.residual.0.gamma", "encoder.mid_block.resnets.0.norm1.gamma"},
	{"decoder.middle.2.residual.6.weight", "decoder.mid_block.resnets.1.conv2.weight"},
	{"decoder.middle.1.to_qkv.weight", "decoder.mid_block.attentions.0.to_qkv.weight"},
	{"encoder.middle.1.norm.gamma", "encoder.mid_block.attentions.0.norm.gamma"},
	{"encoder.downsamples.3.shortcut.weight", "encoder.down_blocks.3.conv_shortcut.weight"},
	{"encoder.downsamples.5.time_conv.bias", "encoder.down_blocks.5.time_conv.bias"},
	{"encoder.downsamples.2.resample.1.weight", "encoder.down_blocks.2.resample.1.weight"},
	{"encoder.downsamples.0.residual.3.gamma", "encoder.down_blocks.0.norm2.gamma"},
	{"decoder.upsamples.0.residual.0.gamma", "decoder.up_blocks.0.resnets.0.norm1.gamma"},
	{"decoder.upsamples.6.residual.2.bias", "decoder.up_blocks.1.resnets.2.conv1.bias"},
	{"decoder.upsamples.4.shortcut.weight", "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"},
	{"decoder.upsamples.14.residual.6.weight", "decoder.up_blocks.3.resnets.2.conv2.weight"},
	{"decoder.upsamples.3.resample.1.weight", "decoder.up_blocks.0.upsamplers.0.resample.1.weight"},
	{"decoder.upsamples.7.time_conv.bias", "decoder.up_blocks.1.upsamplers.0.time_conv.bias"},
	{"decoder.upsamples.11.resample.1.bias", "decoder.up_blocks.2.upsamplers.0.resample.1.bias"},
}

// Pairs from Wan2.2_VAE.pth beside the names diffusers' converter
// (convert_vae_22) gives them, written out by hand: each level nests its
// residual blocks and, last, its resampler.
var original22Pairs = [][2]string{
	{"encoder.downsamples.0.downsamples.0.residual.0.gamma", "encoder.down_blocks.0.resnets.0.norm1.gamma"},
	{"encoder.downsamples.1.downsamples.0.shortcut.weight", "encoder.down_blocks.1.resnets.0.conv_shortcut.weight"},
	{"encoder.downsamples.2.downsamples.1.residual.6.bias", "encoder.down_blocks.2.resnets.1.conv2.bias"},
	{"encoder.downsamples.0.downsamples.2.resample.1.weight", "encoder.down_blocks.0.downsampler.resample.1.weight"},
	{"encoder.downsamples.1.downsamples.2.time_conv.bias", "encoder.down_blocks.1.downsampler.time_conv.bias"},
	{"decoder.upsamples.0.upsamples.2.residual.3.gamma", "decoder.up_blocks.0.resnets.2.norm2.gamma"},
	{"decoder.upsamples.1.upsamples.0.residual.2.weight", "decoder.up_blocks.1.resnets.0.conv1.weight"},
	{"decoder.upsamples.0.upsamples.3.time_conv.weight", "decoder.up_blocks.0.upsampler.time_conv.weight"},
	{"decoder.upsamples.2.upsamples.3.resample.1.bias", "decoder.up_blocks.2.upsampler.resample.1.bias"},
	{"decoder.middle.1.proj.weight", "decoder.mid_block.attentions.0.proj.weight"},
	{"encoder.head.2.bias", "encoder.conv_out.bias"},
}

// Both tables map to diffusers' names, and the tests' own inverses
// (wantest) map them back.
func TestDiffusersName(t *testing.T) {
	for _, c := range []struct {
		name     string
		pairs    [][2]string
		original func(string) string
	}{
		{"2.1", originalPairs, wantest.OriginalVAEName},
		{"2.2", original22Pairs, wantest.OriginalVAE22Name(2)},
	} {
		for _, p := range c.pairs {
			if got, _ := diffusersName(p[0]); got != p[1] {
				t.Errorf("%s: %s: got %q, want %q", c.name, p[0], got, p[1])
			}
			if got := c.original(p[1]); got != p[0] {
				t.Errorf("%s: the inverse of %s is %q, want %q", c.name, p[1], got, p[0])
			}
		}
	}
	for name, want := range map[string]bool{
		"decoder.upsamples.0.residual.0.gamma":                 true,
		"encoder.downsamples.0.downsamples.0.residual.0.gamma": true,
		"decoder.up_blocks.0.resnets.0.norm1.gamma":            false,
	} {
		if originalLayout([]string{name}) != want {
			t.Errorf("layout detection of %s: want %v", name, want)
		}
	}
}

// Every weight of the Wan 2.1 and Wan 2.2 VAEs has an original name that
// maps back to it, distinct from every other's.
func TestOriginalNamesRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name, config string
		original     func(string) string
	}{
		{"2.1", `{}`, wantest.OriginalVAEName},
		{"2.2", ti2v5bConfig, wantest.OriginalVAE22Name(2)},
	} {
		cfg, err := ParseConfig([]byte(c.config))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for _, p := range cfg.Params() {
			orig := c.original(p.Name)
			if prev, dup := seen[orig]; dup {
				t.Fatalf("%s: %s and %s are both %s", c.name, prev, p.Name, orig)
			}
			seen[orig] = p.Name
			if got, _ := diffusersName(orig); got != p.Name {
				t.Errorf("%s: %s -> %s -> %s", c.name, p.Name, orig, got)
			}
		}
	}
}

// Renaming never panics.
func FuzzDiffusersName(f *testing.F) {
	for _, p := range append(originalPairs, original22Pairs...) {
		f.Add(p[0])
	}
	f.Add("decoder.upsamples.-1.residual.0.gamma")
	f.Add("encoder.downsamples.0.downsamples")
	f.Add("decoder.upsamples.99999999999999999999.x")
	f.Fuzz(func(t *testing.T, name string) { diffusersName(name) })
}
