package synthetic

import (
	"fmt"

	"ferry/residency"
	"ferry/tensor"
)

// Component names in the pipeline folder.
const (
	TextEncoder = "text_encoder"
	Denoiser    = "transformer"
	Decoder     = "vae"
)

// Params lists every weight of a component, by block, as synth writes them.
func (c Config) Params(component string) []residency.ParamSpec {
	var all []residency.ParamSpec
	block := func(name, prefix string, fill func(s *specs)) {
		s := &specs{block: name, prefix: prefix}
		fill(s)
		all = append(all, s.list...)
	}
	switch component {
	case TextEncoder:
		block("embed", "", func(s *specs) { s.add("embed.weight", c.Vocab, c.TextDim) })
		for i := range c.TextLayers {
			block(fmt.Sprintf("layers.%d", i), fmt.Sprintf("layers.%d.", i), func(s *specs) { s.layer(c.TextDim, c.MLPRatio*c.TextDim) })
		}
		block("final", "", func(s *specs) { s.norm("final_norm", c.TextDim) })
	case Denoiser:
		block("in", "", func(s *specs) {
			s.linear("proj_in", c.Dim, c.Channels*c.Patch*c.Patch)
			s.linear("time_proj", c.Dim, c.FreqDim)
			s.linear("text_proj", c.Dim, c.TextDim)
		})
		for i := range c.Layers {
			block(fmt.Sprintf("blocks.%d", i), fmt.Sprintf("blocks.%d.", i), func(s *specs) { s.layer(c.Dim, c.MLPRatio*c.Dim) })
		}
		block("out", "", func(s *specs) {
			s.norm("norm_out", c.Dim)
			s.linear("proj_out", c.Channels*c.Patch*c.Patch, c.Dim)
		})
	case Decoder:
		block("decoder", "", func(s *specs) {
			s.linear("fc1", c.DecoderWidth, c.Channels)
			s.linear("fc2", 3, c.DecoderWidth)
		})
	}
	return all
}

// TextEncoderModel embeds byte tokens and runs a few layers over them.
type TextEncoderModel struct {
	cfg   Config
	embed struct {
		Table *residency.Rows `w:"embed.weight"`
	}
	layers []layer
	final  struct {
		Norm norm `w:"final_norm"`
	}
	comp *residency.Component
}

// NewTextEncoder declares the encoder's blocks over src.
func NewTextEncoder(c Config, src residency.Source) *TextEncoderModel {
	m := &TextEncoderModel{cfg: c, layers: make([]layer, c.TextLayers)}
	m.comp = &residency.Component{Name: TextEncoder, Source: src}
	m.comp.Blocks = append(m.comp.Blocks, &residency.Block{Name: TextEncoder + ".embed", Weights: &m.embed})
	for i := range m.layers {
		m.comp.Blocks = append(m.comp.Blocks, &residency.Block{
			Name: fmt.Sprintf("%s.layers.%d", TextEncoder, i), Prefix: fmt.Sprintf("layers.%d.", i), Weights: &m.layers[i]})
	}
	m.comp.Blocks = append(m.comp.Blocks, &residency.Block{Name: TextEncoder + ".final", Weights: &m.final})
	return m
}

// Component is what the executor registers.
func (m *TextEncoderModel) Component() *residency.Component { return m.comp }

// Tokenize maps the prompt's bytes to ids, padded or cut to TextLen.
func (m *TextEncoderModel) Tokenize(prompt string) []int32 {
	ids := make([]int32, m.cfg.TextLen)
	for i := 0; i < len(prompt) && i < len(ids); i++ {
		ids[i] = int32(prompt[i]) % int32(m.cfg.Vocab)
	}
	return ids
}

// Encode returns the text context [1, TextLen, TextDim].
func (m *TextEncoderModel) Encode(r residency.Runner, ops *tensor.Ops, ids []int32) (*tensor.Tensor, error) {
	var x *tensor.Tensor
	blocks := m.comp.Blocks
	if err := r.Run(blocks[0], func() error {
		x = m.embed.Table.Gather(ops, ids)
		ops.Fail(x.SetShape(1, len(ids), m.cfg.TextDim))
		return ops.Err()
	}); err != nil {
		return nil, err
	}
	for i := range m.layers {
		if err := r.Run(blocks[1+i], func() error {
			x = m.layers[i].forward(ops, x, m.cfg.TextHeads)
			return ops.Err()
		}); err != nil {
			x.Free()
			return nil, err
		}
	}
	var out *tensor.Tensor
	err := r.Run(blocks[len(blocks)-1], func() error {
		out = ops.LayerNorm(x, m.final.Norm.W, m.final.Norm.B, 1e-5)
		return ops.Err()
	})
	x.Free()
	return out, err
}

// DenoiserModel is the DiT-shaped stack that runs once per step.
type DenoiserModel struct {
	cfg Config
	in  struct {
		ProjIn linear `w:"proj_in"`
		Time   linear `w:"time_proj"`
		Text   linear `w:"text_proj"`
	}
	blocks []layer
	out    struct {
		Norm norm   `w:"norm_out"`
		Proj linear `w:"proj_out"`
	}
	comp *residency.Component
}

// NewDenoiser declares the denoiser's blocks over src.
func NewDenoiser(c Config, src residency.Source) *DenoiserModel {
	m := &DenoiserModel{cfg: c, blocks: make([]layer, c.Layers)}
	m.comp = &residency.Component{Name: Denoiser, Source: src}
	m.comp.Blocks = append(m.comp.Blocks, &residency.Block{Name: Denoiser + ".in", Weights: &m.in})
	for i := range m.blocks {
		m.comp.Blocks = append(m.comp.Blocks, &residency.Block{
			Name: fmt.Sprintf("%s.blocks.%d", Denoiser, i), Prefix: fmt.Sprintf("blocks.%d.", i), Weights: &m.blocks[i]})
	}
	m.comp.Blocks = append(m.comp.Blocks, &residency.Block{Name: Denoiser + ".out", Weights: &m.out})
	return m
}

// Component is what the executor registers.
func (m *DenoiserModel) Component() *residency.Component { return m.comp }

// Forward predicts the velocity for tokens x [1, T, C·p²] at time t given
// the text context [1, L, TextDim]; x is not modified.
func (m *DenoiserModel) Forward(r residency.Runner, ops *tensor.Ops, x *tensor.Tensor, t float32, ctx *tensor.Tensor) (*tensor.Tensor, error) {
	var h *tensor.Tensor
	blocks := m.comp.Blocks
	heads := m.cfg.Heads
	if err := r.Run(blocks[0], func() error {
		h = ops.Linear(x, m.in.ProjIn.W, m.in.ProjIn.B)
		temb := ops.Upload(sinusoid(t, m.cfg.FreqDim), 1, 1, m.cfg.FreqDim)
		tp := ops.Linear(temb, m.in.Time.W, m.in.Time.B)
		ops.AddInPlace(h, tp)
		// One cross-attention hop to the text, weight-free but for text_proj.
		c := ops.Linear(ctx, m.in.Text.W, m.in.Text.B)
		d := m.cfg.Dim
		qs := []int{1, h.Dim(1), heads, d / heads}
		ks := []int{1, c.Dim(1), heads, d / heads}
		a := ops.Attention(reshape(ops, h, qs), reshape(ops, c, ks), reshape(ops, c, ks), nil, 1/float32(d/heads))
		ops.AddInPlace(h, reshape(ops, a, h.Shape()))
		tensor.Free(temb, tp, c, a)
		return ops.Err()
	}); err != nil {
		h.Free()
		return nil, err
	}
	for i := range m.blocks {
		if err := r.Run(blocks[1+i], func() error {
			h = m.blocks[i].forward(ops, h, heads)
			return ops.Err()
		}); err != nil {
			h.Free()
			return nil, err
		}
	}
	var v *tensor.Tensor
	err := r.Run(blocks[len(blocks)-1], func() error {
		n := ops.LayerNorm(h, m.out.Norm.W, m.out.Norm.B, 1e-5)
		v = ops.Linear(n, m.out.Proj.W, m.out.Proj.B)
		n.Free()
		return ops.Err()
	})
	h.Free()
	return v, err
}

// DecoderModel turns latent tokens into pixels.
type DecoderModel struct {
	cfg Config
	w   struct {
		FC1 linear `w:"fc1"`
		FC2 linear `w:"fc2"`
	}
	comp *residency.Component
}

// NewDecoder declares the decoder's single block over src.
func NewDecoder(c Config, src residency.Source) *DecoderModel {
	m := &DecoderModel{cfg: c}
	m.comp = &residency.Component{Name: Decoder, Source: src, Blocks: []*residency.Block{{Name: Decoder + ".decoder", Weights: &m.w}}}
	return m
}

// Component is what the executor registers.
func (m *DecoderModel) Component() *residency.Component { return m.comp }

// Decode maps latents [1, h·w, C·p²] (a p×p patch per token) to an image
// [1, h·p, w·p, 3] in [0, 1].
func (m *DecoderModel) Decode(r residency.Runner, ops *tensor.Ops, x *tensor.Tensor, h, w int) (*tensor.Tensor, error) {
	var img *tensor.Tensor
	p, c := m.cfg.Patch, m.cfg.Channels
	err := r.Run(m.comp.Blocks[0], func() error {
		// tokens [h·w, C·p²] -> pixels [h·w·p², C]
		px := reshape(ops, x, []int{1, h, w, c, p, p})
		px = ops.Permute(px, 0, 1, 4, 2, 5, 3) // [1, h, p, w, p, C]
		flat := reshape(ops, px, []int{1, h * p * w * p, c})
		a := ops.Linear(flat, m.w.FC1.W, m.w.FC1.B)
		px.Free()
		ops.UnaryInPlace(a, tensor.SiLU)
		img = ops.Linear(a, m.w.FC2.W, m.w.FC2.B)
		a.Free()
		ops.UnaryInPlace(img, tensor.Sigmoid)
		ops.Fail(img.SetShape(1, h*p, w*p, 3))
		return ops.Err()
	})
	return img, err
}
