package synth

import (
	"fmt"
	"strings"

	"ferry/dtype"
	"ferry/model/umt5"
	"ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/residency"
	"ferry/sampler"
	"ferry/tokenizer"
)

func init() {
	builders["wan-tiny"] = func() (Arch, error) { return Wan("wan-tiny", WanTiny()) }
	builders["wan2.1-t2v-1.3b"] = func() (Arch, error) { return Wan("wan2.1-t2v-1.3b", Wan1_3B()) }
	builders["wan2.1-t2v-14b"] = func() (Arch, error) { return Wan("wan2.1-t2v-14b", Wan14B()) }
}

// WanConfigs are the configs of a Wan 2.1 text-to-video folder.
type WanConfigs struct {
	Text        TextConfig
	Transformer wan.Config
	VAE         wanvae.Config
	FlowShift   float64
}

// TextConfig is the UMT5 encoder's size, written as a transformers
// UMT5Config.
type TextConfig struct {
	Vocab, DModel, DKV, DFF, Layers, Heads int
}

// Wan1_3B is Wan-AI/Wan2.1-T2V-1.3B-Diffusers.
func Wan1_3B() WanConfigs {
	return WanConfigs{Text: umt5XXL(), Transformer: wan.Config1_3B(), VAE: wanvae.ConfigWan21(), FlowShift: 3}
}

// Wan14B is Wan-AI/Wan2.1-T2V-14B-Diffusers.
func Wan14B() WanConfigs {
	return WanConfigs{Text: umt5XXL(), Transformer: wan.Config14B(), VAE: wanvae.ConfigWan21(), FlowShift: 3}
}

// WanTiny keeps Wan's architecture at toy sizes: the demo's model.
func WanTiny() WanConfigs {
	t := wan.Config1_3B()
	t.NumAttentionHeads, t.AttentionHeadDim, t.FFNDim, t.NumLayers, t.TextDim, t.FreqDim = 4, 32, 256, 4, 64, 64
	v := wanvae.ConfigWan21()
	v.BaseDim = 16
	return WanConfigs{
		Text:        TextConfig{Vocab: 1024, DModel: 64, DKV: 16, DFF: 128, Layers: 2, Heads: 4},
		Transformer: t, VAE: v, FlowShift: 3,
	}
}

func umt5XXL() TextConfig {
	return TextConfig{Vocab: 256384, DModel: 4096, DKV: 64, DFF: 10240, Layers: 24, Heads: 64}
}

// json renders the config.json transformers writes for UMT5EncoderModel.
func (t TextConfig) json() map[string]any {
	return map[string]any{
		"architectures": []string{"UMT5EncoderModel"}, "model_type": "umt5",
		"vocab_size": t.Vocab, "d_model": t.DModel, "d_kv": t.DKV, "d_ff": t.DFF,
		"num_layers": t.Layers, "num_decoder_layers": t.Layers, "num_heads": t.Heads,
		"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
		"layer_norm_epsilon": 1e-6, "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new",
		"is_gated_act": true, "scalable_attention": true, "tie_word_embeddings": false,
		"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
		"tokenizer_class": "T5Tokenizer", "torch_dtype": "bfloat16",
	}
}

// Params lists the encoder's weights through the model package, so that
// synth and the model can never disagree on names.
func (t TextConfig) Params() ([]residency.ParamSpec, error) {
	raw, err := jsonBytes(t.json())
	if err != nil {
		return nil, err
	}
	cfg, err := umt5.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return cfg.Params(), nil
}

// Wan is a WanPipeline folder with the given configs: a UMT5 text encoder
// and tokenizer, the transformer, the VAE (float32, as published) and the
// UniPC scheduler config.
func Wan(name string, c WanConfigs) (Arch, error) {
	textParams, err := c.Text.Params()
	if err != nil {
		return Arch{}, fmt.Errorf("%s text encoder: %w", name, err)
	}
	sched := sampler.WanUniPCConfig(c.FlowShift)
	return Arch{Name: name, Class: "WanPipeline", Components: []Component{
		{Name: "scheduler", Library: "diffusers", Class: sampler.ClassUniPC, Config: sched, ConfigFile: "scheduler_config.json"},
		{Name: "text_encoder", Library: "transformers", Class: "UMT5EncoderModel", Config: c.Text.json(),
			Params: textParams, WeightsName: "model"},
		{Name: "tokenizer", Library: "transformers", Class: "T5Tokenizer", Extra: writeTokenizer},
		{Name: "transformer", Library: "diffusers", Class: "WanTransformer3DModel", Config: c.Transformer,
			Params: c.Transformer.Params(), WeightsName: "diffusion_pytorch_model"},
		{Name: "vae", Library: "diffusers", Class: "AutoencoderKLWan", Config: c.VAE,
			Params: c.VAE.Params(), WeightsName: "diffusion_pytorch_model", DType: dtype.F32},
	}}, nil
}

// writeTokenizer writes a small UMT5-style SentencePiece tokenizer: the
// special and byte pieces UMT5 has, then letters, digits and common words,
// so prompts tokenize into words rather than bytes.
func writeTokenizer(dir string) error {
	var pieces []tokenizer.Piece
	seen := map[string]bool{}
	add := func(text string, score float32) {
		if !seen[text] {
			seen[text] = true
			pieces = append(pieces, tokenizer.Piece{Text: text, Score: score})
		}
	}
	add("▁", -2)
	for _, w := range strings.Fields(commonWords) {
		add("▁"+w, -5-float32(len(w))/10)
	}
	for _, r := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"-()" {
		add(string(r), -8)
		add("▁"+string(r), -9)
	}
	m, err := tokenizer.NewUMT5StyleModel(pieces, nil)
	if err != nil {
		return err
	}
	return m.WriteFolder(dir)
}

const commonWords = `a an the of and in on at to with by for from is are was be it its this that
cat dog bird fish horse cow man woman child boy girl people person city street road car boat ship
train plane sky sun moon star cloud rain snow wind water sea ocean river lake beach sand grass tree
forest flower mountain hill field garden house room window door light dark night day morning evening
red orange yellow green blue purple pink brown black white gray golden silver bright soft slow fast
walks runs flies swims jumps dances sits stands looks plays sleeps eats moving walking running flying
realistic cinematic photo video film style high quality detailed beautiful low blurry static noise
worst bad ugly deformed still picture overall subtitles painting frame frames background foreground
close up wide shot camera view scene under over through across into small large big little old young`

func jsonBytes(v any) ([]byte, error) { return jsonMarshal(v) }
