package clipvision

import (
	"ferry/residency"
	"ferry/tensor"
)

// Model is the vision tower's weights, declared as residency blocks, and
// its forward pass to hidden_states[-2]. The executor binds the weights
// only while a block runs.
type Model struct {
	cfg    Config
	act    activation
	actErr error // an unsupported activation, reported by Encode

	embed  embedWeights
	layers []layerWeights // the RunLayers layers Encode runs
	comp   *residency.Component
}

// embedWeights is CLIPVisionEmbeddings and pre_layrnorm.
type embedWeights struct {
	Class    *tensor.Tensor `w:"embeddings.class_embedding"`
	Patch    *tensor.Tensor `w:"embeddings.patch_embedding.weight"` // [D, C, p, p], no bias
	Position *tensor.Tensor `w:"embeddings.position_embedding.weight"`
	PreNormW *tensor.Tensor `w:"pre_layrnorm.weight"`
	PreNormB *tensor.Tensor `w:"pre_layrnorm.bias"`
}

// linear is an nn.Linear with bias.
type linear struct {
	W *tensor.Tensor `w:"weight,matrix"`
	B *tensor.Tensor `w:"bias"`
}

// norm is an nn.LayerNorm.
type norm struct {
	W *tensor.Tensor `w:"weight"`
	B *tensor.Tensor `w:"bias"`
}

// layerWeights is one CLIPEncoderLayer.
type layerWeights struct {
	Norm1 norm   `w:"layer_norm1"`
	Q     linear `w:"self_attn.q_proj"`
	K     linear `w:"self_attn.k_proj"`
	V     linear `w:"self_attn.v_proj"`
	Out   linear `w:"self_attn.out_proj"`
	Norm2 norm   `w:"layer_norm2"`
	FC1   linear `w:"mlp.fc1"`
	FC2   linear `w:"mlp.fc2"`
}

// New makes a tower for cfg (normally the result of ParseConfig).
func New(cfg Config) *Model {
	m := &Model{cfg: cfg, layers: make([]layerWeights, max(cfg.RunLayers(), 0))}
	m.act, m.actErr = activationOf(cfg.HiddenAct)
	return m
}

// Config is the configuration the model was made with.
func (m *Model) Config() Config { return m.cfg }

// Component declares the blocks Encode runs over src, in execution order:
// name.embed, name.layers.0 ... name.layers.N-2. The last layer and
// post_layernorm are not declared, so no plan ever loads them. Encode runs
// the component most recently declared; declare it once and register it
// with the executor.
func (m *Model) Component(name string, src residency.Source) *residency.Component {
	c := &residency.Component{Name: name, Source: src}
	c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + embedBlock, Prefix: root, Weights: &m.embed})
	for i := range m.layers {
		c.Blocks = append(c.Blocks, &residency.Block{Name: name + "." + layerBlock(i), Prefix: layerPrefix(i), Weights: &m.layers[i]})
	}
	m.comp = c
	return c
}
