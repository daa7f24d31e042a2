// Package wan is the Wan 2.1 video diffusion transformer, diffusers'
// WanTransformer3DModel (text-to-video; the 1.3B and 14B checkpoints).
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

	// Image conditioning (I2V and FLF2V checkpoints); not supported yet.
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
		if f.v <= 0 {
			return fmt.Errorf("wan config: %s must be > 0, got %d", f.key, f.v)
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
	if c.ImageDim != nil || c.AddedKVProjDim != nil {
		return fmt.Errorf("wan config: image conditioning (image_dim, added_kv_proj_dim: an I2V/FLF2V checkpoint) is not supported yet; only text-to-video")
	}
	return nil
}

// InnerDim is the model width, heads × head_dim (1536 for 1.3B).
func (c Config) InnerDim() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// PatchVolume is the number of latent positions one token covers.
func (c Config) PatchVolume() int { return c.PatchSize[0] * c.PatchSize[1] * c.PatchSize[2] }
