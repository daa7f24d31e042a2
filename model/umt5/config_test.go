package umt5

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		check func(t *testing.T, c Config)
	}{
		{"umt5 by model_type, gated-gelu means gelu_new", `{"model_type":"umt5","feed_forward_proj":"gated-gelu"}`, func(t *testing.T, c Config) {
			want := Config{ModelType: "umt5", VocabSize: 250112, DModel: 512, DKV: 64, DFF: 1024, NumLayers: 8, NumHeads: 6,
				NumBuckets: 32, MaxDistance: 128, LayerNormEps: 1e-6, FeedForwardProj: "gated-gelu", DenseActFn: "gelu_new", IsGatedAct: true, Variant: UMT5}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got %+v\nwant %+v", c, want)
			}
		}},
		{"t5 defaults are relu", `{"model_type":"t5"}`, func(t *testing.T, c Config) {
			if c.Variant != T5 || c.DenseActFn != "relu" || c.IsGatedAct || c.VocabSize != 32128 || c.DFF != 2048 || c.NumLayers != 6 || c.NumHeads != 8 {
				t.Errorf("got %+v", c)
			}
		}},
		{"mt5 is T5 with mt5 sizes", `{"model_type":"mt5"}`, func(t *testing.T, c Config) {
			if c.Variant != T5 || c.DenseActFn != "gelu_new" || !c.IsGatedAct || c.VocabSize != 250112 {
				t.Errorf("got %+v", c)
			}
		}},
		{"variant from architectures", `{"architectures":["UMT5EncoderModel"]}`, func(t *testing.T, c Config) {
			if c.Variant != UMT5 {
				t.Errorf("variant %v", c.Variant)
			}
		}},
		{"t5 from architectures", `{"architectures":["T5EncoderModel"],"feed_forward_proj":"gated-silu"}`, func(t *testing.T, c Config) {
			if c.Variant != T5 || c.DenseActFn != "silu" || !c.IsGatedAct {
				t.Errorf("got %+v", c)
			}
		}},
		{"explicit dense_act_fn and is_gated_act win (transformers 4.47)", `{"model_type":"t5","feed_forward_proj":"gated-gelu","dense_act_fn":"gelu","is_gated_act":false}`, func(t *testing.T, c Config) {
			if c.DenseActFn != "gelu" || c.IsGatedAct {
				t.Errorf("got %+v", c)
			}
		}},
		{"given sizes kept", `{"model_type":"umt5","d_model":4096,"d_ff":10240,"num_heads":64,"d_kv":64,"num_layers":24,"vocab_size":256384}`, func(t *testing.T, c Config) {
			if c.DModel != 4096 || c.DFF != 10240 || c.InnerDim() != 4096 || c.NumLayers != 24 || c.VocabSize != 256384 {
				t.Errorf("got %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct{ json, want string }{
		{`{`, "unexpected end"},
		{`{"model_type":"bert"}`, `model_type "bert"`},
		{`{"architectures":["BertModel"]}`, "cannot tell the architecture"},
		{`{"model_type":"t5","d_model":0}`, "d_model must be 1 to"},
		{`{"model_type":"t5","num_heads":-1}`, "num_heads must be 1 to"},
		{`{"model_type":"umt5","num_layers":1000000000}`, "num_layers must be 1 to 1048576"},
		{`{"model_type":"t5","relative_attention_num_buckets":2}`, "num_buckets must be >= 4"},
		{`{"model_type":"t5","relative_attention_num_buckets":32,"relative_attention_max_distance":8}`, "must exceed the 8 exact buckets"},
		{`{"model_type":"t5","feed_forward_proj":"double-gelu"}`, "not of the form"},
		{`{"model_type":"t5","feed_forward_proj":"gated-gelu-x"}`, "not of the form"},
		{`{"model_type":"t5","feed_forward_proj":"mish"}`, `activation "mish" is not supported`},
		{`{"model_type":"t5","layer_norm_epsilon":0}`, "layer_norm_epsilon must be > 0"},
		{`{"model_type":"t5","d_model":"big"}`, "cannot unmarshal"},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tt.json, err, tt.want)
		}
	}
}

// FuzzParseConfig: any config.json is refused with an error or parses to a
// config whose parameter list can be built.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"model_type": "umt5", "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 1, "num_heads": 4, "vocab_size": 128, "relative_attention_num_buckets": 8}`))
	f.Add([]byte(`{"model_type": "t5", "feed_forward_proj": "gated-gelu"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseConfig(raw)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			return
		}
		_ = c.Params()
	})
}
