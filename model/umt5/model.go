package umt5

import (
	"ferry/residency"
	"ferry/tensor"
)

// Model is the encoder's weights, declared as residency blocks, and its
// forward pass. The executor binds the weights only while a block runs.
type Model struct {
	cfg    Config
	act    tensor.UnaryOp
	actErr error // an unsupported activation, reported by Encode

	embed  embedWeights
	layers []encoderLayer
	final  finalWeights
	comp   *residency.Component
}

// embedWeights is the token table, read by row. Either name may be present
// (see tokensName); shared.weight is preferred.
type embedWeights struct {
	Shared *residency.Rows `w:"shared.weight,optional"`
	Tokens *residency.Rows `w:"encoder.embed_tokens.weight,optional"`
}

// table is whichever token table the checkpoint has, nil if none.
func (e *embedWeights) table() *residency.Rows {
	if e.Shared != nil {
		return e.Shared
	}
	return e.Tokens
}

type finalWeights struct {
	Norm *tensor.Tensor `w:"final_layer_norm.weight"`
}

// attention is T5Attention's weights (no biases on the projections).
type attention struct {
	Q *tensor.Tensor `w:"q.weight,matrix"`
	K *tensor.Tensor `w:"k.weight,matrix"`
	V *tensor.Tensor `w:"v.weight,matrix"`
	O *tensor.Tensor `w:"o.weight,matrix"`
	// RelBias is [num_buckets, num_heads]: in every UMT5 layer, in T5's
	// layer 0 only. Optional here because the variant decides; the forward
	// pass checks it is present where the variant needs it.
	RelBias *tensor.Tensor `w:"relative_attention_bias.weight,optional"`
}

// feedForward is one of the two DenseReluDense forms.
type feedForward interface {
	gatedFF | denseFF
	apply(ops *tensor.Ops, x *tensor.Tensor, act tensor.UnaryOp) *tensor.Tensor
}

// gatedFF is T5DenseGatedActDense: wo(act(wi_0 x) * wi_1 x).
type gatedFF struct {
	Wi0 *tensor.Tensor `w:"wi_0.weight,matrix"`
	Wi1 *tensor.Tensor `w:"wi_1.weight,matrix"`
	Wo  *tensor.Tensor `w:"wo.weight,matrix"`
}

// denseFF is T5DenseActDense: wo(act(wi x)).
type denseFF struct {
	Wi *tensor.Tensor `w:"wi.weight,matrix"`
	Wo *tensor.Tensor `w:"wo.weight,matrix"`
}

// layer is one T5Block of the encoder: self-attention then feed-forward,
// each pre-normed and residual.
type layer[F feedForward] struct {
	AttnNorm *tensor.Tensor `w:"layer.0.layer_norm.weight"`
	Attn     attention      `w:"layer.0.SelfAttention"`
	FFNorm   *tensor.Tensor `w:"layer.1.layer_norm.weight"`
	FF       F              `w:"layer.1.DenseReluDense"`
}

// encoderLayer hides the feed-forward form from the layer loop. A layer is
// run as its two halves so that the caller can free the attention bias
// between them.
type encoderLayer interface {
	relBias() *tensor.Tensor
	attend(ops *tensor.Ops, x, bias *tensor.Tensor, c *Config)
	feedForward(ops *tensor.Ops, x *tensor.Tensor, c *Config, act tensor.UnaryOp)
}

func (l *layer[F]) relBias() *tensor.Tensor { return l.Attn.RelBias }

// New makes an encoder for cfg (normally the result of ParseConfig).
func New(cfg Config) *Model {
	m := &Model{cfg: cfg, layers: make([]encoderLayer, cfg.NumLayers)}
	m.act, m.actErr = activation(cfg.DenseActFn)
	for i := range m.layers {
		if cfg.IsGatedAct {
			m.layers[i] = &layer[gatedFF]{}
		} else {
			m.layers[i] = &layer[denseFF]{}
		}
	}
	return m
}

// Config is the configuration the model was made with.
func (m *Model) Config() Config { return m.cfg }

// Component declares the encoder's blocks over src, in execution order:
// name.embed, name.block.0 ... name.block.N-1, name.final. Encode runs the
// component most recently declared; declare it once and register it with
// the executor.
func (m *Model) Component(name string, src residency.Source) *residency.Component {
	c := &residency.Component{Name: name, Source: src}
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + embedBlock, Weights: &m.embed})
	for i, l := range m.layers {
		c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + layerBlock(i), Prefix: layerPrefix(i), Weights: l})
	}
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + finalBlock, Prefix: "encoder.", Weights: &m.final})
	m.comp = c
	return c
}
