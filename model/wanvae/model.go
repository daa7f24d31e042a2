package wanvae

import (
	"fmt"

	"ferry/residency"
	"ferry/tensor"
)

// Tiling is diffusers' spatial tiling (enable_tiling), in sample pixels:
// tiles of MinHeight × MinWidth every StrideHeight × StrideWidth, blended
// over the overlap. Decode and Encode tile only when the input exceeds one
// tile, as diffusers does.
type Tiling struct {
	MinHeight, MinWidth       int
	StrideHeight, StrideWidth int
}

// DefaultTiling is diffusers' default: 256-pixel tiles every 192 pixels.
func DefaultTiling() Tiling {
	return Tiling{MinHeight: 256, MinWidth: 256, StrideHeight: 192, StrideWidth: 192}
}

// SquareTiling is the tiling a plan's vae_tile / vae_stride ask for
// (residency.RunOptions): square tiles of tile pixels every stride pixels,
// stride 3/4 of the tile when 0; nil (untiled) when tile is 0.
func SquareTiling(tile, stride int) *Tiling {
	if tile <= 0 {
		return nil
	}
	if stride <= 0 {
		stride = tile * 3 / 4
	}
	return &Tiling{MinHeight: tile, MinWidth: tile, StrideHeight: stride, StrideWidth: stride}
}

// validate checks that every tile and stride covers at least one latent
// (the reference would loop with step 0 otherwise) and that tiles overlap
// or touch (a stride beyond the tile would leave gaps).
func (t Tiling) validate(scale int) error {
	if t.MinHeight < scale || t.MinWidth < scale || t.StrideHeight < scale || t.StrideWidth < scale {
		return fmt.Errorf("wanvae: tiling %+v: tiles and strides must be at least %d pixels (one latent)", t, scale)
	}
	if t.StrideHeight > t.MinHeight || t.StrideWidth > t.MinWidth {
		return fmt.Errorf("wanvae: tiling %+v: a stride larger than the tile leaves gaps", t)
	}
	return nil
}

// Options tune how Decode and Encode spend memory.
type Options struct {
	// Tiling, when set, decodes and encodes in overlapping spatial tiles
	// (which changes the result slightly, as in diffusers).
	Tiling *Tiling
	// OnFrame, when set, is called after every latent frame decoded or
	// frame chunk encoded, with the count done and the total (over all
	// tiles when tiled).
	OnFrame func(done, total int)
}

// conv is a Conv2d/Conv3d (weight [O, C, kernel...], bias [O]).
type conv struct {
	W *tensor.Tensor `w:"weight"`
	B *tensor.Tensor `w:"bias"`
}

// resCore is a WanResidualBlock without its shortcut: RMS norm, SiLU,
// causal 3×3×3 conv, twice. The norms' gammas are [C, 1, 1, 1].
type resCore struct {
	Norm1 *tensor.Tensor `w:"norm1.gamma"`
	Conv1 conv           `w:"conv1"`
	Norm2 *tensor.Tensor `w:"norm2.gamma"`
	Conv2 conv           `w:"conv2"`
}

// resWeights is a residual block with the 1×1×1 shortcut it has when its
// channels change. The residency block binds the whole struct or only Core,
// so a checkpoint must hold exactly the weights the config implies.
type resWeights struct {
	Core     resCore `w:""`
	Shortcut conv    `w:"conv_shortcut"`
}

// resLayer is one residual block and its channels.
type resLayer struct {
	w       resWeights
	in, out int
}

func (l *resLayer) weights() any {
	if l.in != l.out {
		return &l.w
	}
	return &l.w.Core
}

// resampleCore is the spatial half of a WanResample: the 3×3 Conv2d after
// the 2× nearest upsample or the zero pad of a downsample.
type resampleCore struct {
	Conv conv `w:"resample.1"`
}

// resampleWeights adds the temporal conv of upsample3d / downsample3d.
type resampleWeights struct {
	Core resampleCore `w:""`
	Time conv         `w:"time_conv"`
}

// resampleLayer is one WanResample.
type resampleLayer struct {
	w        resampleWeights
	temporal bool
}

func (l *resampleLayer) weights() any {
	if l.temporal {
		return &l.w
	}
	return &l.w.Core
}

// attnWeights is WanAttentionBlock: RMS norm (gamma [C, 1, 1]), a 1×1
// conv to q, k, v and a 1×1 output projection.
type attnWeights struct {
	Norm *tensor.Tensor `w:"norm.gamma"`
	QKV  conv           `w:"to_qkv"`
	Proj conv           `w:"proj"`
}

// midWeights is WanMidBlock with one attention layer.
type midWeights struct {
	Res0 resCore     `w:"resnets.0"`
	Attn attnWeights `w:"attentions.0"`
	Res1 resCore     `w:"resnets.1"`
}

type encInWeights struct {
	Conv conv `w:"encoder.conv_in"`
}

type encOutWeights struct {
	Norm  *tensor.Tensor `w:"encoder.norm_out.gamma"`
	Conv  conv           `w:"encoder.conv_out"`
	Quant conv           `w:"quant_conv"`
}

type decInWeights struct {
	PostQuant conv `w:"post_quant_conv"`
	Conv      conv `w:"decoder.conv_in"`
}

type decOutWeights struct {
	Norm *tensor.Tensor `w:"decoder.norm_out.gamma"`
	Conv conv           `w:"decoder.conv_out"`
}

// encLayer is one entry of encoder.down_blocks (Wan 2.1) or one layer of
// a WanResidualDownBlock (Wan 2.2): a residual block or a downsampler.
type encLayer struct {
	res    *resLayer
	down   *resampleLayer
	prefix string
	// avg (first layer of a residual level) is the shortcut taken from
	// the layer's input; closes (last layer) adds it to the output.
	avg    *shortcutSpec
	closes bool
}

// decLevel is one of decoder.up_blocks.
type decLevel struct {
	res       []*resLayer
	resPrefix []string
	up        *resampleLayer // nil on the last level
	upPrefix  string
	// dup is the DupUp3D shortcut of a residual level: the level's input,
	// duplicated, is added to the upsampler's output.
	dup *shortcutSpec
}

// encBlocks and decBlocks are the declared residency blocks, in the order
// the passes run them.
type encBlocks struct {
	in, mid, out *residency.Block
	down         []*residency.Block
}

type decBlocks struct {
	in, mid, out *residency.Block
	res          [][]*residency.Block
	up           []*residency.Block
}

// Model is the VAE's weights, declared as residency blocks, and its encode
// and decode passes. The executor binds the weights only while a block runs.
type Model struct {
	cfg Config
	// Options may be changed between calls.
	Options Options

	encIn   encInWeights
	encDown []encLayer
	encMid  midWeights
	encOut  encOutWeights

	decIn  decInWeights
	decMid midWeights
	decUp  []decLevel
	decOut decOutWeights

	enc *encBlocks
	dec *decBlocks
	// srcErr is what CheckSource said of the source of the blocks declared
	// last; Decode and Encode refuse to run with a bad checkpoint.
	srcErr error
}

// New makes a VAE for cfg (normally the result of ParseConfig).
func New(cfg Config) *Model {
	m := &Model{cfg: cfg}
	for _, l := range cfg.encoderLayers() {
		e := encLayer{prefix: l.prefix, avg: l.avg, closes: l.closes}
		if l.kind == resLayerKind {
			e.res = &resLayer{in: l.in, out: l.out}
		} else {
			e.down = &resampleLayer{temporal: l.temporal}
		}
		m.encDown = append(m.encDown, e)
	}
	for i, level := range cfg.decoderLevels() {
		d := decLevel{dup: cfg.dupUp(i)}
		for _, l := range level {
			if l.kind == resLayerKind {
				d.res = append(d.res, &resLayer{in: l.in, out: l.out})
				d.resPrefix = append(d.resPrefix, l.prefix)
			} else {
				d.up, d.upPrefix = &resampleLayer{temporal: l.temporal}, l.prefix
			}
		}
		m.decUp = append(m.decUp, d)
	}
	return m
}

// Config is the configuration the model was made with.
func (m *Model) Config() Config { return m.cfg }

// Component declares the whole VAE over src: the encoder's blocks, then
// the decoder's (see the package comment for the names). Decode and Encode
// run the blocks most recently declared; declare once and register the
// component with the executor. The source's shapes are checked against the
// config here (Config.CheckSource); Decode and Encode return a mismatch,
// naming the tensor. A pipeline that only decodes should use
// DecoderComponent, so that a streamed plan prefetches decoder blocks only.
func (m *Model) Component(name string, src residency.Source) *residency.Component {
	c := &residency.Component{Name: name, Source: src}
	c.Blocks = append(m.declareEncoder(name), m.declareDecoder(name)...)
	m.srcErr = m.cfg.CheckSource(src)
	return c
}

// DecoderComponent declares the decoder's blocks only; Encode then fails.
func (m *Model) DecoderComponent(name string, src residency.Source) *residency.Component {
	m.enc = nil
	m.srcErr = checkParams(m.cfg.DecoderParams(), src)
	return &residency.Component{Name: name, Source: src, Blocks: m.declareDecoder(name)}
}

// EncoderComponent declares the encoder's blocks only; Decode then fails.
func (m *Model) EncoderComponent(name string, src residency.Source) *residency.Component {
	m.dec = nil
	m.srcErr = checkParams(m.cfg.EncoderParams(), src)
	return &residency.Component{Name: name, Source: src, Blocks: m.declareEncoder(name)}
}

func block(component, suffix, prefix string, weights any) *residency.Block {
	return &residency.Block{Name: component + "." + suffix, Prefix: prefix, Weights: weights}
}

func (m *Model) declareEncoder(name string) []*residency.Block {
	e := &encBlocks{
		in:  block(name, encInBlock, "", &m.encIn),
		mid: block(name, encMidBlock, "encoder.mid_block.", &m.encMid),
		out: block(name, encOutBlock, "", &m.encOut),
	}
	all := []*residency.Block{e.in}
	for k, l := range m.encDown {
		var w any
		if l.res != nil {
			w = l.res.weights()
		} else {
			w = l.down.weights()
		}
		b := block(name, encDownBlock(k), l.prefix, w)
		e.down = append(e.down, b)
		all = append(all, b)
	}
	m.enc = e
	return append(all, e.mid, e.out)
}

func (m *Model) declareDecoder(name string) []*residency.Block {
	d := &decBlocks{
		in:  block(name, decInBlock, "", &m.decIn),
		mid: block(name, decMidBlock, "decoder.mid_block.", &m.decMid),
		out: block(name, decOutBlock, "", &m.decOut),
	}
	all := []*residency.Block{d.in, d.mid}
	for i, level := range m.decUp {
		var res []*residency.Block
		for j, l := range level.res {
			b := block(name, decResBlock(i, j), level.resPrefix[j], l.weights())
			res = append(res, b)
			all = append(all, b)
		}
		d.res = append(d.res, res)
		var up *residency.Block
		if level.up != nil {
			up = block(name, decUpsampleBlock(i), level.upPrefix, level.up.weights())
			all = append(all, up)
		}
		d.up = append(d.up, up)
	}
	m.dec = d
	return append(all, d.out)
}
