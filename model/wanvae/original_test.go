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

func TestDiffusersName(t *testing.T) {
	for _, p := range originalPairs {
		if got, _ := diffusersName(p[0]); got != p[1] {
			t.Errorf("%s: got %q, want %q", p[0], got, p[1])
		}
		if got := wantest.OriginalVAEName(p[1]); got != p[0] {
			t.Errorf("wantest.OriginalVAEName(%s) = %q, want %q", p[1], got, p[0])
		}
	}
	if !originalLayout([]string{"decoder.upsamples.0.residual.0.gamma"}) || originalLayout([]string{"decoder.up_blocks.0.resnets.0.norm1.gamma"}) {
		t.Error("layout detection")
	}
}

// Every weight of the Wan 2.1 VAE has an original name that maps back to
// it, distinct from every other's.
func TestOriginalNamesRoundTrip(t *testing.T) {
	c, err := ParseConfig([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, p := range c.Params() {
		orig := wantest.OriginalVAEName(p.Name)
		if prev, dup := seen[orig]; dup {
			t.Fatalf("%s and %s are both %s", prev, p.Name, orig)
		}
		seen[orig] = p.Name
		if got, _ := diffusersName(orig); got != p.Name {
			t.Errorf("%s -> %s -> %s", p.Name, orig, got)
		}
	}
}

// Renaming never panics.
func FuzzDiffusersName(f *testing.F) {
	for _, p := range originalPairs {
		f.Add(p[0])
	}
	f.Add("decoder.upsamples.-1.residual.0.gamma")
	f.Add("decoder.upsamples.99999999999999999999.x")
	f.Fuzz(func(t *testing.T, name string) { diffusersName(name) })
}
