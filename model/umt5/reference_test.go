package umt5

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/model/modeltest"
	"ferry/residency"
)

// refEncode is an independent float64 transcription of T5Stack's encoder
// forward (modeling_t5.py / modeling_umt5.py) over host weights, written
// loop by loop so it shares nothing with the Ops code under test. Masked
// keys are left out of the softmax, which is what adding finfo.min does.
func refEncode(cfg Config, w map[string][]float32, table string, ids, mask []int32, batch, seqLen int) []float32 {
	d, hN, dk := cfg.DModel, cfg.NumHeads, cfg.DKV
	inner := cfg.InnerDim()
	x := make([][]float64, batch*seqLen)
	for i, id := range ids {
		x[i] = make([]float64, d)
		for j := range d {
			x[i][j] = float64(w[table][int(id)*d+j])
		}
	}
	var bias []float64 // [H, L, L]
	for l := range cfg.NumLayers {
		p := fmt.Sprintf("encoder.block.%d.layer.", l)
		if cfg.hasBias(l) {
			bias = refBias(cfg, w[p+"0.SelfAttention.relative_attention_bias.weight"], seqLen)
		}
		for b := range batch {
			rows := x[b*seqLen : (b+1)*seqLen]
			h := refNorm(rows, w[p+"0.layer_norm.weight"], cfg.LayerNormEps)
			q := refLinear(h, w[p+"0.SelfAttention.q.weight"], inner)
			k := refLinear(h, w[p+"0.SelfAttention.k.weight"], inner)
			v := refLinear(h, w[p+"0.SelfAttention.v.weight"], inner)
			ctx := make([][]float64, seqLen)
			for i := range ctx {
				ctx[i] = make([]float64, inner)
			}
			for hd := range hN {
				for i := range seqLen {
					s := make([]float64, seqLen)
					top := math.Inf(-1)
					for j := range seqLen {
						if mask != nil && mask[b*seqLen+j] == 0 {
							s[j] = math.Inf(-1)
							continue
						}
						for c := range dk {
							s[j] += q[i][hd*dk+c] * k[j][hd*dk+c]
						}
						s[j] += bias[(hd*seqLen+i)*seqLen+j]
						top = math.Max(top, s[j])
					}
					sum := 0.0
					for j := range s {
						s[j] = math.Exp(s[j] - top)
						sum += s[j]
					}
					for j := range s {
						for c := range dk {
							ctx[i][hd*dk+c] += s[j] / sum * v[j][hd*dk+c]
						}
					}
				}
			}
			refAdd(rows, refLinear(ctx, w[p+"0.SelfAttention.o.weight"], d))

			h = refNorm(rows, w[p+"1.layer_norm.weight"], cfg.LayerNormEps)
			var a [][]float64
			if cfg.IsGatedAct {
				a = refLinear(h, w[p+"1.DenseReluDense.wi_0.weight"], cfg.DFF)
				g := refLinear(h, w[p+"1.DenseReluDense.wi_1.weight"], cfg.DFF)
				for i := range a {
					for j := range a[i] {
						a[i][j] = refAct(cfg.DenseActFn, a[i][j]) * g[i][j]
					}
				}
			} else {
				a = refLinear(h, w[p+"1.DenseReluDense.wi.weight"], cfg.DFF)
				for i := range a {
					for j := range a[i] {
						a[i][j] = refAct(cfg.DenseActFn, a[i][j])
					}
				}
			}
			refAdd(rows, refLinear(a, w[p+"1.DenseReluDense.wo.weight"], d))
		}
	}
	out := refNorm(x, w["encoder.final_layer_norm.weight"], cfg.LayerNormEps)
	flat := make([]float32, 0, len(out)*d)
	for _, r := range out {
		for _, v := range r {
			flat = append(flat, float32(v))
		}
	}
	return flat
}

// refBias is compute_bias in float64: [H, L, L].
func refBias(cfg Config, table []float32, n int) []float64 {
	half := cfg.NumBuckets / 2
	exact := half / 2
	out := make([]float64, cfg.NumHeads*n*n)
	for i := range n {
		for j := range n {
			rel, bucket := j-i, 0
			if rel > 0 {
				bucket = half
			}
			dist := int(math.Abs(float64(rel)))
			if dist < exact {
				bucket += dist
			} else {
				large := exact + int(math.Log(float64(dist)/float64(exact))/math.Log(float64(cfg.MaxDistance)/float64(exact))*float64(half-exact))
				bucket += min(large, half-1)
			}
			for h := range cfg.NumHeads {
				out[(h*n+i)*n+j] = float64(table[bucket*cfg.NumHeads+h])
			}
		}
	}
	return out
}

func refNorm(x [][]float64, w []float32, eps float64) [][]float64 {
	out := make([][]float64, len(x))
	for i, r := range x {
		ms := 0.0
		for _, v := range r {
			ms += v * v
		}
		s := 1 / math.Sqrt(ms/float64(len(r))+eps)
		out[i] = make([]float64, len(r))
		for j, v := range r {
			out[i][j] = v * s * float64(w[j])
		}
	}
	return out
}

// refLinear is x·wᵀ for w [out, in].
func refLinear(x [][]float64, w []float32, outDim int) [][]float64 {
	out := make([][]float64, len(x))
	for i, r := range x {
		out[i] = make([]float64, outDim)
		for o := range outDim {
			for c, v := range r {
				out[i][o] += v * float64(w[o*len(r)+c])
			}
		}
	}
	return out
}

func refAdd(x, y [][]float64) {
	for i := range x {
		for j := range x[i] {
			x[i][j] += y[i][j]
		}
	}
}

func refAct(name string, v float64) float64 {
	switch name {
	case "relu":
		return math.Max(v, 0)
	case "gelu":
		return 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
	case "silu", "swish":
		return v / (1 + math.Exp(-v))
	}
	return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
}

// randomTokens returns ids and a mask whose rows are padded to lengths.
func randomTokens(rng *rand.Rand, vocab, seqLen int, lengths ...int) (ids, mask []int32) {
	for _, n := range lengths {
		for j := range seqLen {
			if j < n {
				ids, mask = append(ids, int32(rng.IntN(vocab))), append(mask, 1)
			} else {
				ids, mask = append(ids, 0), append(mask, 0)
			}
		}
	}
	return ids, mask
}

// tinyConfig is a small encoder whose 16 buckets / distance 20 put no
// distance on a rounding boundary (so float64 and float32 bucketing agree).
func tinyConfig(t *testing.T, json string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(json))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEncodeMatchesReference(t *testing.T) {
	const base = `"vocab_size":50,"d_model":16,"d_kv":6,"d_ff":24,"num_layers":3,"num_heads":3,"relative_attention_num_buckets":16,"relative_attention_max_distance":20`
	tests := []struct {
		name    string
		config  string
		lengths []int // per batch row; seqLen is the longest
		seqLen  int
		drop    string // a tensor to remove from the checkpoint
		noMask  bool
	}{
		{"t5 relu, no padding", `{"model_type":"t5",` + base + `}`, []int{14, 14}, 14, "", true},
		{"t5 relu, padded", `{"model_type":"t5",` + base + `}`, []int{14, 5}, 14, "", false},
		{"umt5 gated-gelu, padded", `{"model_type":"umt5",` + base + `,"feed_forward_proj":"gated-gelu"}`, []int{3, 14, 9}, 14, "", false},
		{"umt5 single row, all ones mask", `{"model_type":"umt5",` + base + `,"feed_forward_proj":"gated-gelu"}`, []int{11}, 11, "", false},
		{"t5 gated-silu, table as encoder.embed_tokens", `{"model_type":"t5",` + base + `,"feed_forward_proj":"gated-silu"}`, []int{14, 7}, 14, sharedName, false},
		{"t5 gelu (erf)", `{"model_type":"t5",` + base + `,"feed_forward_proj":"gelu"}`, []int{6}, 6, "", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tinyConfig(t, tt.config)
			src := synthesize(cfg, uint64(i))
			table := sharedName
			if tt.drop == sharedName {
				info, _ := src.Info(sharedName)
				d, _ := src.Get(sharedName)
				src.Put(tokensName, info.Shape, d)
				src.Delete(sharedName)
				table = tokensName
			}
			ids, mask := randomTokens(rand.New(rand.NewPCG(uint64(i), 2)), cfg.VocabSize, tt.seqLen, tt.lengths...)
			if tt.noMask {
				mask = nil
			}
			want := refEncode(cfg, src.Tensors(), table, ids, mask, len(tt.lengths), tt.seqLen)
			r := newRig(t, nil)
			m := r.encoder(t, cfg, src)
			got := r.encode(t, m, ids, mask, len(tt.lengths), tt.seqLen)
			worst := modeltest.Compare(t, "last_hidden_state", got, want, 1e-5, 1e-5)
			t.Logf("max abs error vs float64 reference: %.3g", worst)
		})
	}
}

// TestEncodeStreamed runs the encoder block by block from "disk" with a
// prefetch, as the pipeline does for UMT5-XXL, and checks the result is
// the resident one bit for bit and that the device ends where it started.
func TestEncodeStreamed(t *testing.T) {
	for _, variant := range []string{"t5", "umt5"} {
		t.Run(variant, func(t *testing.T) {
			cfg := tinyConfig(t, `{"model_type":"`+variant+`","vocab_size":40,"d_model":16,"d_kv":4,"d_ff":20,"num_layers":4,"num_heads":4,"relative_attention_num_buckets":16,"relative_attention_max_distance":20,"feed_forward_proj":"gated-gelu"}`)
			src := synthesize(cfg, 7)
			ids, mask := randomTokens(rand.New(rand.NewPCG(7, 7)), cfg.VocabSize, 12, 12, 4)

			resident := newRig(t, nil)
			want := resident.encode(t, resident.encoder(t, cfg, src), ids, mask, 2, 12)

			plan := residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk, Prefetch: 1}, "text_encoder")
			streamed := newRig(t, plan)
			m := streamed.encoder(t, cfg, src)
			before := streamed.dev.Stats().Allocated
			for range 2 { // twice: the prefetch wraps around to block 0
				got := streamed.encode(t, m, ids, mask, 2, 12)
				modeltest.Compare(t, "streamed", got, want, 0, 0)
			}
			streamed.ex.Done("text_encoder")
			if after := streamed.dev.Stats().Allocated; after != before {
				t.Errorf("device allocated %d bytes after streaming, %d before", after, before)
			}
		})
	}
}
