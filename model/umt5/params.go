package umt5

import (
	"fmt"

	"ferry/residency"
)

// Checkpoint names, as T5EncoderModel / UMT5EncoderModel.save_pretrained
// writes them.
const (
	sharedName = "shared.weight"
	// tokensName is the encoder's view of the shared table. save_pretrained
	// drops it as a tied duplicate, but older checkpoints carry it, alone
	// or beside shared.weight.
	tokensName = "encoder.embed_tokens.weight"
	finalName  = "encoder.final_layer_norm.weight"
)

// Block name suffixes (the residency block is "<component>.<suffix>").
const (
	embedBlock = "embed"
	finalBlock = "final"
)

func layerBlock(i int) string { return fmt.Sprintf("block.%d", i) }

func layerPrefix(i int) string { return fmt.Sprintf("encoder.block.%d.", i) }

// Params lists every weight of the encoder with its checkpoint name, shape
// and block, in execution order. The token table is listed once, as
// shared.weight (the name save_pretrained keeps).
func (c Config) Params() []residency.ParamSpec {
	d, inner, ff := c.DModel, c.InnerDim(), c.DFF
	ps := []residency.ParamSpec{{Block: embedBlock, Name: sharedName, Shape: []int{c.VocabSize, d}, Rows: true}}
	for i := range c.NumLayers {
		block, p := layerBlock(i), layerPrefix(i)
		add := func(name string, shape ...int) {
			ps = append(ps, residency.ParamSpec{Block: block, Name: p + name, Shape: shape})
		}
		add("layer.0.layer_norm.weight", d)
		add("layer.0.SelfAttention.q.weight", inner, d)
		add("layer.0.SelfAttention.k.weight", inner, d)
		add("layer.0.SelfAttention.v.weight", inner, d)
		add("layer.0.SelfAttention.o.weight", d, inner)
		if c.hasBias(i) {
			add("layer.0.SelfAttention.relative_attention_bias.weight", c.NumBuckets, c.NumHeads)
		}
		add("layer.1.layer_norm.weight", d)
		if c.IsGatedAct {
			add("layer.1.DenseReluDense.wi_0.weight", ff, d)
			add("layer.1.DenseReluDense.wi_1.weight", ff, d)
		} else {
			add("layer.1.DenseReluDense.wi.weight", ff, d)
		}
		add("layer.1.DenseReluDense.wo.weight", d, ff)
	}
	return append(ps, residency.ParamSpec{Block: finalBlock, Name: finalName, Shape: []int{d}})
}
