package wan

import (
	"os"
	"strings"
	"testing"
)

func TestParseConfigGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/wan_transformer/config.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if c.PatchSize != [3]int{1, 2, 2} || c.NumAttentionHeads != 2 || c.AttentionHeadDim != 20 || c.InnerDim() != 40 ||
		c.InChannels != 16 || c.OutChannels != 16 || c.TextDim != 32 || c.FreqDim != 16 || c.FFNDim != 64 ||
		c.NumLayers != 2 || !c.CrossAttnNorm || c.Eps != 1e-6 || c.RopeMaxSeqLen != 1024 ||
		c.ImageDim != nil || c.AddedKVProjDim != nil || c.PosEmbedSeqLen != nil {
		t.Errorf("got %+v", c)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		check func(c Config) bool
	}{
		{"empty is the constructor default (14B sizes)", `{}`, func(c Config) bool {
			want := Config14B()
			return c.InnerDim() == 5120 && c.NumLayers == want.NumLayers && c.FFNDim == want.FFNDim &&
				*c.QKNorm == QKNormAcrossHeads && c.CrossAttnNorm && c.PatchSize == [3]int{1, 2, 2}
		}},
		{"out_channels null means in_channels", `{"in_channels": 36, "out_channels": null}`, func(c Config) bool {
			return c.InChannels == 36 && c.OutChannels == 36
		}},
		{"absent out_channels keeps the default 16", `{"in_channels": 36}`, func(c Config) bool {
			return c.OutChannels == 16
		}},
		{"cross_attn_norm false", `{"cross_attn_norm": false}`, func(c Config) bool { return !c.CrossAttnNorm }},
		{"unknown keys are ignored", `{"_class_name": "WanTransformer3DModel", "window_size": [-1, -1]}`, func(c Config) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("got %+v", c)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct{ json, want string }{
		{`{`, "unexpected end"},
		{`{"num_layers": "many"}`, "cannot unmarshal"},
		{`{"num_attention_heads": 0}`, "num_attention_heads must be > 0"},
		{`{"ffn_dim": -1}`, "ffn_dim must be > 0"},
		{`{"patch_size": [1, 2]}`, "patch_size[2] must be > 0"},
		{`{"attention_head_dim": 21}`, "must be even"},
		{`{"eps": 0}`, "eps must be > 0"},
		{`{"image_dim": 1280, "added_kv_proj_dim": 5120}`, "image conditioning"},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.json, err, tt.want)
		}
	}
}

// TestParseConfigQKNorm: diffusers 0.40.0 never reads qk_norm (its
// attention always norms q and k across heads), so any value loads and is
// kept as written.
func TestParseConfigQKNorm(t *testing.T) {
	tests := []struct {
		name, json string
		want       *string // nil: null
	}{
		{"absent is the default", `{}`, ptr(QKNormAcrossHeads)},
		{"across heads", `{"qk_norm": "rms_norm_across_heads"}`, ptr(QKNormAcrossHeads)},
		{"per-head name", `{"qk_norm": "rms_norm"}`, ptr("rms_norm")},
		{"null", `{"qk_norm": null}`, nil},
		{"empty", `{"qk_norm": ""}`, ptr("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatalf("%s: %v", tt.json, err)
			}
			if (c.QKNorm == nil) != (tt.want == nil) || c.QKNorm != nil && *c.QKNorm != *tt.want {
				t.Errorf("%s: qk_norm %v, want %v", tt.json, c.QKNorm, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestFullSizeConfigs checks the released checkpoints' sizes (from
// Wan-AI/Wan2.1-T2V-{1.3B,14B}-Diffusers transformer/config.json).
func TestFullSizeConfigs(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		dim    int
		layers int
		ffn    int
	}{
		{"1.3B", Config1_3B(), 1536, 30, 8960},
		{"14B", Config14B(), 5120, 40, 13824},
	}
	for _, tt := range tests {
		c := tt.cfg
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		if c.InnerDim() != tt.dim || c.AttentionHeadDim != 128 || c.NumLayers != tt.layers || c.FFNDim != tt.ffn ||
			c.FreqDim != 256 || c.TextDim != 4096 || c.InChannels != 16 || c.OutChannels != 16 || c.Eps != 1e-6 {
			t.Errorf("%s: %+v", tt.name, c)
		}
		ps := c.Params()
		if want := 12 + 27*c.NumLayers + 3; len(ps) != want {
			t.Errorf("%s: %d tensors, want %d", tt.name, len(ps), want)
		}
		t.Logf("%s: %d parameters", tt.name, countParams(c))
	}
}

func countParams(c Config) int64 {
	var n int64
	for _, p := range c.Params() {
		k := int64(1)
		for _, d := range p.Shape {
			k *= int64(d)
		}
		n += k
	}
	return n
}
