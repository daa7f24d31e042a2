package planner

import (
	"encoding/json"
	"ferry/backend/cpu/gemm"
	"fmt"
	"strings"

	"ferry/catalog"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/clipvision"
	"ferry/model/umt5"
	"ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/residency"
	"ferry/sampler"
)

// Component names of a Wan pipeline.
const (
	TextEncoder = "text_encoder"
	Transformer = "transformer"
	// Transformer2 is Wan 2.2 A14B's low-noise expert.
	Transformer2 = "transformer_2"
	VAE          = "vae"
)

// Profile is what the planner knows about a model: its components in
// execution order, their blocks' parameter sizes, and the architecture
// configs the FLOP and activation formulas read.
type Profile struct {
	Name string
	// Compute is the dtype float weights take on the device (float32 on
	// the CPU backend today).
	Compute    dtype.DType
	Components []*ComponentProfile

	Text  umt5.Config
	Wan   wan.Config
	Coder VAEConfig
	// Image is the CLIP image encoder's config (image-to-video folders;
	// nil otherwise): see AddImageEncoder.
	Image *clipvision.Config
	// ImageMode is what the VAE encodes before the loop (SetImageMode).
	ImageMode ImageMode
	// ImageVAE is set for a model that takes an image only when a request
	// gives one (TI2V-5B, expand_timesteps): the VAE config UseImage
	// switches it to image to video with.
	ImageVAE *wanvae.Config
	// vae is the VAE config of profiles made from one (NewWanProfileVAE):
	// UseVideo adds its encoder.
	vae *wanvae.Config
	// ExpandTimesteps is model_index.json's expand_timesteps (TI2V-5B):
	// the transformer takes a timestep per token, and modulates each run
	// of tokens sharing one with that value's rows (wanPass).
	ExpandTimesteps bool

	// DiskRead, from MeasureFolder, timed a read of checkpoint pages that
	// were outside the page cache (zero when none was made).
	DiskRead checkpoint.Probe

	// Boundary is Wan 2.2 A14B's boundary_ratio: the transformer_2
	// component (the low-noise expert, the transformer's architecture)
	// denoises the steps whose timestep is below Boundary ·
	// num_train_timesteps. 0: one transformer.
	Boundary float64
	// Scheduler is the scheduler config the switch step is computed from
	// (nil: Wan's UniPC with flow shift 3).
	Scheduler []byte
}

// ComponentProfile is one component: its blocks in the order they run.
type ComponentProfile struct {
	Name string
	// Storage is the dtype of the checkpoint's float tensors.
	Storage dtype.DType
	Blocks  []BlockProfile
	// Cached is the fraction (0..1) of the component's checkpoint bytes
	// in the OS page cache when the plan is made: the first read of that
	// part costs a memory copy, not a disk read. Built-in profiles say 0.
	Cached float64
}

// BlockProfile is one residency block.
type BlockProfile struct {
	Name string // full name, "transformer.blocks.3"
	// Tensors holds the element count of every tensor that moves with the
	// block, in declaration order; Matrix marks the GEMM weights among them
	// (tagged "matrix"), which keep a bf16 compute dtype on the device.
	Tensors []int64
	Matrix  []bool
	// RowElems counts the elements of row tables (read by row, never moved).
	RowElems int64
}

// Params is the block's moved parameter count.
func (b BlockProfile) Params() int64 {
	var n int64
	for _, t := range b.Tensors {
		n += t
	}
	return n
}

// Bytes is the block's size with every tensor in dt, laid out as the
// executor lays a block out (each tensor 64-byte aligned).
func (b BlockProfile) Bytes(dt dtype.DType) int64 {
	var n int64
	for _, t := range b.Tensors {
		n += alignUp(t*int64(dt.Size()), 64)
	}
	return n
}

// keepStored is the storage dtypes an inference runtime keeps GEMM
// weights in on this machine's device (pipeline.KeepStored(false): the
// CPU GEMM's expanding packers); training keeps none (dense weights).
var keepStored = gemm.Expands

// DeviceBytes is the block's size on the device as the executor lays it
// out: GEMM weights of a checkpoint stored as storage in the dtype
// residency.MatrixDeviceType gives for compute and keep, every other float
// tensor float32.
func (b BlockProfile) DeviceBytes(storage, compute dtype.DType, keep func(dtype.DType) bool) int64 {
	matrix := int64(residency.MatrixDeviceType(storage, compute, keep).Size())
	var n int64
	for i, t := range b.Tensors {
		size := int64(4)
		if i < len(b.Matrix) && b.Matrix[i] {
			size = matrix
		}
		n += alignUp(t*size, 64)
	}
	return n
}

// DeviceBytes is the component's weights on the device for a compute
// dtype, for inference (GEMM weights kept as stored where this CPU's GEMM
// multiplies them so).
func (c *ComponentProfile) DeviceBytes(compute dtype.DType) int64 {
	return c.DeviceBytesKeeping(compute, keepStored)
}

// DeviceBytesKeeping is DeviceBytes with the kept storage dtypes given
// (nil: none, as training's dense weights).
func (c *ComponentProfile) DeviceBytesKeeping(compute dtype.DType, keep func(dtype.DType) bool) int64 {
	var n int64
	for _, b := range c.Blocks {
		n += b.DeviceBytes(c.Storage, compute, keep)
	}
	return n
}

// StoredBytes is the component's weights in their storage dtype.
func (c *ComponentProfile) StoredBytes() int64 {
	var n int64
	for _, b := range c.Blocks {
		n += b.Bytes(c.Storage)
	}
	return n
}

// MarkMatrices flags the tensors named in matrix (residency.MatrixWeights)
// as GEMM weights; params must be the list the profile was built from.
func (c *ComponentProfile) MarkMatrices(params []residency.ParamSpec, matrix map[string]bool) {
	index := map[string]int{}
	for i, b := range c.Blocks {
		index[b.Name] = i
		c.Blocks[i].Matrix = make([]bool, len(b.Tensors))
	}
	seen := map[string]int{}
	for _, ps := range params {
		if ps.Rows {
			continue
		}
		name := c.Name + "." + ps.Block
		i, ok := index[name]
		if !ok {
			continue
		}
		k := seen[name]
		seen[name]++
		if k < len(c.Blocks[i].Matrix) {
			c.Blocks[i].Matrix[k] = matrix[ps.Name]
		}
	}
}

// Component returns the named component, or nil.
func (p *Profile) Component(name string) *ComponentProfile {
	for _, c := range p.Components {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// ComponentNames lists the components in execution order.
func (p *Profile) ComponentNames() []string {
	var out []string
	for _, c := range p.Components {
		out = append(out, c.Name)
	}
	return out
}

// SetStorage sets the storage dtype of a component's checkpoint.
func (p *Profile) SetStorage(component string, dt dtype.DType) error {
	c := p.Component(component)
	if c == nil {
		return fmt.Errorf("planner: profile %s has no component %q (have %s)", p.Name, component, strings.Join(p.ComponentNames(), ", "))
	}
	c.Storage = dt
	return nil
}

// ComponentFromParams groups a parameter list into blocks, in the order
// blocks first appear, naming each "<component>.<block>".
func ComponentFromParams(name string, storage dtype.DType, params []residency.ParamSpec) *ComponentProfile {
	c := &ComponentProfile{Name: name, Storage: storage}
	index := map[string]int{}
	for _, ps := range params {
		i, ok := index[ps.Block]
		if !ok {
			i = len(c.Blocks)
			index[ps.Block] = i
			c.Blocks = append(c.Blocks, BlockProfile{Name: name + "." + ps.Block})
		}
		n := int64(1)
		for _, d := range ps.Shape {
			n *= int64(d)
		}
		if ps.Rows {
			c.Blocks[i].RowElems += n
			continue
		}
		c.Blocks[i].Tensors = append(c.Blocks[i].Tensors, n)
	}
	return c
}

// NewWanProfile builds a Wan 2.1 text-to-video profile from its three
// configs. vaeParams lists the VAE's weights (model/wanvae's Params when
// that package is used); nil derives them from vae.
func NewWanProfile(name string, text umt5.Config, tr wan.Config, vae VAEConfig, vaeParams []residency.ParamSpec) (*Profile, error) {
	if err := text.Validate(); err != nil {
		return nil, fmt.Errorf("planner: %s: %w", name, err)
	}
	if err := tr.Validate(); err != nil {
		return nil, fmt.Errorf("planner: %s: %w", name, err)
	}
	if err := vae.Validate(); err != nil {
		return nil, fmt.Errorf("planner: %s: %w", name, err)
	}
	if vaeParams == nil {
		vaeParams = vae.DecoderParams()
	}
	te := ComponentFromParams(TextEncoder, dtype.BF16, text.Params())
	trc := ComponentFromParams(Transformer, dtype.F32, tr.Params())
	for _, m := range []struct {
		c      *ComponentProfile
		params []residency.ParamSpec
		comp   *residency.Component
	}{
		{te, text.Params(), umt5.New(text).Component(TextEncoder, nil)},
		{trc, tr.Params(), wan.New(tr).Component(Transformer, nil)},
	} {
		matrix, err := residency.MatrixWeights(m.comp)
		if err != nil {
			return nil, fmt.Errorf("planner: %s: %w", name, err)
		}
		m.c.MarkMatrices(m.params, matrix)
	}
	return &Profile{
		Name:       name,
		Compute:    dtype.F32,
		Components: []*ComponentProfile{te, trc, ComponentFromParams(VAE, dtype.F32, decoderOnly(vaeParams))},
		Text:       text, Wan: tr, Coder: vae,
	}, nil
}

// decoderOnly keeps the blocks a text-to-video request runs: the decoder
// (and post_quant_conv); the encoder's weights are never loaded.
func decoderOnly(ps []residency.ParamSpec) []residency.ParamSpec {
	var out []residency.ParamSpec
	for _, p := range ps {
		if !strings.HasPrefix(p.Block, "encoder") && !strings.HasPrefix(p.Name, "encoder.") && !strings.HasPrefix(p.Name, "quant_conv.") {
			out = append(out, p)
		}
	}
	return out
}

// vaeConfigOf keeps what the planner's formulas read from a wanvae config.
func vaeConfigOf(c wanvae.Config) VAEConfig {
	return VAEConfig{BaseDim: c.BaseDim, ZDim: c.ZDim, DimMult: append([]int(nil), c.DimMult...),
		NumResBlocks: c.NumResBlocks, TemperalDownsample: append([]bool(nil), c.TemperalDownsample...),
		DecoderBaseDim: deref(c.DecoderBaseDim), IsResidual: c.IsResidual, PatchSize: deref(c.PatchSize)}
}

// NewWanProfileVAE is NewWanProfile with model/wanvae's config and its
// parameter list.
func NewWanProfileVAE(name string, text umt5.Config, tr wan.Config, vae wanvae.Config) (*Profile, error) {
	p, err := NewWanProfile(name, text, tr, vaeConfigOf(vae), vae.DecoderParams())
	if err == nil {
		p.vae = &vae
	}
	return p, err
}

// UMT5XXL is Wan 2.1's text encoder (google/umt5-xxl's encoder).
func UMT5XXL() umt5.Config { return catalog.UMT5XXL() }

// WanTinyConfigs are the configs `ferry synth --arch wan-tiny` writes
// (catalog.WanTiny).
func WanTinyConfigs() (umt5.Config, wan.Config, wanvae.Config) {
	w := catalog.WanTiny()
	return w.Text, w.Transformer, w.VAE
}

// builtin profiles a catalogued architecture, weights stored as published.
func builtin(name string) (*Profile, error) {
	w, err := catalog.LookupWan(name)
	if err != nil {
		return nil, err
	}
	p, err := NewWanProfileVAE(w.Name, w.Text, w.Transformer, w.VAE)
	if err != nil {
		return nil, err
	}
	for _, c := range p.Components {
		if c.Name != VAE {
			c.Storage = w.Storage
		}
	}
	p.Component(Transformer).Storage = w.TransformerDType()
	if w.ExpandTimesteps {
		p.ImageVAE = &w.VAE
		p.ExpandTimesteps = true
	}
	if p.Scheduler, err = json.Marshal(sampler.WanUniPCConfig(w.FlowShift)); err != nil {
		return nil, err
	}
	if w.Boundary > 0 {
		if err := p.AddExpert(w.Boundary); err != nil {
			return nil, err
		}
	}
	if w.ImageEncoder != nil {
		// The Wan 2.1 I2V folders publish the CLIP tower in float32.
		if err := p.AddImageEncoder(*w.ImageEncoder, dtype.F32); err != nil {
			return nil, err
		}
	}
	if w.ImageEncoder != nil || w.ImageToVideo {
		if err := p.SetImageMode(ImageThenZeros, w.VAE); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// BuiltinNames lists the built-in profiles.
func BuiltinNames() []string { return catalog.WanNames() }

// Builtin returns a built-in profile by name (case-insensitive).
func Builtin(name string) (*Profile, error) {
	p, err := builtin(name)
	if err != nil {
		return nil, fmt.Errorf("planner: %w; or pass a diffusers folder", err)
	}
	return p, nil
}

func alignUp(n, to int64) int64 { return (n + to - 1) / to * to }
