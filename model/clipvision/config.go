// Package clipvision is the CLIP vision tower (transformers'
// CLIPVisionModel), the image encoder of Wan 2.1 image-to-video (ViT-H/14:
// 32 layers of width 1280 at 224×224).
//
// The tower is a ViT: a bias-free patch convolution, a learned class token
// and position table, pre_layrnorm, then pre-norm encoder layers
// (attention with biases, an MLP with the config's activation; Wan's uses
// exact GELU). Wan reads hidden_states[-2], the output of every layer but
// the last, without post_layernorm, so Encode runs num_hidden_layers - 1
// layers and never loads the last layer or post_layernorm.
//
// The model is declared as residency blocks in execution order: "embed"
// (patch, class and position embeddings and pre_layrnorm) and one block per
// encoder layer that runs ("layers.0", ...).
package clipvision

import (
	"encoding/json"
	"fmt"

	"ferry/tensor"
)

// Config is transformers' CLIPVisionConfig with the JSON keys of
// config.json.
type Config struct {
	ModelType         string  `json:"model_type"`
	HiddenSize        int     `json:"hidden_size"`
	IntermediateSize  int     `json:"intermediate_size"`
	NumHiddenLayers   int     `json:"num_hidden_layers"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	NumChannels       int     `json:"num_channels"`
	ImageSize         int     `json:"image_size"`
	PatchSize         int     `json:"patch_size"`
	HiddenAct         string  `json:"hidden_act"`
	LayerNormEps      float64 `json:"layer_norm_eps"`
}

// defaults are CLIPVisionConfig's constructor defaults (ViT-B/32).
func defaults() Config {
	return Config{
		HiddenSize: 768, IntermediateSize: 3072, NumHiddenLayers: 12, NumAttentionHeads: 12,
		NumChannels: 3, ImageSize: 224, PatchSize: 32, HiddenAct: "quick_gelu", LayerNormEps: 1e-5,
	}
}

// ParseConfig reads an image_encoder/config.json: a CLIPVisionConfig
// (model_type "clip_vision_model"), or a full CLIPConfig ("clip"), whose
// vision_config is used. Missing keys take the reference's defaults.
func ParseConfig(raw []byte) (Config, error) {
	var head struct {
		ModelType    string          `json:"model_type"`
		VisionConfig json.RawMessage `json:"vision_config"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return Config{}, fmt.Errorf("clip vision config: %w", err)
	}
	switch head.ModelType {
	case "clip_vision_model", "":
	case "clip":
		if len(head.VisionConfig) == 0 {
			return Config{}, fmt.Errorf("clip vision config: model_type \"clip\" without a vision_config")
		}
		raw = head.VisionConfig
	default:
		return Config{}, fmt.Errorf("clip vision config: model_type %q is not clip_vision_model or clip", head.ModelType)
	}
	c := defaults()
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("clip vision config: %w", err)
	}
	c.ModelType = "clip_vision_model"
	return c, c.Validate()
}

// maxDim bounds every size of a config: far above any CLIP tower, low
// enough that a corrupt config fails here and not in an allocation.
const maxDim = 1 << 16

// Validate says what is wrong with a config.
func (c Config) Validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_channels", c.NumChannels}, {"image_size", c.ImageSize}, {"patch_size", c.PatchSize},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("clip vision config: %s must be 1 to %d, got %d", f.key, maxDim, f.v)
		}
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("clip vision config: hidden_size %d is not a multiple of num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.PatchSize > c.ImageSize {
		return fmt.Errorf("clip vision config: patch_size %d exceeds image_size %d", c.PatchSize, c.ImageSize)
	}
	if !(c.LayerNormEps > 0) {
		return fmt.Errorf("clip vision config: layer_norm_eps must be > 0, got %g", c.LayerNormEps)
	}
	if _, err := activationOf(c.HiddenAct); err != nil {
		return err
	}
	return nil
}

// HeadDim is the width of one attention head.
func (c Config) HeadDim() int { return c.HiddenSize / c.NumAttentionHeads }

// NumPatches is the patches per side squared; the conv floors, so a
// remainder of image_size is never read.
func (c Config) NumPatches() int { g := c.ImageSize / c.PatchSize; return g * g }

// Tokens is the sequence length: the class token and the patches (257 for
// ViT-H/14 at 224).
func (c Config) Tokens() int { return 1 + c.NumPatches() }

// RunLayers is how many encoder layers Encode runs: all but the last, for
// hidden_states[-2].
func (c Config) RunLayers() int { return c.NumHiddenLayers - 1 }

// activation is the MLP's nonlinearity: a unary op, or quick_gelu
// (x·sigmoid(1.702x)), which has none.
type activation struct {
	op        tensor.UnaryOp
	quickGELU bool
}

// activationOf maps the reference's ACT2FN names.
func activationOf(name string) (activation, error) {
	switch name {
	case "gelu":
		return activation{op: tensor.GELUErf}, nil
	case "quick_gelu":
		return activation{quickGELU: true}, nil
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
		return activation{op: tensor.GELUTanh}, nil
	case "relu":
		return activation{op: tensor.ReLU}, nil
	case "silu", "swish":
		return activation{op: tensor.SiLU}, nil
	}
	return activation{}, fmt.Errorf("clip vision config: hidden_act %q is not supported (want gelu, quick_gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu)", name)
}
