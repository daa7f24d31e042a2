// Package umt5 is the T5 / UMT5 text encoder (transformers' T5EncoderModel
// and UMT5EncoderModel); Wan's text encoder is UMT5-XXL.
//
// The two architectures differ in one place: T5 (and mT5) learn the
// relative-position bias table in layer 0 only and every later layer reuses
// the bias layer 0 computed, while UMT5 learns a table in every layer.
// Everything else is shared: RMS layer norms without bias (T5LayerNorm),
// attention without 1/sqrt(d) scaling, a gated-GELU or plain feed-forward,
// and a final norm.
//
// The model is declared as residency blocks in execution order: "embed"
// (the shared token table, read by row and never moved whole), one block
// per encoder layer ("block.0", "block.1", ...) and "final".
package umt5

import (
	"encoding/json"
	"fmt"
	"strings"

	"ferry/tensor"
)

// Variant is the architecture family a config describes.
type Variant int

// The variants.
const (
	// T5 covers t5 and mt5: one relative-bias table, in layer 0.
	T5 Variant = iota
	// UMT5 has a relative-bias table in every layer.
	UMT5
)

func (v Variant) String() string {
	if v == UMT5 {
		return "umt5"
	}
	return "t5"
}

// Config is the encoder half of a transformers T5Config / UMT5Config, with
// the JSON keys of config.json.
type Config struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`

	VocabSize    int     `json:"vocab_size"`
	DModel       int     `json:"d_model"`
	DKV          int     `json:"d_kv"`
	DFF          int     `json:"d_ff"`
	NumLayers    int     `json:"num_layers"`
	NumHeads     int     `json:"num_heads"`
	NumBuckets   int     `json:"relative_attention_num_buckets"`
	MaxDistance  int     `json:"relative_attention_max_distance"`
	LayerNormEps float64 `json:"layer_norm_epsilon"`

	// FeedForwardProj is "{act}" or "gated-{act}"; DenseActFn and
	// IsGatedAct are derived from it unless config.json sets them.
	FeedForwardProj string `json:"feed_forward_proj"`
	DenseActFn      string `json:"dense_act_fn"`
	IsGatedAct      bool   `json:"is_gated_act"`

	// Variant is decided from model_type or architectures.
	Variant Variant `json:"-"`
}

// defaults returns the constructor defaults of transformers' T5Config,
// MT5Config and UMT5Config (mt5 has the UMT5 sizes with T5's single bias
// table).
func defaults(v Variant, family string) Config {
	c := Config{NumBuckets: 32, MaxDistance: 128, LayerNormEps: 1e-6, DKV: 64, DModel: 512, Variant: v}
	if family == "t5" {
		c.VocabSize, c.DFF, c.NumLayers, c.NumHeads, c.FeedForwardProj = 32128, 2048, 6, 8, "relu"
		return c
	}
	c.VocabSize, c.DFF, c.NumLayers, c.NumHeads, c.FeedForwardProj = 250112, 1024, 8, 6, "gated-gelu"
	return c
}

// ParseConfig reads a config.json, fills the keys it lacks with the
// reference's defaults and validates the result.
func ParseConfig(raw []byte) (Config, error) {
	var head struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return Config{}, fmt.Errorf("umt5 config: %w", err)
	}
	v, family, err := variantOf(head.ModelType, head.Architectures)
	if err != nil {
		return Config{}, err
	}
	c := defaults(v, family)
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("umt5 config: %w", err)
	}
	var explicit struct {
		DenseActFn *string `json:"dense_act_fn"`
		IsGatedAct *bool   `json:"is_gated_act"`
	}
	if err := json.Unmarshal(raw, &explicit); err != nil {
		return Config{}, fmt.Errorf("umt5 config: %w", err)
	}
	if err := c.deriveActivation(explicit.DenseActFn != nil, explicit.IsGatedAct != nil); err != nil {
		return Config{}, err
	}
	c.Variant = v
	return c, c.Validate()
}

// variantOf picks the architecture from model_type, or from architectures
// when model_type is absent; family is "t5", "mt5" or "umt5".
func variantOf(modelType string, archs []string) (v Variant, family string, err error) {
	switch modelType {
	case "umt5":
		return UMT5, modelType, nil
	case "t5", "mt5":
		return T5, modelType, nil
	case "":
	default:
		return 0, "", fmt.Errorf("umt5 config: model_type %q is not t5, mt5 or umt5", modelType)
	}
	for _, a := range archs {
		switch {
		case strings.HasPrefix(a, "UMT5"):
			return UMT5, "umt5", nil
		case strings.HasPrefix(a, "MT5"):
			return T5, "mt5", nil
		case strings.HasPrefix(a, "T5"):
			return T5, "t5", nil
		}
	}
	return 0, "", fmt.Errorf("umt5 config: cannot tell the architecture: no model_type and architectures %q name no T5/MT5/UMT5 class", archs)
}

// deriveActivation splits feed_forward_proj as the reference's config
// constructor does. In transformers 4.47 the keys dense_act_fn and
// is_gated_act, when config.json holds them, are set after the derivation
// and so win; keepAct and keepGated say they were present.
func (c *Config) deriveActivation(keepAct, keepGated bool) error {
	parts := strings.Split(c.FeedForwardProj, "-")
	if len(parts) > 2 || (len(parts) == 2 && parts[0] != "gated") || parts[len(parts)-1] == "" {
		return fmt.Errorf("umt5 config: feed_forward_proj %q is not of the form \"gated-{act}\" or \"{act}\"", c.FeedForwardProj)
	}
	if !keepAct {
		c.DenseActFn = parts[len(parts)-1]
		if c.FeedForwardProj == "gated-gelu" {
			c.DenseActFn = "gelu_new" // the reference's backwards-compatibility rule
		}
	}
	if !keepGated {
		c.IsGatedAct = parts[0] == "gated"
	}
	return nil
}

// maxDim bounds every size and count of a config: far above any released
// model (UMT5's vocabulary is 250112), low enough that a damaged
// config.json is refused with one line instead of sizing the model's
// tables (a num_layers of 1e9 ran the process out of memory).
const maxDim = 1 << 20

// Validate says what is wrong with a config.
func (c Config) Validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{
		{"vocab_size", c.VocabSize}, {"d_model", c.DModel}, {"d_kv", c.DKV}, {"d_ff", c.DFF},
		{"num_layers", c.NumLayers}, {"num_heads", c.NumHeads}, {"relative_attention_max_distance", c.MaxDistance},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("umt5 config: %s must be 1 to %d, got %d", f.key, maxDim, f.v)
		}
	}
	// Bidirectional bucketing halves the buckets and gives half of those to
	// exact distances: fewer than 4 leaves no exact bucket and the
	// reference divides by zero.
	if c.NumBuckets < 4 {
		return fmt.Errorf("umt5 config: relative_attention_num_buckets must be >= 4, got %d", c.NumBuckets)
	}
	if maxExact := c.NumBuckets / 4; c.MaxDistance <= maxExact {
		return fmt.Errorf("umt5 config: relative_attention_max_distance %d must exceed the %d exact buckets", c.MaxDistance, maxExact)
	}
	if !(c.LayerNormEps > 0) {
		return fmt.Errorf("umt5 config: layer_norm_epsilon must be > 0, got %g", c.LayerNormEps)
	}
	if _, err := activation(c.DenseActFn); err != nil {
		return err
	}
	return nil
}

// InnerDim is the width of the attention projections (num_heads × d_kv,
// which need not equal d_model).
func (c Config) InnerDim() int { return c.NumHeads * c.DKV }

// hasBias reports whether layer i holds a relative_attention_bias table.
func (c Config) hasBias(i int) bool { return c.Variant == UMT5 || i == 0 }

// activation maps the reference's ACT2FN names to the unary ops.
func activation(name string) (tensor.UnaryOp, error) {
	switch name {
	case "relu":
		return tensor.ReLU, nil
	case "gelu":
		return tensor.GELUErf, nil
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
		// All three are 0.5x(1+tanh(√(2/π)(x+0.044715x³))), written differently.
		return tensor.GELUTanh, nil
	case "silu", "swish":
		return tensor.SiLU, nil
	}
	return 0, fmt.Errorf("umt5 config: activation %q is not supported (want relu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, silu)", name)
}
