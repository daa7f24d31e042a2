package synth

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"ferry/catalog"
	"ferry/dtype"
	"ferry/model/umt5"
	"ferry/sampler"
	"ferry/tokenizer"
)

func init() {
	for _, name := range catalog.WanNames() {
		builders[name] = func() (Arch, error) {
			w, err := catalog.LookupWan(name)
			if err != nil {
				return Arch{}, err
			}
			return Wan(w)
		}
	}
}

// textConfig renders the config.json transformers writes for
// UMT5EncoderModel.
func textConfig(c umt5.Config) (map[string]any, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	for k, v := range map[string]any{"num_decoder_layers": c.NumLayers, "scalable_attention": true,
		"tie_word_embeddings": false, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
		"tokenizer_class": "T5Tokenizer", "torch_dtype": "bfloat16"} {
		m[k] = v
	}
	return m, nil
}

// Wan is a WanPipeline folder with the given configs: a UMT5 text encoder
// and tokenizer, the transformer, the VAE (float32, as published) and the
// UniPC scheduler config.
func Wan(c catalog.Wan) (Arch, error) {
	text, err := textConfig(c.Text)
	if err != nil {
		return Arch{}, fmt.Errorf("%s text encoder: %w", c.Name, err)
	}
	sched := sampler.WanUniPCConfig(c.FlowShift)
	transformer := func(name string) Component {
		return Component{Name: name, Library: "diffusers", Class: "WanTransformer3DModel", Config: c.Transformer,
			Params: c.Transformer.Params(), WeightsName: "diffusion_pytorch_model"}
	}
	a := Arch{Name: c.Name, Class: "WanPipeline", Components: []Component{
		{Name: "scheduler", Library: "diffusers", Class: sampler.ClassUniPC, Config: sched, ConfigFile: "scheduler_config.json"},
		{Name: "text_encoder", Library: "transformers", Class: "UMT5EncoderModel", Config: text,
			Params: c.Text.Params(), WeightsName: "model"},
		{Name: "tokenizer", Library: "transformers", Class: "T5Tokenizer", Extra: writeTokenizer},
		transformer("transformer"),
		{Name: "vae", Library: "diffusers", Class: "AutoencoderKLWan", Config: c.VAE,
			Params: c.VAE.Params(), WeightsName: "diffusion_pytorch_model", DType: dtype.F32},
	}}
	if c.Boundary > 0 {
		// Wan 2.2 A14B: the low-noise expert beside the transformer, the
		// boundary in model_index.json; the experts follow --dtype (float32
		// by default, as the diffusers folders hold them), the text encoder
		// stays bf16 as published.
		low := transformer("transformer_2")
		low.Salt = 2 // the experts are different models
		a.Components = slices.Insert(a.Components, 4, low)
		a.Components[1].DType = c.Storage
		a.Settings = map[string]any{"boundary_ratio": c.Boundary, "expand_timesteps": false}
		a.DType = c.TransformerDType()
	}
	addImageToVideo(&a, c)
	return a, nil
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
