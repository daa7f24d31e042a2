package catalog

import (
	"ferry/dtype"
	"ferry/model/clipvision"
	"ferry/model/wan"
	"ferry/model/wanvae"
)

// WanTI2V5B is Wan-AI/Wan2.2-TI2V-5B-Diffusers: a WanPipeline with
// expand_timesteps (text and image to video from one folder), a
// transformer of 24 heads of 128 (dim 3072), 30 layers, feed-forward
// 14336 over the 48 latent channels of the Wan 2.2 VAE (16x spatial);
// UniPC with flow shift 5. The transformer is published in float32, the
// text encoder in bf16.
func WanTI2V5B() Wan {
	tr := wan.Config14B()
	tr.NumAttentionHeads, tr.NumLayers, tr.FFNDim = 24, 30, 14336
	tr.InChannels, tr.OutChannels = 48, 48
	return Wan{Name: "wan2.2-ti2v-5b", Text: UMT5XXL(), Transformer: tr, VAE: wanvae.ConfigWan22(),
		FlowShift: 5, Storage: dtype.BF16, TransformerStorage: dtype.F32, ExpandTimesteps: true}
}

// WanI2V14B is Wan-AI/Wan2.1-I2V-14B-480P-Diffusers: the 14B transformer
// with 36 input channels (latents, 4 mask channels, the image's latents),
// the image embedder (image_dim 1280) and image attention
// (added_kv_proj_dim 5120), and the CLIP ViT-H/14 vision tower; UniPC
// with flow shift 3 (the 720P folder uses 5).
func WanI2V14B() Wan {
	tr := wan.Config14B()
	tr.InChannels = 36
	imageDim, kv := 1280, 5120
	tr.ImageDim, tr.AddedKVProjDim = &imageDim, &kv
	enc := CLIPViTH14()
	return Wan{Name: "wan2.1-i2v-14b", Text: UMT5XXL(), Transformer: tr, VAE: wanvae.ConfigWan21(),
		FlowShift: 3, Storage: dtype.BF16, ImageEncoder: &enc}
}

// WanFLF2V14B is Wan-AI/Wan2.1-FLF2V-14B-720P-Diffusers: Wan 2.1 I2V-14B
// whose image embedder adds a learned position embedding over both
// images' CLIP tokens (pos_embed_seq_len 2 × 257), so every video runs
// from a first to a last frame. Its synthesised scheduler is UniPC with
// flow shift 5 (a published folder's own scheduler config is what
// ferry generate reads).
func WanFLF2V14B() Wan {
	w := WanI2V14B()
	w.Name, w.FlowShift = "wan2.1-flf2v-14b", 5
	pos := 2 * w.ImageEncoder.Tokens()
	w.Transformer.PosEmbedSeqLen = &pos
	return w
}

// Wan22I2VA14B is Wan-AI/Wan2.2-I2V-A14B-Diffusers: a
// WanImageToVideoPipeline without an image encoder, two experts of the
// 14B config with 36 input channels (latents, 4 mask channels, the
// condition's latents) and boundary_ratio 0.9, the Wan 2.1 VAE; the
// experts in float32, the text encoder in bf16; synthesised with UniPC at
// flow shift 5. A last frame (last_image) conditions the video's end
// through the VAE.
func Wan22I2VA14B() Wan {
	w := Wan22T2VA14B()
	w.Name, w.Boundary, w.FlowShift, w.ImageToVideo = "wan2.2-i2v-a14b", 0.9, 5, true
	w.Transformer.InChannels = 36
	return w
}

// WanTinyI2V is WanTiny with Wan 2.1 I2V's layout: a 3-layer CLIP tower
// of width 32 on 28-pixel images (5 tokens), the image embedder and image
// attention, 36 input channels. A small model for trying image to video.
func WanTinyI2V() Wan {
	w := WanTiny()
	w.Name = "wan-tiny-i2v"
	enc := clipvision.Config{ModelType: "clip_vision_model", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 3,
		NumAttentionHeads: 2, NumChannels: 3, ImageSize: 28, PatchSize: 14, HiddenAct: "gelu", LayerNormEps: 1e-5}
	w.ImageEncoder = &enc
	imageDim, kv := enc.HiddenSize, w.Transformer.InnerDim()
	w.Transformer.ImageDim, w.Transformer.AddedKVProjDim = &imageDim, &kv
	w.Transformer.InChannels = 2*w.VAE.ZDim + 4
	return w
}

// CLIPViTH14 is open-clip ViT-H/14's vision tower as the Wan 2.1 I2V
// folders hold it (CLIPVisionModel): width 1280, 32 layers of 16 heads,
// MLP 5120 with exact GELU, 224-pixel images in 14-pixel patches.
func CLIPViTH14() clipvision.Config {
	return clipvision.Config{ModelType: "clip_vision_model", HiddenSize: 1280, IntermediateSize: 5120,
		NumHiddenLayers: 32, NumAttentionHeads: 16, NumChannels: 3, ImageSize: 224, PatchSize: 14,
		HiddenAct: "gelu", LayerNormEps: 1e-5}
}
