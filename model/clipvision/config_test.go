package clipvision

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  string
		want Config
	}{
		{"wan vit-h/14", `{"model_type":"clip_vision_model","hidden_size":1280,"intermediate_size":5120,"num_hidden_layers":32,"num_attention_heads":16,"image_size":224,"patch_size":14,"hidden_act":"gelu","layer_norm_eps":1e-5}`,
			Config{ModelType: "clip_vision_model", HiddenSize: 1280, IntermediateSize: 5120, NumHiddenLayers: 32, NumAttentionHeads: 16, NumChannels: 3, ImageSize: 224, PatchSize: 14, HiddenAct: "gelu", LayerNormEps: 1e-5}},
		{"defaults", `{}`,
			Config{ModelType: "clip_vision_model", HiddenSize: 768, IntermediateSize: 3072, NumHiddenLayers: 12, NumAttentionHeads: 12, NumChannels: 3, ImageSize: 224, PatchSize: 32, HiddenAct: "quick_gelu", LayerNormEps: 1e-5}},
		{"full clip config", `{"model_type":"clip","text_config":{"hidden_size":3},"vision_config":{"hidden_size":64,"num_attention_heads":4,"patch_size":16}}`,
			Config{ModelType: "clip_vision_model", HiddenSize: 64, IntermediateSize: 3072, NumHiddenLayers: 12, NumAttentionHeads: 4, NumChannels: 3, ImageSize: 224, PatchSize: 16, HiddenAct: "quick_gelu", LayerNormEps: 1e-5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(c.raw))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestWanSizes checks the numbers the planner relies on for Wan 2.1 I2V's
// ViT-H/14: 257 tokens, 31 layers run, and one layer's parameter count.
func TestWanSizes(t *testing.T) {
	c := tinyConfig(t, `{"hidden_size":1280,"intermediate_size":5120,"num_hidden_layers":32,"num_attention_heads":16,"image_size":224,"patch_size":14,"hidden_act":"gelu"}`)
	if c.Tokens() != 257 || c.RunLayers() != 31 || c.HeadDim() != 80 {
		t.Errorf("tokens %d, layers run %d, head dim %d", c.Tokens(), c.RunLayers(), c.HeadDim())
	}
	perBlock := map[string]int{}
	for _, p := range c.RunParams() {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		perBlock[p.Block] += n
	}
	if len(perBlock) != 1+31 {
		t.Errorf("%d blocks run, want 32", len(perBlock))
	}
	// 4 projections with biases, 2 norms, fc1 and fc2 with biases.
	if want := 4*(1280*1280+1280) + 4*1280 + 2*1280*5120 + 5120 + 1280; perBlock["layers.30"] != want {
		t.Errorf("layers.30 holds %d, want %d", perBlock["layers.30"], want)
	}
	if want := 1280 + 1280*3*14*14 + 257*1280 + 2*1280; perBlock[embedBlock] != want {
		t.Errorf("embed holds %d, want %d", perBlock[embedBlock], want)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct{ raw, mention string }{
		{`{`, "clip vision config"},
		{`{"model_type":"siglip_vision_model"}`, "model_type"},
		{`{"model_type":"clip"}`, "vision_config"},
		{`{"hidden_size":10,"num_attention_heads":3}`, "multiple"},
		{`{"num_hidden_layers":0}`, "num_hidden_layers"},
		{`{"patch_size":300}`, "patch_size"},
		{`{"layer_norm_eps":0}`, "layer_norm_eps"},
		{`{"hidden_act":"mish"}`, "hidden_act"},
	} {
		_, err := ParseConfig([]byte(c.raw))
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %v, want one mentioning %q", c.raw, err, c.mention)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(tinyJSON("gelu", 3))
	f.Add(`{"model_type":"clip","vision_config":{"hidden_size":8,"num_attention_heads":2}}`)
	f.Add(`{"hidden_size":-1}`)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseConfig([]byte(raw))
		if err != nil {
			return
		}
		// A valid config describes a consistent model.
		if c.HeadDim()*c.NumAttentionHeads != c.HiddenSize || c.Tokens() < 2 || len(c.Params()) != 5+16*c.NumHiddenLayers+2 {
			t.Fatalf("inconsistent %+v", c)
		}
	})
}
