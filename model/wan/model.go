package wan

import (
	"ferry/residency"
	"ferry/tensor"
)

// Options tune how a forward pass spends memory; none changes the result
// beyond float32 rounding (see FFNChunk).
type Options struct {
	// FFNChunk is the number of tokens the feed-forward processes at a time,
	// so that its [tokens, ffn_dim] intermediate never exists for the whole
	// sequence (at 480×832×81 the 1.3B model has 32760 tokens per sample
	// and ffn_dim 8960: 1.2 GB per sample otherwise). Chunks never span two
	// samples (nor, with per-token timesteps, two runs of tokens with
	// different timesteps). 0 (or less) processes the whole batch at once. Every token's result is
	// computed by the same row-wise operations either way, so chunking is
	// exact as long as the GEMM's result for a row does not depend on how
	// many rows it is given.
	FFNChunk int
}

// Model is the transformer's weights, declared as residency blocks, and
// its forward pass. The executor binds the weights only while a block runs.
type Model struct {
	cfg Config
	// Options may be changed between forward passes.
	Options Options
	// Train tunes the training pass's memory (trainopts.go); it may be
	// changed between training steps.
	Train TrainOptions

	// ungrouped makes per-token timesteps embed and modulate every token on
	// its own, as the reference does ([B·L, 6, dim]); tests compare the
	// grouped pass with it.
	ungrouped bool

	embed  embedWeights
	layers []layerWeights
	out    outWeights
	comp   *residency.Component
}

// linear is an nn.Linear (weight [out, in], bias [out]); the weight is
// only ever a GEMM matrix, so it may stay bf16 on the device.
type linear struct {
	W *tensor.Tensor `w:"weight,matrix"`
	B *tensor.Tensor `w:"bias"`
	// lora are the adapters applied on top (SetLoRA); the executor never
	// binds them.
	lora []LoRA
}

// affine is a LayerNorm's weight and bias.
type affine struct {
	W *tensor.Tensor `w:"weight"`
	B *tensor.Tensor `w:"bias"`
}

// embedWeights is the "embed" block: the patch embedding (a Conv3d whose
// weight is [dim, C, pt, ph, pw]) and WanTimeTextImageEmbedding, with the
// image embedder and FLF2V's position embedding. A config declares only
// the parts it has (see embedDecl).
type embedWeights struct {
	Patch    linear            `w:"patch_embedding"`
	Time1    linear            `w:"condition_embedder.time_embedder.linear_1"`
	Time2    linear            `w:"condition_embedder.time_embedder.linear_2"`
	TimeProj linear            `w:"condition_embedder.time_proj"`
	Text1    linear            `w:"condition_embedder.text_embedder.linear_1"`
	Text2    linear            `w:"condition_embedder.text_embedder.linear_2"`
	Image    imageEmbedWeights `w:"condition_embedder.image_embedder"`
	PosEmbed *tensor.Tensor    `w:"condition_embedder.image_embedder.pos_embed"`
}

// embedImage and embedText are embedWeights without the position
// embedding and without any image part: the same fields with fewer w tags,
// so that a pointer to the model's embedWeights converts to them and the
// executor binds only what the config has.
type embedImage struct {
	Patch    linear            `w:"patch_embedding"`
	Time1    linear            `w:"condition_embedder.time_embedder.linear_1"`
	Time2    linear            `w:"condition_embedder.time_embedder.linear_2"`
	TimeProj linear            `w:"condition_embedder.time_proj"`
	Text1    linear            `w:"condition_embedder.text_embedder.linear_1"`
	Text2    linear            `w:"condition_embedder.text_embedder.linear_2"`
	Image    imageEmbedWeights `w:"condition_embedder.image_embedder"`
	PosEmbed *tensor.Tensor
}

type embedText struct {
	Patch    linear `w:"patch_embedding"`
	Time1    linear `w:"condition_embedder.time_embedder.linear_1"`
	Time2    linear `w:"condition_embedder.time_embedder.linear_2"`
	TimeProj linear `w:"condition_embedder.time_proj"`
	Text1    linear `w:"condition_embedder.text_embedder.linear_1"`
	Text2    linear `w:"condition_embedder.text_embedder.linear_2"`
	Image    imageEmbedWeights
	PosEmbed *tensor.Tensor
}

// imageEmbedWeights is WanImageEmbedding apart from its position
// embedding: LayerNorm, a GELU feed-forward to the model width, LayerNorm.
type imageEmbedWeights struct {
	Norm1 affine `w:"norm1"`
	FF1   linear `w:"ff.net.0.proj"`
	FF2   linear `w:"ff.net.2"`
	Norm2 affine `w:"norm2"`
}

// embedDecl is what the embed block declares for cfg.
func (m *Model) embedDecl() any {
	switch {
	case !m.cfg.HasImage():
		return (*embedText)(&m.embed)
	case m.cfg.PosEmbedSeqLen == nil:
		return (*embedImage)(&m.embed)
	}
	return &m.embed
}

// attention is WanAttention without image conditioning: q, k, v and output
// projections and RMSNorms over all heads for q and k.
type attention struct {
	Q     linear         `w:"to_q"`
	K     linear         `w:"to_k"`
	V     linear         `w:"to_v"`
	Out   linear         `w:"to_out.0"`
	NormQ *tensor.Tensor `w:"norm_q.weight"`
	NormK *tensor.Tensor `w:"norm_k.weight"`
}

// blockWeights is one WanTransformerBlock apart from norm2.
type blockWeights struct {
	Attn1 attention `w:"attn1"`
	Attn2 attention `w:"attn2"`
	FF1   linear    `w:"ffn.net.0.proj"`
	FF2   linear    `w:"ffn.net.2"`
	// Table is scale_shift_table [1, 6, dim]: shift, scale and gate of the
	// self-attention, then of the feed-forward.
	Table *tensor.Tensor `w:"scale_shift_table"`
}

// layerWeights is one block with its cross-attention norm (an affine
// LayerNorm when cross_attn_norm is set, nn.Identity otherwise) and its
// image attention (image-to-video checkpoints). The residency block
// declares only the parts the config has (see layerDecl), so the
// checkpoint must hold exactly the weights the config implies.
type layerWeights struct {
	Core  blockWeights   `w:""`
	Norm2 affine         `w:"norm2"`
	Image imageAttention `w:"attn2"`
}

// layerText and layerCoreImage are layerWeights without the image
// attention and without norm2: the same fields with fewer w tags (pointers
// convert between them).
type layerText struct {
	Core  blockWeights `w:""`
	Norm2 affine       `w:"norm2"`
	Image imageAttention
}

type layerCoreImage struct {
	Core  blockWeights `w:""`
	Norm2 affine
	Image imageAttention `w:"attn2"`
}

// imageAttention is what WanAttention adds to the cross-attention with
// added_kv_proj_dim: key and value projections of the image tokens and an
// RMSNorm over all heads on the keys.
type imageAttention struct {
	K     linear         `w:"add_k_proj"`
	V     linear         `w:"add_v_proj"`
	NormK *tensor.Tensor `w:"norm_added_k.weight"`
}

// layerDecl is what block i declares for cfg.
func (m *Model) layerDecl(i int) any {
	l, img := &m.layers[i], m.cfg.HasImage()
	switch {
	case m.cfg.CrossAttnNorm && img:
		return l
	case m.cfg.CrossAttnNorm:
		return (*layerText)(l)
	case img:
		return (*layerCoreImage)(l)
	}
	return &l.Core
}

// outWeights is the "out" block: the output adaLN table [1, 2, dim]
// (shift, scale) and proj_out.
type outWeights struct {
	Table *tensor.Tensor `w:"scale_shift_table"`
	Proj  linear         `w:"proj_out"`
}

// New makes a transformer for cfg (normally the result of ParseConfig).
func New(cfg Config) *Model {
	return &Model{cfg: cfg, layers: make([]layerWeights, cfg.NumLayers)}
}

// Config is the configuration the model was made with.
func (m *Model) Config() Config { return m.cfg }

// Component declares the transformer's blocks over src, in execution
// order: name.embed, name.blocks.0 ... name.blocks.N-1, name.out. Forward
// runs the component most recently declared; declare it once and register
// it with the executor.
func (m *Model) Component(name string, src residency.Source) *residency.Component {
	c := &residency.Component{Name: name, Source: src}
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + embedBlock, Weights: m.embedDecl()})
	for i := range m.layers {
		c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + layerBlock(i), Prefix: layerPrefix(i), Weights: m.layerDecl(i)})
	}
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + outBlock, Weights: &m.out})
	m.comp = c
	return c
}
