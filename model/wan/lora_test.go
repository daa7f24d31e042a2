package wan

import (
	"testing"

	"ferry/model/modeltest"
	"ferry/tensor"
)

// TestLoRABias: an adapter's bias (ComfyUI's diff_b, PEFT's lora_B.bias)
// adds to its Linear's output as a change of the Linear's bias would, alone
// or beside a pair; the pair's product is unchanged by it.
func TestLoRABias(t *testing.T) {
	cfg := tinyConfig()
	shape := []int{1, cfg.InChannels, 1, 4, 4}
	x := modeltest.Randn(1, tensor.NumElems(shape))
	ctx := modeltest.Randn(2, 512*cfg.TextDim)
	run := func(src map[string][]float32, ls func(*tensor.Ops) []LoRA) []float32 {
		t.Helper()
		s := synthesize(cfg, 8)
		for name, v := range src {
			info, _ := s.Info(name)
			s.Put(name, info.Shape, v)
		}
		r := newRig(t)
		m := r.model(t, cfg, s)
		ops := r.ex.Ops("transformer")
		var adapters []LoRA
		if ls != nil {
			adapters = ls(ops)
		}
		defer func() {
			for _, l := range adapters {
				tensor.Free(l.A, l.B, l.Bias)
			}
		}()
		if err := m.SetLoRA(adapters); err != nil {
			t.Fatal(err)
		}
		return r.forward(t, m, x, shape, []float32{500}, ctx, []int{1, 512, cfg.TextDim})
	}
	for _, mod := range []string{"blocks.1.ffn.net.2", "blocks.0.attn1.to_q", "proj_out"} {
		_, shapes := cfg.LinearShapes()
		out := shapes[mod][0]
		d := modeltest.Randn(3, out)
		want := run(movedBias(cfg, mod, d), nil)
		got := run(nil, func(ops *tensor.Ops) []LoRA {
			return []LoRA{{Module: mod, Bias: ops.Upload(d, 1, out)}}
		})
		if diff := maxDiff(got, want); diff > 1e-5 {
			t.Errorf("%s: a bias alone differs from the moved bias by %g", mod, diff)
		}
		base := run(nil, nil)
		if diff := maxDiff(got, base); diff < 1e-4 {
			t.Errorf("%s: the bias changed the output by only %g", mod, diff)
		}
	}
	// Beside a pair: the pair's change plus the bias's.
	mod := "blocks.0.ffn.net.0.proj"
	_, shapes := cfg.LinearShapes()
	s := shapes[mod]
	a, b, d := modeltest.Randn(4, 2*s[1]), modeltest.Randn(5, s[0]*2), modeltest.Randn(6, s[0])
	pair := func(ops *tensor.Ops) LoRA {
		return LoRA{Module: mod, A: ops.Upload(a, 2, s[1]), B: ops.Upload(b, s[0], 2), Scale: 0.5}
	}
	want := run(movedBias(cfg, mod, d), func(ops *tensor.Ops) []LoRA { return []LoRA{pair(ops)} })
	got := run(nil, func(ops *tensor.Ops) []LoRA {
		l := pair(ops)
		l.Bias = ops.Upload(d, 1, s[0])
		return []LoRA{l}
	})
	if diff := maxDiff(got, want); diff > 1e-5 {
		t.Errorf("%s: pair and bias differ from the pair over the moved bias by %g", mod, diff)
	}
}

// movedBias is the synthetic weights' bias of mod plus d, as the
// replacement tensor TestLoRABias runs with.
func movedBias(cfg Config, mod string, d []float32) map[string][]float32 {
	bias, _ := synthesize(cfg, 8).Get(mod + ".bias")
	moved := make([]float32, len(d))
	for i := range moved {
		moved[i] = bias[i] + d[i]
	}
	return map[string][]float32{mod + ".bias": moved}
}

// TestLoRAFits: SetLoRA takes a pair, a bias or both, and refuses a bias
// of another width or an adapter with neither.
func TestLoRAFits(t *testing.T) {
	cfg := tinyConfig()
	r := newRig(t)
	m := r.model(t, cfg, synthesize(cfg, 8))
	ops := r.ex.Ops("transformer")
	_, shapes := cfg.LinearShapes()
	out := shapes["proj_out"][0]
	for _, tc := range []struct {
		name string
		l    LoRA
		ok   bool
	}{
		{"bias", LoRA{Module: "proj_out", Bias: ops.Upload(make([]float32, out), 1, out)}, true},
		{"wrong width", LoRA{Module: "proj_out", Bias: ops.Upload(make([]float32, out+1), 1, out+1)}, false},
		{"nothing", LoRA{Module: "proj_out"}, false},
	} {
		if err := m.SetLoRA([]LoRA{tc.l}); (err == nil) != tc.ok {
			t.Errorf("%s: SetLoRA %v, want ok %v", tc.name, err, tc.ok)
		}
		tensor.Free(tc.l.Bias)
	}
}
