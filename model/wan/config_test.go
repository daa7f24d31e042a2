package wan

import (
	"os"
	"slices"
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
		{"I2V keys", `{"image_dim": 1280, "added_kv_proj_dim": 5120, "in_channels": 36}`, func(c Config) bool {
			return c.HasImage() && *c.ImageDim == 1280 && c.ImageTokens() == 0
		}},
		{"FLF2V keys", `{"image_dim": 1280, "added_kv_proj_dim": 5120, "pos_embed_seq_len": 514}`, func(c Config) bool {
			return c.HasImage() && c.ImageTokens() == 514
		}},
		{"explicit nulls are text-to-video", `{"image_dim": null, "added_kv_proj_dim": null, "pos_embed_seq_len": null}`, func(c Config) bool {
			return !c.HasImage()
		}},
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
		{`{"num_attention_heads": 0}`, "num_attention_heads must be 1 to"},
		{`{"ffn_dim": -1}`, "ffn_dim must be 1 to"},
		{`{"num_layers": 1000000000}`, "num_layers must be 1 to 65536"},
		{`{"patch_size": [1, 2]}`, "patch_size[2] must be 1 to"},
		{`{"attention_head_dim": 21}`, "must be even"},
		{`{"eps": 0}`, "eps must be > 0"},
		{`{"image_dim": 1280}`, "image_dim and added_kv_proj_dim must be set together"},
		{`{"added_kv_proj_dim": 5120}`, "image_dim and added_kv_proj_dim must be set together"},
		{`{"image_dim": 1280, "added_kv_proj_dim": 1280}`, "added_kv_proj_dim 1280 must equal the model width 5120"},
		{`{"image_dim": 0, "added_kv_proj_dim": 5120}`, "image_dim must be > 0"},
		{`{"image_dim": 1280, "added_kv_proj_dim": 5120, "pos_embed_seq_len": 257}`, "positive even number"},
		{`{"pos_embed_seq_len": 514}`, "without image_dim"},
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

// TestParseConfigPipelineGoldens reads the transformer configs of the
// Wan 2.1 I2V and Wan 2.2 TI2V pipeline goldens.
func TestParseConfigPipelineGoldens(t *testing.T) {
	tests := []struct {
		dir       string
		image     bool
		in, out   int
		imageDim  int
		ropeMaxSL int
	}{
		{"wan21_i2v_transformer", true, 36, 16, 16, 256},
		{"wan22_ti2v_transformer", false, 12, 12, 0, 256},
	}
	for _, tt := range tests {
		raw, err := os.ReadFile("testdata/" + tt.dir + "/config.json")
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseConfig(raw)
		if err != nil {
			t.Fatalf("%s: %v", tt.dir, err)
		}
		if c.HasImage() != tt.image || c.InChannels != tt.in || c.OutChannels != tt.out || c.RopeMaxSeqLen != tt.ropeMaxSL ||
			c.InnerDim() != 24 || c.PosEmbedSeqLen != nil || (tt.image && (*c.ImageDim != tt.imageDim || *c.AddedKVProjDim != 24)) {
			t.Errorf("%s: got %+v", tt.dir, c)
		}
	}
}

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

// TestFullSizeImageConfigs checks the image-to-video and TI2V checkpoints'
// sizes (Wan-AI/Wan2.1-I2V-14B-480P-Diffusers and
// Wan-AI/Wan2.2-TI2V-5B-Diffusers transformer/config.json) and what they
// add to Params: the image embedder's 8 tensors and 5 per block.
func TestFullSizeImageConfigs(t *testing.T) {
	tests := []struct {
		name                string
		cfg                 Config
		dim, layers, ffn    int
		in, out             int
		tensors             int
		minParams, maxParam int64
	}{
		{"I2V-14B", ConfigI2V14B(), 5120, 40, 13824, 36, 16, 12 + 8 + (27+5)*40 + 3, 16_300_000_000, 16_500_000_000},
		{"TI2V-5B", ConfigTI2V5B(), 3072, 30, 14336, 48, 48, 12 + 27*30 + 3, 4_900_000_000, 5_100_000_000},
	}
	for _, tt := range tests {
		c := tt.cfg
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if c.InnerDim() != tt.dim || c.AttentionHeadDim != 128 || c.NumLayers != tt.layers || c.FFNDim != tt.ffn ||
			c.InChannels != tt.in || c.OutChannels != tt.out || c.TextDim != 4096 || c.FreqDim != 256 || c.PatchSize != [3]int{1, 2, 2} {
			t.Errorf("%s: %+v", tt.name, c)
		}
		if n := len(c.Params()); n != tt.tensors {
			t.Errorf("%s: %d tensors, want %d", tt.name, n, tt.tensors)
		}
		if n := countParams(c); n < tt.minParams || n > tt.maxParam {
			t.Errorf("%s: %d parameters, want %d..%d", tt.name, n, tt.minParams, tt.maxParam)
		}
		t.Logf("%s: %d parameters", tt.name, countParams(c))
	}
	shapes := map[string][]int{}
	for _, p := range ConfigI2V14B().Params() {
		shapes[p.Name] = p.Shape
	}
	for name, want := range map[string][]int{
		"condition_embedder.image_embedder.ff.net.0.proj.weight": {1280, 1280},
		"condition_embedder.image_embedder.ff.net.2.weight":      {5120, 1280},
		"condition_embedder.image_embedder.norm2.bias":           {5120},
		"blocks.39.attn2.add_k_proj.weight":                      {5120, 5120},
		"blocks.39.attn2.norm_added_k.weight":                    {5120},
		"patch_embedding.weight":                                 {5120, 36, 1, 2, 2},
		"proj_out.weight":                                        {64, 5120},
	} {
		if !slices.Equal(shapes[name], want) {
			t.Errorf("I2V-14B %s: %v, want %v", name, shapes[name], want)
		}
	}
}

// FuzzParseConfig: any input either fails with an error or gives a config
// that validates and whose parameters all have positive sizes.
func FuzzParseConfig(f *testing.F) {
	for _, dir := range []string{"wan_transformer", "wan21_i2v_transformer", "wan22_ti2v_transformer"} {
		raw, err := os.ReadFile("testdata/" + dir + "/config.json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"image_dim": 4, "added_kv_proj_dim": 5120, "pos_embed_seq_len": 2}`))
	f.Add([]byte(`{"out_channels": null, "in_channels": 48}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseConfig(raw)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		if c.InnerDim() > 1<<16 || c.NumLayers > 64 || c.FFNDim > 1<<16 {
			return // too large to list cheaply
		}
		for _, p := range c.Params() {
			for _, d := range p.Shape {
				if d <= 0 {
					t.Fatalf("%s has shape %v", p.Name, p.Shape)
				}
			}
		}
	})
}
