// Package catalog names the model architectures ferry knows without files:
// their configs, exactly as `ferry synth` writes them and as the planner
// profiles them, so that the two can never disagree.
package catalog

import (
	"fmt"
	"sort"
	"strings"

	"ferry/dtype"
	"ferry/model/clipvision"
	"ferry/model/umt5"
	"ferry/model/wan"
	"ferry/model/wanvae"
)

// Wan is a Wan 2.1 text-to-video pipeline's configs.
type Wan struct {
	Name        string
	Text        umt5.Config
	Transformer wan.Config
	VAE         wanvae.Config
	FlowShift   float64
	// Storage is the dtype the text encoder's and transformer's weights
	// are published in (the VAE is float32).
	Storage dtype.DType
	// TransformerStorage, when set, is the transformers' published dtype
	// where it differs from Storage (the diffusers Wan 2.2 A14B folders
	// hold both experts in float32, the text encoder in bf16).
	TransformerStorage dtype.DType
	// Boundary is Wan 2.2 A14B's boundary_ratio: a second transformer of
	// the same config (transformer_2, the low-noise expert) denoises the
	// steps whose timestep is below Boundary · 1000. 0: one transformer.
	Boundary float64
	// ExpandTimesteps is model_index.json's expand_timesteps (TI2V-5B).
	ExpandTimesteps bool
	// ImageEncoder is the CLIP vision tower of Wan 2.1 image-to-video
	// folders (WanImageToVideoPipeline); nil otherwise.
	ImageEncoder *clipvision.Config
	// ImageToVideo marks a WanImageToVideoPipeline folder without an image
	// encoder (Wan 2.2 I2V A14B); one with ImageEncoder is one too.
	ImageToVideo bool
}

// TransformerDType is the transformers' published dtype.
func (w Wan) TransformerDType() dtype.DType {
	if w.TransformerStorage != 0 {
		return w.TransformerStorage
	}
	return w.Storage
}

// UMT5XXL is Wan 2.1's text encoder, google/umt5-xxl's encoder.
func UMT5XXL() umt5.Config {
	return umt5.Config{ModelType: "umt5", Architectures: []string{"UMT5EncoderModel"}, VocabSize: 256384,
		DModel: 4096, DKV: 64, DFF: 10240, NumLayers: 24, NumHeads: 64, NumBuckets: 32, MaxDistance: 128,
		LayerNormEps: 1e-6, FeedForwardProj: "gated-gelu", DenseActFn: "gelu_new", IsGatedAct: true, Variant: umt5.UMT5}
}

// Wan1_3B is Wan-AI/Wan2.1-T2V-1.3B-Diffusers.
func Wan1_3B() Wan {
	return Wan{Name: "wan2.1-t2v-1.3b", Text: UMT5XXL(), Transformer: wan.Config1_3B(), VAE: wanvae.ConfigWan21(), FlowShift: 3, Storage: dtype.BF16}
}

// Wan14B is Wan-AI/Wan2.1-T2V-14B-Diffusers.
func Wan14B() Wan {
	return Wan{Name: "wan2.1-t2v-14b", Text: UMT5XXL(), Transformer: wan.Config14B(), VAE: wanvae.ConfigWan21(), FlowShift: 3, Storage: dtype.BF16}
}

// WanTiny keeps Wan 2.1's architecture at toy sizes (the demo's model): a
// transformer of width 128 (4 heads of 32, 4 layers, feed-forward 256), a
// 2-layer UMT5 of width 64 and the VAE at base width 16. The text encoder
// has 1024 rows: synth's tokenizer has fewer pieces.
func WanTiny() Wan {
	text := UMT5XXL()
	text.VocabSize, text.DModel, text.DKV, text.DFF, text.NumLayers, text.NumHeads = 1024, 64, 16, 128, 2, 4
	tr := wan.Config1_3B()
	tr.NumAttentionHeads, tr.AttentionHeadDim, tr.FFNDim, tr.NumLayers, tr.TextDim, tr.FreqDim = 4, 32, 256, 4, 64, 64
	vae := wanvae.ConfigWan21()
	vae.BaseDim = 16
	return Wan{Name: "wan-tiny", Text: text, Transformer: tr, VAE: vae, FlowShift: 3, Storage: dtype.BF16}
}

// Wan22T2VA14B is Wan-AI/Wan2.2-T2V-A14B-Diffusers: two experts with Wan
// 2.1 14B's transformer config (the high-noise transformer and the
// low-noise transformer_2), boundary_ratio 0.875, the Wan 2.1 VAE, UMT5-XXL
// and UniPC with flow shift 3, as diffusers' conversion script writes it;
// the experts in float32.
func Wan22T2VA14B() Wan {
	return Wan{Name: "wan2.2-t2v-a14b", Text: UMT5XXL(), Transformer: wan.Config14B(), VAE: wanvae.ConfigWan21(), FlowShift: 3,
		Storage: dtype.BF16, TransformerStorage: dtype.F32, Boundary: 0.875}
}

// WanTinyMoE is WanTiny with Wan 2.2 A14B's two-expert layout (boundary
// 0.875): a small model for trying the expert switch's plans.
func WanTinyMoE() Wan {
	w := WanTiny()
	w.Name, w.Boundary = "wan-tiny-moe", 0.875
	return w
}

var wans = map[string]func() Wan{"wan-tiny": WanTiny, "wan2.1-t2v-1.3b": Wan1_3B, "wan2.1-t2v-14b": Wan14B,
	"wan2.2-t2v-a14b": Wan22T2VA14B, "wan-tiny-moe": WanTinyMoE, "wan2.2-ti2v-5b": WanTI2V5B, "wan2.1-i2v-14b": WanI2V14B,
	"wan2.1-flf2v-14b": WanFLF2V14B, "wan2.2-i2v-a14b": Wan22I2VA14B, "wan-tiny-i2v": WanTinyI2V}

// WanNames lists the Wan architectures, sorted.
func WanNames() []string {
	names := make([]string, 0, len(wans))
	for n := range wans {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupWan returns a Wan architecture by name (case-insensitive).
func LookupWan(name string) (Wan, error) {
	mk, ok := wans[strings.ToLower(name)]
	if !ok {
		return Wan{}, fmt.Errorf("no built-in Wan architecture %q (have %s)", name, strings.Join(WanNames(), ", "))
	}
	return mk(), nil
}
