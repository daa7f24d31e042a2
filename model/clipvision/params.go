package clipvision

import (
	"fmt"
	"slices"

	"ferry/residency"
)

// Checkpoint names, as CLIPVisionModel.save_pretrained writes them.
const (
	root        = "vision_model."
	embedPrefix = root + "embeddings."
	layersRoot  = root + "encoder.layers."
)

// Block name suffixes (the residency block is "<component>.<suffix>").
const (
	embedBlock = "embed"
	postBlock  = "post"
)

func layerBlock(i int) string { return fmt.Sprintf("layers.%d", i) }

func layerPrefix(i int) string { return fmt.Sprintf("%s%d.", layersRoot, i) }

// Params lists every weight of a CLIPVisionModel checkpoint with its name,
// shape and block, in execution order: what `ferry synth` writes and
// `ferry inspect` checks. The last layer and post_layernorm are listed
// (the checkpoint holds them) but Encode never runs them: RunParams is the
// subset it loads.
func (c Config) Params() []residency.ParamSpec {
	d, p := c.HiddenSize, c.PatchSize
	ps := []residency.ParamSpec{
		{Block: embedBlock, Name: embedPrefix + "class_embedding", Shape: []int{d}},
		{Block: embedBlock, Name: embedPrefix + "patch_embedding.weight", Shape: []int{d, c.NumChannels, p, p}},
		{Block: embedBlock, Name: embedPrefix + "position_embedding.weight", Shape: []int{c.Tokens(), d}},
		{Block: embedBlock, Name: root + "pre_layrnorm.weight", Shape: []int{d}},
		{Block: embedBlock, Name: root + "pre_layrnorm.bias", Shape: []int{d}},
	}
	for i := range c.NumHiddenLayers {
		block, pre := layerBlock(i), layerPrefix(i)
		add := func(name string, shape ...int) {
			ps = append(ps, residency.ParamSpec{Block: block, Name: pre + name, Shape: shape})
		}
		add("layer_norm1.weight", d)
		add("layer_norm1.bias", d)
		for _, proj := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
			add("self_attn."+proj+".weight", d, d)
			add("self_attn."+proj+".bias", d)
		}
		add("layer_norm2.weight", d)
		add("layer_norm2.bias", d)
		add("mlp.fc1.weight", c.IntermediateSize, d)
		add("mlp.fc1.bias", c.IntermediateSize)
		add("mlp.fc2.weight", d, c.IntermediateSize)
		add("mlp.fc2.bias", d)
	}
	return append(ps,
		residency.ParamSpec{Block: postBlock, Name: root + "post_layernorm.weight", Shape: []int{d}},
		residency.ParamSpec{Block: postBlock, Name: root + "post_layernorm.bias", Shape: []int{d}})
}

// RunParams are the Params of the blocks Encode runs (embed and the first
// num_hidden_layers - 1 layers): what a planner should count.
func (c Config) RunParams() []residency.ParamSpec {
	keep := map[string]bool{embedBlock: true}
	for i := range c.RunLayers() {
		keep[layerBlock(i)] = true
	}
	var out []residency.ParamSpec
	for _, p := range c.Params() {
		if keep[p.Block] {
			out = append(out, p)
		}
	}
	return out
}

// CheckSource reports the first weight of RunParams that src lacks or
// holds in another shape. The executor only checks that names exist; a
// misshapen weight would otherwise fail deep inside a pass.
func (c Config) CheckSource(src residency.Source) error {
	for _, p := range c.RunParams() {
		info, ok := src.Info(p.Name)
		if !ok {
			return fmt.Errorf("clipvision: tensor %q (%v) is missing from the checkpoint", p.Name, p.Shape)
		}
		if !slices.Equal(info.Shape, p.Shape) {
			return fmt.Errorf("clipvision: tensor %q is %v, the config says %v", p.Name, info.Shape, p.Shape)
		}
	}
	return nil
}
