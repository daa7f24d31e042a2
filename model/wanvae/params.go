package wanvae

import (
	"fmt"
	"slices"
	"strings"

	"ferry/residency"
)

// Block name suffixes (the residency block is "<component>.<suffix>").
const (
	encInBlock  = "encoder.in"
	encMidBlock = "encoder.mid"
	encOutBlock = "encoder.out"
	decInBlock  = "decoder.in"
	decMidBlock = "decoder.mid"
	decOutBlock = "decoder.out"
)

func encDownBlock(k int) string { return fmt.Sprintf("encoder.down.%d", k) }

func decResBlock(i, j int) string { return fmt.Sprintf("decoder.up.%d.res.%d", i, j) }

func decUpsampleBlock(i int) string { return fmt.Sprintf("decoder.up.%d.upsample", i) }

// layerKind says what one layer of the encoder's or decoder's chain is.
type layerKind int

const (
	resLayerKind layerKind = iota
	downLayerKind
	upLayerKind
)

// layerSpec is one residual block or resampler with its channels; a
// resampler's in and out are the channels it reads and writes.
type layerSpec struct {
	kind     layerKind
	in, out  int
	temporal bool   // a resampler that also halves or doubles the frames
	prefix   string // its checkpoint names' prefix, e.g. "encoder.down_blocks.2."
	// In the residual (Wan 2.2) encoder, avg is set on the first layer of
	// a WanResidualDownBlock (its shortcut is taken from that layer's
	// input) and closes on the last (the shortcut is added to its output).
	avg    *shortcutSpec
	closes bool
}

// shortcutSpec is a parameter-free AvgDown3D or DupUp3D: in and out
// channels, the temporal and spatial factors.
type shortcutSpec struct {
	in, out, ft, fs int
}

// factor is the number of input positions one output position averages
// (AvgDown3D) or one input position becomes (DupUp3D).
func (s shortcutSpec) factor() int { return s.ft * s.fs * s.fs }

// encoderLayers is diffusers' encoder.down_blocks flattened: per level
// num_res_blocks residual blocks, then a downsampler on every level but
// the last. Wan 2.1 lists them directly as down_blocks.K; Wan 2.2 groups
// each level into a WanResidualDownBlock with an AvgDown3D shortcut.
func (c Config) encoderLayers() []layerSpec {
	dims := c.encoderDims()
	last := len(c.DimMult) - 1
	var ls []layerSpec
	for i := range c.DimMult {
		in, out := dims[i], dims[i+1]
		first := len(ls)
		for j := range c.NumResBlocks {
			prefix := fmt.Sprintf("encoder.down_blocks.%d.", len(ls))
			if c.IsResidual {
				prefix = fmt.Sprintf("encoder.down_blocks.%d.resnets.%d.", i, j)
			}
			ls = append(ls, layerSpec{kind: resLayerKind, in: in, out: out, prefix: prefix})
			in = out
		}
		if i != last {
			prefix := fmt.Sprintf("encoder.down_blocks.%d.", len(ls))
			if c.IsResidual {
				prefix = fmt.Sprintf("encoder.down_blocks.%d.downsampler.", i)
			}
			ls = append(ls, layerSpec{kind: downLayerKind, in: out, out: out, temporal: c.TemperalDownsample[i], prefix: prefix})
		}
		if c.IsResidual {
			avg := shortcutSpec{in: dims[i], out: out, ft: 1, fs: 1}
			if i != last {
				avg.fs = 2
				if c.TemperalDownsample[i] {
					avg.ft = 2
				}
			}
			ls[first].avg = &avg
			ls[len(ls)-1].closes = true
		}
	}
	return ls
}

// decoderLevels is diffusers' decoder.up_blocks: per level num_res_blocks+1
// residual blocks, then an upsampler on every level but the last. In Wan
// 2.1 the upsampler halves the channels and the next level reads the
// halved output; in Wan 2.2 it keeps them (upsample_out_dim = out_dim).
func (c Config) decoderLevels() [][]layerSpec {
	dims := c.decoderDims()
	levels := make([][]layerSpec, len(c.DimMult))
	for i := range c.DimMult {
		in, out := dims[i], dims[i+1]
		if i > 0 && !c.IsResidual {
			in /= 2
		}
		for j := range c.NumResBlocks + 1 {
			prefix := fmt.Sprintf("decoder.up_blocks.%d.resnets.%d.", i, j)
			levels[i] = append(levels[i], layerSpec{kind: resLayerKind, in: in, out: out, prefix: prefix})
			in = out
		}
		if i == len(c.DimMult)-1 {
			continue
		}
		up := layerSpec{kind: upLayerKind, in: out, out: out / 2, temporal: c.temporalUpsample(i),
			prefix: fmt.Sprintf("decoder.up_blocks.%d.upsamplers.0.", i)}
		if c.IsResidual {
			up.out, up.prefix = out, fmt.Sprintf("decoder.up_blocks.%d.upsampler.", i)
		}
		levels[i] = append(levels[i], up)
	}
	return levels
}

// dupUp is the DupUp3D shortcut of residual decoder level i (nil on the
// last level, which does not upsample, and in Wan 2.1).
func (c Config) dupUp(i int) *shortcutSpec {
	if !c.IsResidual || i == len(c.DimMult)-1 {
		return nil
	}
	dims := c.decoderDims()
	s := shortcutSpec{in: dims[i], out: dims[i+1], ft: 1, fs: 2}
	if c.temporalUpsample(i) {
		s.ft = 2
	}
	return &s
}

// paramList collects ParamSpecs.
type paramList []residency.ParamSpec

func (ps *paramList) add(block, name string, shape ...int) {
	*ps = append(*ps, residency.ParamSpec{Block: block, Name: name, Shape: shape})
}

// conv adds a convolution's weight [out, in, kernel...] and bias.
func (ps *paramList) conv(block, name string, out, in int, kernel ...int) {
	ps.add(block, name+".weight", append([]int{out, in}, kernel...)...)
	ps.add(block, name+".bias", out)
}

func (ps *paramList) layer(block, p string, l layerSpec) {
	switch l.kind {
	case resLayerKind:
		ps.add(block, p+"norm1.gamma", l.in, 1, 1, 1)
		ps.conv(block, p+"conv1", l.out, l.in, 3, 3, 3)
		ps.add(block, p+"norm2.gamma", l.out, 1, 1, 1)
		ps.conv(block, p+"conv2", l.out, l.out, 3, 3, 3)
		if l.in != l.out {
			ps.conv(block, p+"conv_shortcut", l.out, l.in, 1, 1, 1)
		}
	case downLayerKind:
		ps.conv(block, p+"resample.1", l.out, l.in, 3, 3)
		if l.temporal {
			ps.conv(block, p+"time_conv", l.in, l.in, 3, 1, 1)
		}
	case upLayerKind:
		ps.conv(block, p+"resample.1", l.out, l.in, 3, 3)
		if l.temporal {
			ps.conv(block, p+"time_conv", 2*l.in, l.in, 3, 1, 1)
		}
	}
}

// mid adds a WanMidBlock of d channels: resnets.0, attentions.0, resnets.1.
func (ps *paramList) mid(block, p string, d int) {
	ps.layer(block, p+"resnets.0.", layerSpec{kind: resLayerKind, in: d, out: d})
	ps.add(block, p+"attentions.0.norm.gamma", d, 1, 1)
	ps.conv(block, p+"attentions.0.to_qkv", 3*d, d, 1, 1)
	ps.conv(block, p+"attentions.0.proj", d, d, 1, 1)
	ps.layer(block, p+"resnets.1.", layerSpec{kind: resLayerKind, in: d, out: d})
}

// Params lists every weight of the VAE with the checkpoint name diffusers'
// save_pretrained writes, its shape and its block: the encoder's blocks in
// execution order, then the decoder's.
func (c Config) Params() []residency.ParamSpec {
	var ps paramList
	enc := c.encoderDims()
	ps.conv(encInBlock, "encoder.conv_in", enc[0], c.InChannels, 3, 3, 3)
	for k, l := range c.encoderLayers() {
		ps.layer(encDownBlock(k), l.prefix, l)
	}
	top := enc[len(enc)-1]
	ps.mid(encMidBlock, "encoder.mid_block.", top)
	ps.add(encOutBlock, "encoder.norm_out.gamma", top, 1, 1, 1)
	ps.conv(encOutBlock, "encoder.conv_out", 2*c.ZDim, top, 3, 3, 3)
	ps.conv(encOutBlock, "quant_conv", 2*c.ZDim, 2*c.ZDim, 1, 1, 1)

	dec := c.decoderDims()
	ps.conv(decInBlock, "post_quant_conv", c.ZDim, c.ZDim, 1, 1, 1)
	ps.conv(decInBlock, "decoder.conv_in", dec[0], c.ZDim, 3, 3, 3)
	ps.mid(decMidBlock, "decoder.mid_block.", dec[0])
	for i, level := range c.decoderLevels() {
		for j, l := range level {
			if l.kind == upLayerKind {
				ps.layer(decUpsampleBlock(i), l.prefix, l)
				continue
			}
			ps.layer(decResBlock(i, j), l.prefix, l)
		}
	}
	last := dec[len(dec)-1]
	ps.add(decOutBlock, "decoder.norm_out.gamma", last, 1, 1, 1)
	ps.conv(decOutBlock, "decoder.conv_out", c.OutChannels, last, 3, 3, 3)
	return ps
}

// DecoderParams are the Params of the decoder's blocks only: what a
// DecoderComponent binds (text-to-video never encodes).
func (c Config) DecoderParams() []residency.ParamSpec {
	var out []residency.ParamSpec
	for _, p := range c.Params() {
		if strings.HasPrefix(p.Block, "decoder.") {
			out = append(out, p)
		}
	}
	return out
}

// EncoderParams are the Params of the encoder's blocks only.
func (c Config) EncoderParams() []residency.ParamSpec {
	var out []residency.ParamSpec
	for _, p := range c.Params() {
		if strings.HasPrefix(p.Block, "encoder.") {
			out = append(out, p)
		}
	}
	return out
}

// CheckSource reports the first weight of Params that src lacks or holds
// in another shape, by name. The executor only checks that names exist; a
// misshapen weight would otherwise surface as a convolution shape error
// deep inside a pass.
func (c Config) CheckSource(src residency.Source) error { return checkParams(c.Params(), src) }

func checkParams(ps []residency.ParamSpec, src residency.Source) error {
	for _, p := range ps {
		info, ok := src.Info(p.Name)
		if !ok {
			return fmt.Errorf("wanvae: tensor %q (%v) is missing from the checkpoint", p.Name, p.Shape)
		}
		if !sameShape(p.Name, info.Shape, p.Shape) {
			return fmt.Errorf("wanvae: tensor %q is %v in the checkpoint, the config implies %v", p.Name, info.Shape, p.Shape)
		}
	}
	return nil
}

// sameShape compares a stored shape with the expected one. RMS norm gammas
// only broadcast over the channels, so any number of trailing 1s is the
// same gamma (diffusers stores [C, 1, 1, 1] and [C, 1, 1]).
func sameShape(name string, got, want []int) bool {
	if strings.HasSuffix(name, ".gamma") {
		got, want = trimOnes(got), trimOnes(want)
	}
	return slices.Equal(got, want)
}

func trimOnes(s []int) []int {
	for len(s) > 1 && s[len(s)-1] == 1 {
		s = s[:len(s)-1]
	}
	return s
}
