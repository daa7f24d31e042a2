package planner

import (
	"encoding/json"
	"fmt"

	"ferry/residency"
)

// VAEConfig is the part of an AutoencoderKLWan config.json the planner's
// formulas read (model/wanvae's Config holds all of it; see vaeConfigOf).
type VAEConfig struct {
	BaseDim            int    `json:"base_dim"`
	ZDim               int    `json:"z_dim"`
	DimMult            []int  `json:"dim_mult"`
	NumResBlocks       int    `json:"num_res_blocks"`
	TemperalDownsample []bool `json:"temperal_downsample"`
	// The Wan 2.2 layout (TI2V-5B): the decoder's own base width, residual
	// up and down blocks, and pixels folded patch×patch into channels
	// around the encoder and decoder (16× spatial compression with 4
	// levels). Zero values are Wan 2.1's.
	DecoderBaseDim int  `json:"decoder_base_dim"`
	IsResidual     bool `json:"is_residual"`
	PatchSize      int  `json:"patch_size"`
}

// Wan21VAE is Wan 2.1's VAE: base 96, z 16, dim_mult [1 2 4 4], two
// residual blocks per level, temporal downsampling in the last two levels
// (8× spatial and 4× temporal compression).
func Wan21VAE() VAEConfig {
	return VAEConfig{BaseDim: 96, ZDim: 16, DimMult: []int{1, 2, 4, 4}, NumResBlocks: 2, TemperalDownsample: []bool{false, true, true}}
}

// ParseVAEConfig reads a config.json, keeping Wan 2.1's values for keys it
// lacks.
func ParseVAEConfig(raw []byte) (VAEConfig, error) {
	c := Wan21VAE()
	if err := json.Unmarshal(raw, &c); err != nil {
		return VAEConfig{}, fmt.Errorf("vae config: %w", err)
	}
	return c, c.Validate()
}

// Validate says what is wrong with a config.
func (c VAEConfig) Validate() error {
	if c.BaseDim <= 0 || c.ZDim <= 0 || c.NumResBlocks <= 0 || len(c.DimMult) < 2 {
		return fmt.Errorf("vae config: base_dim %d, z_dim %d, num_res_blocks %d must be > 0 and dim_mult %v needs 2 levels or more",
			c.BaseDim, c.ZDim, c.NumResBlocks, c.DimMult)
	}
	if len(c.TemperalDownsample) != len(c.DimMult)-1 {
		return fmt.Errorf("vae config: temperal_downsample has %d entries for %d levels (want %d)", len(c.TemperalDownsample), len(c.DimMult), len(c.DimMult)-1)
	}
	return nil
}

// SpatialScale is the pixels per latent position along H and W.
func (c VAEConfig) SpatialScale() int { return c.patch() << (len(c.DimMult) - 1) }

// patch is the pixel patch folded into channels (1 without one).
func (c VAEConfig) patch() int { return max(c.PatchSize, 1) }

// decoderBase is the decoder's base width (decoder_base_dim, else base_dim).
func (c VAEConfig) decoderBase() int {
	if c.DecoderBaseDim > 0 {
		return c.DecoderBaseDim
	}
	return c.BaseDim
}

// TemporalScale is the frames per latent frame (after the first).
func (c VAEConfig) TemporalScale() int {
	s := 1
	for _, t := range c.TemperalDownsample {
		if t {
			s *= 2
		}
	}
	return s
}

// vaeConv is one convolution of the decoder as the planner counts it.
type vaeConv struct {
	block      string
	in, out    int
	kernel     int  // kernel volume
	causal     bool // a 3-D causal conv that caches its last 2 input frames
	scale      int  // spatial scale relative to the latent (1, 2, 4, 8)
	frames     int  // frames per latent chunk at this point (steady state)
	attentionC int  // > 0: a per-frame self-attention of this width (not a conv)
}

// decoderConvs walks WanDecoder3d: conv_in, the mid block (resnet,
// attention, resnet), the up blocks (num_res_blocks+1 resnets each, then
// an upsampler that halves the channels) and the output conv.
func (c VAEConfig) decoderConvs() []vaeConv {
	levels := len(c.DimMult)
	dims := []int{c.BaseDim * c.DimMult[levels-1]}
	for i := levels - 1; i >= 0; i-- {
		dims = append(dims, c.BaseDim*c.DimMult[i])
	}
	var out []vaeConv
	scale, frames := 1, 1
	add := func(block string, in, o, k int, causal bool) {
		out = append(out, vaeConv{block: block, in: in, out: o, kernel: k, causal: causal, scale: scale, frames: frames})
	}
	resnet := func(block string, in, o int) {
		add(block, in, o, 27, true)
		add(block, o, o, 27, true)
		if in != o {
			add(block, in, o, 1, true)
		}
	}
	add("decoder.in", c.ZDim, c.ZDim, 1, false)
	add("decoder.in", c.ZDim, dims[0], 27, true)
	resnet("decoder.mid", dims[0], dims[0])
	out = append(out, vaeConv{block: "decoder.mid", attentionC: dims[0], scale: scale, frames: frames})
	resnet("decoder.mid", dims[0], dims[0])
	for i := 0; i < levels; i++ {
		in, o := dims[i], dims[i+1]
		if i > 0 {
			in /= 2
		}
		for j := 0; j <= c.NumResBlocks; j++ {
			resnet(fmt.Sprintf("decoder.up.%d.res.%d", i, j), in, o)
			in = o
		}
		if i == levels-1 {
			continue
		}
		block := fmt.Sprintf("decoder.up.%d.upsample", i)
		temporal := c.TemperalDownsample[len(c.TemperalDownsample)-1-i]
		if temporal {
			add(block, o, 2*o, 3, true)
			frames *= 2
		}
		scale *= 2
		add(block, o, o/2, 9, false)
	}
	add("decoder.out", dims[levels], 3, 27, true)
	return out
}

// DecoderParams lists the decoder's weights grouped into model/wanvae's
// blocks (decoder.in, decoder.mid, decoder.up.i.res.j,
// decoder.up.i.upsample, decoder.out) under made-up tensor names: the
// planner only needs the sizes and the grouping. Profiles built from
// model/wanvae use its own list.
func (c VAEConfig) DecoderParams() []residency.ParamSpec {
	var ps []residency.ParamSpec
	n := map[string]int{}
	for _, cv := range c.decoderConvs() {
		i := n[cv.block]
		n[cv.block]++
		name := fmt.Sprintf("%s.op%d", cv.block, i)
		if cv.attentionC > 0 {
			ch := cv.attentionC
			ps = append(ps,
				residency.ParamSpec{Block: cv.block, Name: name + ".norm.gamma", Shape: []int{ch, 1, 1}},
				residency.ParamSpec{Block: cv.block, Name: name + ".to_qkv.weight", Shape: []int{3 * ch, ch, 1, 1}},
				residency.ParamSpec{Block: cv.block, Name: name + ".to_qkv.bias", Shape: []int{3 * ch}},
				residency.ParamSpec{Block: cv.block, Name: name + ".proj.weight", Shape: []int{ch, ch, 1, 1}},
				residency.ParamSpec{Block: cv.block, Name: name + ".proj.bias", Shape: []int{ch}})
			continue
		}
		if cv.kernel == 27 && cv.in != 3 {
			ps = append(ps, residency.ParamSpec{Block: cv.block, Name: name + ".norm.gamma", Shape: []int{cv.in, 1, 1, 1}})
		}
		ps = append(ps,
			residency.ParamSpec{Block: cv.block, Name: name + ".weight", Shape: []int{cv.out, cv.in, cv.kernel}},
			residency.ParamSpec{Block: cv.block, Name: name + ".bias", Shape: []int{cv.out}})
	}
	return ps
}
