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
	// samples. 0 (or less) processes the whole batch at once. Every token's result is
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
// weight is [dim, C, pt, ph, pw]) and WanTimeTextImageEmbedding.
type embedWeights struct {
	Patch    linear `w:"patch_embedding"`
	Time1    linear `w:"condition_embedder.time_embedder.linear_1"`
	Time2    linear `w:"condition_embedder.time_embedder.linear_2"`
	TimeProj linear `w:"condition_embedder.time_proj"`
	Text1    linear `w:"condition_embedder.text_embedder.linear_1"`
	Text2    linear `w:"condition_embedder.text_embedder.linear_2"`
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
// LayerNorm when cross_attn_norm is set, nn.Identity otherwise). The
// residency block declares the whole struct or only Core, so the
// checkpoint must hold exactly the weights the config implies.
type layerWeights struct {
	Core  blockWeights `w:""`
	Norm2 affine       `w:"norm2"`
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
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + embedBlock, Weights: &m.embed})
	for i := range m.layers {
		var w any = &m.layers[i].Core
		if m.cfg.CrossAttnNorm {
			w = &m.layers[i]
		}
		c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + layerBlock(i), Prefix: layerPrefix(i), Weights: w})
	}
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + outBlock, Weights: &m.out})
	m.comp = c
	return c
}
