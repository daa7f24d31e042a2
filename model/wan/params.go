package wan

import (
	"fmt"

	"ferry/residency"
)

// Block name suffixes (the residency block is "<component>.<suffix>").
const (
	embedBlock = "embed"
	outBlock   = "out"
)

func layerBlock(i int) string { return fmt.Sprintf("blocks.%d", i) }

func layerPrefix(i int) string { return fmt.Sprintf("blocks.%d.", i) }

// Params lists every weight of the transformer with the checkpoint name
// diffusers' save_pretrained writes, its shape and its block, in execution
// order.
func (c Config) Params() []residency.ParamSpec {
	d, ff := c.InnerDim(), c.FFNDim
	var ps []residency.ParamSpec
	add := func(block, name string, shape ...int) {
		ps = append(ps, residency.ParamSpec{Block: block, Name: name, Shape: shape})
	}
	linear := func(block, name string, out, in int) {
		add(block, name+".weight", out, in)
		add(block, name+".bias", out)
	}

	add(embedBlock, "patch_embedding.weight", d, c.InChannels, c.PatchSize[0], c.PatchSize[1], c.PatchSize[2])
	add(embedBlock, "patch_embedding.bias", d)
	linear(embedBlock, "condition_embedder.time_embedder.linear_1", d, c.FreqDim)
	linear(embedBlock, "condition_embedder.time_embedder.linear_2", d, d)
	linear(embedBlock, "condition_embedder.time_proj", 6*d, d)
	linear(embedBlock, "condition_embedder.text_embedder.linear_1", d, c.TextDim)
	linear(embedBlock, "condition_embedder.text_embedder.linear_2", d, d)
	if c.HasImage() {
		// WanImageEmbedding: FP32LayerNorm(image_dim), FeedForward(image_dim
		// → dim, mult 1: a square GELU projection, then to dim),
		// FP32LayerNorm(dim), and FLF2V's position embedding.
		e, img := "condition_embedder.image_embedder.", *c.ImageDim
		if c.PosEmbedSeqLen != nil {
			add(embedBlock, e+"pos_embed", 1, *c.PosEmbedSeqLen, img)
		}
		add(embedBlock, e+"norm1.weight", img)
		add(embedBlock, e+"norm1.bias", img)
		linear(embedBlock, e+"ff.net.0.proj", img, img)
		linear(embedBlock, e+"ff.net.2", d, img)
		add(embedBlock, e+"norm2.weight", d)
		add(embedBlock, e+"norm2.bias", d)
	}

	for i := range c.NumLayers {
		b, p := layerBlock(i), layerPrefix(i)
		for _, attn := range []string{"attn1", "attn2"} {
			for _, proj := range []string{"to_q", "to_k", "to_v", "to_out.0"} {
				linear(b, p+attn+"."+proj, d, d)
			}
			add(b, p+attn+".norm_q.weight", d)
			add(b, p+attn+".norm_k.weight", d)
		}
		if c.HasImage() {
			// The image attention's keys and values (WanAttention with
			// added_kv_proj_dim) and the RMSNorm on its keys.
			linear(b, p+"attn2.add_k_proj", d, *c.AddedKVProjDim)
			linear(b, p+"attn2.add_v_proj", d, *c.AddedKVProjDim)
			add(b, p+"attn2.norm_added_k.weight", d)
		}
		if c.CrossAttnNorm {
			add(b, p+"norm2.weight", d)
			add(b, p+"norm2.bias", d)
		}
		linear(b, p+"ffn.net.0.proj", ff, d)
		linear(b, p+"ffn.net.2", d, ff)
		add(b, p+"scale_shift_table", 1, 6, d)
	}

	add(outBlock, "scale_shift_table", 1, 2, d)
	linear(outBlock, "proj_out", c.OutChannels*c.PatchVolume(), d)
	return ps
}
