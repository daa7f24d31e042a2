package umt5

import (
	"math/rand/v2"
	"strings"
	"testing"

	"ferry/tensor"
)

const smallConfig = `{"model_type":"%s","vocab_size":20,"d_model":8,"d_kv":4,"d_ff":12,"num_layers":2,"num_heads":2,"relative_attention_num_buckets":8,"relative_attention_max_distance":10}`

func smallCfg(t *testing.T, variant string) Config {
	return tinyConfig(t, strings.Replace(smallConfig, "%s", variant, 1))
}

func TestEncodeRejectsBadInput(t *testing.T) {
	cfg := smallCfg(t, "umt5")
	r := newRig(t, nil)
	m := r.encoder(t, cfg, synthesize(cfg, 1))
	r.encode(t, m, []int32{1, 2}, nil, 1, 2) // loads the (resident) weights
	ids := []int32{1, 2, 3, 4}
	tests := []struct {
		name          string
		ids, mask     []int32
		batch, seqLen int
		want          string
	}{
		{"zero batch", ids, nil, 0, 4, "must be > 0"},
		{"ids do not fill the batch", ids, nil, 2, 3, "4 ids for batch 2 × length 3"},
		{"mask length", ids, []int32{1, 1}, 1, 4, "mask has 2 values"},
		{"mask value", ids, []int32{1, 1, 2, 0}, 1, 4, "mask value 2"},
		{"id outside the vocabulary", []int32{1, 20, 3, 4}, nil, 1, 4, "id 20 outside"},
		{"negative id", []int32{1, -1, 3, 4}, nil, 2, 2, "id -1 outside"},
	}
	ops := r.ex.Ops("text_encoder")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.dev.Stats().Allocated
			out, err := m.Encode(r.ex, ops, tt.ids, tt.mask, tt.batch, tt.seqLen)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode = %v, want an error containing %q", err, tt.want)
			}
			if out != nil {
				t.Errorf("Encode returned a tensor with its error")
			}
			ops.ClearErr()
			if after := r.dev.Stats().Allocated; after != before {
				t.Errorf("a failed Encode left %d bytes allocated (had %d)", after, before)
			}
		})
	}
}

func TestEncodeMissingWeights(t *testing.T) {
	tests := []struct {
		variant, drop, want string
	}{
		{"t5", sharedName, "neither shared.weight nor encoder.embed_tokens.weight"},
		{"t5", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "relative_attention_bias.weight is missing"},
		{"umt5", "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight", "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.variant+" without "+tt.drop, func(t *testing.T) {
			cfg := smallCfg(t, tt.variant)
			src := synthesize(cfg, 2)
			src.Delete(tt.drop)
			r := newRig(t, nil)
			m := r.encoder(t, cfg, src)
			ops := r.ex.Ops("text_encoder")
			before := r.dev.Stats().Allocated
			_, err := m.Encode(r.ex, ops, []int32{1, 2, 3}, []int32{1, 1, 0}, 1, 3)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode = %v, want an error containing %q", err, tt.want)
			}
			// Weights loaded before the failure stay (resident plan); every
			// activation must be gone.
			if after := r.dev.Stats().Allocated; after > before+weightBytes(cfg) {
				t.Errorf("device holds %d bytes after the failure, more than the weights (%d)", after-before, weightBytes(cfg))
			}
		})
	}
}

// weightBytes bounds the device bytes of every block but the row table.
func weightBytes(cfg Config) int64 {
	var n int64
	for _, p := range cfg.Params() {
		if !p.Rows {
			n += int64(tensor.NumElems(p.Shape))*4 + 64
		}
	}
	return n
}

func TestEncodeRegisterFailsOnWrongFeedForward(t *testing.T) {
	// A gated config over a plain checkpoint fails when the executor
	// resolves the blocks, before any compute.
	plain := smallCfg(t, "t5")
	gated := plain
	gated.IsGatedAct, gated.DenseActFn = true, "gelu_new"
	r := newRig(t, nil)
	err := r.ex.Register(New(gated).Component("text_encoder", synthesize(plain, 3)))
	if err == nil || !strings.Contains(err.Error(), "wi_0.weight") {
		t.Errorf("Register = %v, want a missing wi_0.weight", err)
	}
}

func TestEncodeBeforeComponent(t *testing.T) {
	r := newRig(t, nil)
	_, err := New(smallCfg(t, "t5")).Encode(r.ex, r.ex.Ops("x"), []int32{1}, nil, 1, 1)
	if err == nil || !strings.Contains(err.Error(), "before Component") {
		t.Errorf("Encode = %v", err)
	}
}

func TestEncodeStickyError(t *testing.T) {
	cfg := smallCfg(t, "t5")
	r := newRig(t, nil)
	m := r.encoder(t, cfg, synthesize(cfg, 4))
	ops := r.ex.Ops("text_encoder")
	ops.Fail(errSentinel{})
	defer ops.ClearErr()
	if _, err := m.Encode(r.ex, ops, []int32{1}, nil, 1, 1); err == nil || !strings.Contains(err.Error(), "earlier error") {
		t.Errorf("Encode on failed ops = %v", err)
	}
}

type errSentinel struct{}

func (errSentinel) Error() string { return "sentinel" }

func TestEncodeMemoryReturns(t *testing.T) {
	// After the weights are loaded, a pass allocates only activations and
	// frees them all: the device is back where it started once the result
	// is freed, with and without padding, for both variants.
	for _, variant := range []string{"t5", "umt5"} {
		cfg := smallCfg(t, variant)
		r := newRig(t, nil)
		m := r.encoder(t, cfg, synthesize(cfg, 5))
		r.encode(t, m, []int32{1, 2, 3, 4}, nil, 1, 4) // loads the weights
		base := r.dev.Stats().Allocated
		for _, mask := range [][]int32{nil, {1, 1, 1, 0, 1, 0, 0, 0}} {
			r.dev.ResetPeakStats()
			r.encode(t, m, []int32{1, 2, 3, 4, 5, 6, 7, 8}, mask, 2, 4)
			if got := r.dev.Stats().Allocated; got != base {
				t.Errorf("%s mask %v: allocated %d after Encode, %d before", variant, mask, got, base)
			}
			if r.dev.Stats().PeakAllocated <= base {
				t.Errorf("%s: peak did not move: was anything computed on the device?", variant)
			}
		}
	}
}

// TestEncodePeakMemory bounds what a pass holds at once: the hidden state,
// the mask, the attention bias and one phase's temporaries, nothing more
// (the forward for UMT5-XXL must fit beside one streamed layer).
func TestEncodePeakMemory(t *testing.T) {
	const b, n = 2, 64
	for _, variant := range []string{"t5", "umt5"} {
		t.Run(variant, func(t *testing.T) {
			cfg := tinyConfig(t, `{"model_type":"`+variant+`","vocab_size":50,"d_model":64,"d_kv":16,"d_ff":128,"num_layers":2,"num_heads":4,"feed_forward_proj":"gated-gelu"}`)
			r := newRig(t, nil)
			m := r.encoder(t, cfg, synthesize(cfg, 6))
			ids, mask := randomTokens(rand.New(rand.NewPCG(6, 6)), cfg.VocabSize, n, n, 20)
			r.encode(t, m, ids, mask, b, n) // loads the weights
			base := r.dev.Stats().Allocated
			r.dev.ResetPeakStats()
			r.encode(t, m, ids, mask, b, n)

			// Floats held at once, phase by phase (see Encode's doc comment).
			h, d, inner, ff := cfg.NumHeads, cfg.DModel, cfg.InnerDim(), cfg.DFF
			hidden, biasB, bias1 := b*n*d, b*h*n*n, h*n*n
			build := max(2*bias1, bias1+biasB)          // gather + permute, then permute + masked sum
			attend := biasB + b*n*d + 4*b*n*inner       // bias, norm, q, k, v, attention out
			feed := b*n*d + max(2*b*n*ff, b*n*ff+b*n*d) // norm, wi_0 and wi_1, then wo's out
			if variant == "t5" {
				feed += biasB // T5 keeps layer 0's bias to the end
			}
			want := int64(4 * (hidden + b*n + max(build, attend, feed)))
			slack := int64(16 * 512) // allocator rounding of the small tensors
			if got := r.dev.Stats().PeakAllocated - base; got > want+slack {
				t.Errorf("peak activations %d bytes, want <= %d", got, want+slack)
			} else {
				t.Logf("peak activations %d bytes (bound %d)", got, want)
			}
		})
	}
}
