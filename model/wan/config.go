// Package wan is the Wan video diffusion transformer, diffusers'
// WanTransformer3DModel: Wan 2.1 text-to-video (1.3B, 14B) and
// image-to-video (I2V-14B: CLIP image embeddings through an image
// embedder and image attention; FLF2V with a learned position embedding
// of the image tokens), and Wan 2.2 (T2V-A14B's experts, TI2V-5B with one
// timestep per token, see Inputs.TokenTimesteps).
//
// A forward pass patchifies the latent video [B, C, F, H, W] into tokens
// (a Conv3d whose kernel equals its stride, computed here as a patch
// reshape and a Linear), embeds the timestep and the text context, runs
// num_layers transformer blocks (adaLN-modulated self-attention with 3-D
// RoPE, cross-attention to the text, a gated GELU feed-forward), then an
// adaLN-modulated output norm, a projection and the inverse patch reshape.
//
// The model is declared as residency blocks in execution order: "embed"
// (patch_embedding and condition_embedder), "blocks.0" ... "blocks.N-1",
// and "out" (the output scale_shift_table and proj_out).
package wan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// QKNormAcrossHeads is the qk_norm Wan 2.1 checkpoints name: RMSNorm over
// the whole [B, L, heads·head_dim] projection before heads are split. It
// is the only q/k norm diffusers applies, whatever the config says.
const QKNormAcrossHeads = "rms_norm_across_heads"

// Config is a transformer/config.json of WanTransformer3DModel.
type Config struct {
	PatchSize         [3]int  `json:"patch_size"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	AttentionHeadDim  int     `json:"attention_head_dim"`
	InChannels        int     `json:"in_channels"`
	OutChannels       int     `json:"out_channels"`
	TextDim           int     `json:"text_dim"`
	FreqDim           int     `json:"freq_dim"`
	FFNDim            int     `json:"ffn_dim"`
	NumLayers         int     `json:"num_layers"`
	CrossAttnNorm     bool    `json:"cross_attn_norm"`
	QKNorm            *string `json:"qk_norm"` // for the record only (see Validate)
	Eps               float64 `json:"eps"`
	RopeMaxSeqLen     int     `json:"rope_max_seq_len"`

	// Image conditioning (Wan 2.1 I2V and FLF2V checkpoints): the CLIP
	// hidden states' width, the image attention's key/value input width
	// (the model width: the image embedder projects to it) and, for FLF2V,
	// the learned position embedding's length (two images' tokens).
	ImageDim       *int `json:"image_dim"`
	AddedKVProjDim *int `json:"added_kv_proj_dim"`
	PosEmbedSeqLen *int `json:"pos_embed_seq_len"`
}

// defaults are the constructor defaults of WanTransformer3DModel (which
// happen to be the 14B sizes); config.json keys override them.
func defaults() Config {
	qk := QKNormAcrossHeads
	return Config{
		PatchSize:         [3]int{1, 2, 2},
		NumAttentionHeads: 40,
		AttentionHeadDim:  128,
		InChannels:        16,
		OutChannels:       16,
		TextDim:           4096,
		FreqDim:           256,
		FFNDim:            13824,
		NumLayers:         40,
		CrossAttnNorm:     true,
		QKNorm:            &qk,
		Eps:               1e-6,
		RopeMaxSeqLen:     1024,
	}
}

// Config1_3B is Wan-AI/Wan2.1-T2V-1.3B-Diffusers' transformer: 12 heads of
// 128 (dim 1536), 30 layers, feed-forward 8960.
func Config1_3B() Config {
	c := defaults()
	c.NumAttentionHeads, c.NumLayers, c.FFNDim = 12, 30, 8960
	return c
}

// Config14B is Wan-AI/Wan2.1-T2V-14B-Diffusers' transformer: 40 heads of
// 128 (dim 5120), 40 layers, feed-forward 13824.
func Config14B() Config { return defaults() }

// ConfigI2V14B is Wan-AI/Wan2.1-I2V-14B-{480P,720P}-Diffusers'
// transformer: the 14B with 36 input channels (16 latent, 4 mask, 16
// condition), CLIP image embeddings of width 1280 and image attention.
func ConfigI2V14B() Config {
	c := defaults()
	c.InChannels = 36
	c.ImageDim, c.AddedKVProjDim = ptrTo(1280), ptrTo(c.InnerDim())
	return c
}

// ConfigTI2V5B is Wan-AI/Wan2.2-TI2V-5B-Diffusers' transformer: 24 heads of
// 128 (dim 3072), 30 layers, feed-forward 14336, the Wan 2.2 VAE's 48
// latent channels in and out. Its pipelines give it one timestep per token
// (expand_timesteps).
func ConfigTI2V5B() Config {
	c := defaults()
	c.NumAttentionHeads, c.NumLayers, c.FFNDim = 24, 30, 14336
	c.InChannels, c.OutChannels = 48, 48
	return c
}

func ptrTo(v int) *int { return &v }

// ReadConfig reads and parses dir/config.json (a transformer folder's).
func ReadConfig(dir string) (Config, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", dir, err)
	}
	return c, nil
}

// ParseConfig reads a config.json, fills missing keys with the reference's
// constructor defaults and validates the result.
func ParseConfig(raw []byte) (Config, error) {
	c := defaults()
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("wan config: %w", err)
	}
	// The reference sets out_channels = out_channels or in_channels: an
	// explicit null (or 0) means "as many as go in".
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return Config{}, fmt.Errorf("wan config: %w", err)
	}
	if v, ok := keys["out_channels"]; ok {
		if s := string(bytes.TrimSpace(v)); s == "null" || s == "0" {
			c.OutChannels = c.InChannels
		}
	}
	return c, c.Validate()
}

// Validate says what is wrong with a config.
// maxDim bounds every size and count of a config: far above any released
// model, low enough that a damaged config.json is refused with one line
// instead of sizing the model's tables (a num_layers of 1e9 ran the
// process out of memory).
const maxDim = 1 << 16

func (c Config) Validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{
		{"num_attention_heads", c.NumAttentionHeads}, {"attention_head_dim", c.AttentionHeadDim},
		{"in_channels", c.InChannels}, {"out_channels", c.OutChannels}, {"text_dim", c.TextDim},
		{"freq_dim", c.FreqDim}, {"ffn_dim", c.FFNDim}, {"num_layers", c.NumLayers},
		{"rope_max_seq_len", c.RopeMaxSeqLen},
		{"patch_size[0]", c.PatchSize[0]}, {"patch_size[1]", c.PatchSize[1]}, {"patch_size[2]", c.PatchSize[2]},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("wan config: %s must be 1 to %d, got %d", f.key, maxDim, f.v)
		}
	}
	// RoPE rotates pairs of channels, so a head must have an even width.
	if c.AttentionHeadDim%2 != 0 {
		return fmt.Errorf("wan config: attention_head_dim must be even for RoPE, got %d", c.AttentionHeadDim)
	}
	if !(c.Eps > 0) {
		return fmt.Errorf("wan config: eps must be > 0, got %g", c.Eps)
	}
	// qk_norm is not checked: diffusers 0.40.0 stores it and hands it to
	// WanTransformerBlock, which never reads it; WanAttention always
	// builds norm_q and norm_k as RMSNorm over heads·head_dim with a
	// weight. So every value (null, "rms_norm", ...) runs the across-heads
	// norm, as here.
	return c.validateImage()
}

// validateImage checks the image conditioning keys. diffusers builds the
// image embedder from image_dim and the image attention from
// added_kv_proj_dim independently, but only both together (with the
// attention's input as wide as the embedder's output) make a model its
// forward can run: without the attention the image tokens would be
// attended as text, without the embedder there is nothing to attend.
func (c Config) validateImage() error {
	if c.ImageDim == nil && c.AddedKVProjDim == nil {
		if c.PosEmbedSeqLen != nil {
			return fmt.Errorf("wan config: pos_embed_seq_len %d without image_dim: the position embedding belongs to the image embedder; set image_dim or remove pos_embed_seq_len", *c.PosEmbedSeqLen)
		}
		return nil
	}
	if c.ImageDim == nil || c.AddedKVProjDim == nil {
		return fmt.Errorf("wan config: image_dim and added_kv_proj_dim must be set together (an image-to-video checkpoint has both), got image_dim %s and added_kv_proj_dim %s",
			intOrNull(c.ImageDim), intOrNull(c.AddedKVProjDim))
	}
	if *c.ImageDim <= 0 {
		return fmt.Errorf("wan config: image_dim must be > 0, got %d", *c.ImageDim)
	}
	if *c.AddedKVProjDim != c.InnerDim() {
		return fmt.Errorf("wan config: added_kv_proj_dim %d must equal the model width %d (heads × head_dim): the image embedder projects to that width",
			*c.AddedKVProjDim, c.InnerDim())
	}
	// The embedder views the image tokens of two images as one sequence of
	// pos_embed_seq_len rows, so it must be even.
	if p := c.PosEmbedSeqLen; p != nil && (*p <= 0 || *p%2 != 0) {
		return fmt.Errorf("wan config: pos_embed_seq_len must be a positive even number (two images' tokens), got %d", *p)
	}
	return nil
}

func intOrNull(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// HasImage reports whether the model takes image embeddings (image_dim
// and added_kv_proj_dim: Wan 2.1 I2V and FLF2V).
func (c Config) HasImage() bool { return c.ImageDim != nil && c.AddedKVProjDim != nil }

// ImageTokens is how many image rows one sample's image embeddings must
// have after the FLF2V view: pos_embed_seq_len, or 0 when any count is
// accepted (I2V without a position embedding).
func (c Config) ImageTokens() int {
	if c.PosEmbedSeqLen == nil {
		return 0
	}
	return *c.PosEmbedSeqLen
}

// InnerDim is the model width, heads × head_dim (1536 for 1.3B).
func (c Config) InnerDim() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// PatchVolume is the number of latent positions one token covers.
func (c Config) PatchVolume() int { return c.PatchSize[0] * c.PatchSize[1] * c.PatchSize[2] }

// Trainable says why the training pass (ForwardTrain, TrainBlock) cannot
// run this config: it has no backward for the image embedder and the image
// attention, and no input for the condition channels of image-to-video
// checkpoints (in_channels ≠ out_channels). Per-token timesteps cannot
// reach it (it takes one timestep per sample), so the TI2V-5B trains as a
// text-to-video model.
func (c Config) Trainable() error {
	if c.HasImage() || c.InChannels != c.OutChannels {
		return fmt.Errorf("wan: training image-to-video transformers (image_dim %s, in_channels %d, out_channels %d) is not supported; only text-to-video ones train",
			intOrNull(c.ImageDim), c.InChannels, c.OutChannels)
	}
	return nil
}
