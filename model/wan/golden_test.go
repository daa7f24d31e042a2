package wan

import (
	"math"
	"slices"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
)

// The golden cases' tolerance (manifest.json: atol 1e-4, rtol 1e-4).
const atol, rtol = 1e-4, 1e-4

var goldenCases = []string{"wan_transformer", "wan_transformer_bf16"}

func TestParamsMatchGoldenCheckpoint(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, name)
			modeltest.ParamsMatchCheckpoint(t, g.weights, g.cfg.Params())
		})
	}
}

// TestParamsMatchBlocks checks that every declared block binds exactly the
// weights Params assigns to it (the executor resolves names from the w
// tags, the planner sizes blocks from Params).
func TestParamsMatchBlocks(t *testing.T) {
	type variant struct {
		crossNorm  bool
		image, pos bool
	}
	var variants []variant
	for _, crossNorm := range []bool{true, false} {
		variants = append(variants, variant{crossNorm, false, false}, variant{crossNorm, true, false}, variant{crossNorm, true, true})
	}
	for _, v := range variants {
		crossNorm := v.crossNorm
		cfg := tinyConfig()
		cfg.CrossAttnNorm = crossNorm
		if v.image {
			cfg.ImageDim, cfg.AddedKVProjDim = ptr(12), ptr(cfg.InnerDim())
		}
		if v.pos {
			cfg.PosEmbedSeqLen = ptr(6)
		}
		src := synthesize(cfg, 1)
		r := newRig(t)
		m := r.model(t, cfg, src) // Register fails on any tag Params lacks
		bytes := map[string]int64{}
		for _, p := range cfg.Params() {
			d, _ := src.Get(p.Name)
			bytes["transformer."+p.Block] += int64(4 * len(d))
		}
		for _, b := range m.comp.Blocks {
			// Block.Bytes pads each tensor to 64 bytes.
			if b.Bytes() < bytes[b.Name] || b.Bytes() > bytes[b.Name]+64*int64(len(cfg.Params())) {
				t.Errorf("%+v: block %s binds %d bytes, Params say %d", v, b.Name, b.Bytes(), bytes[b.Name])
			}
			delete(bytes, b.Name)
		}
		if len(bytes) != 0 {
			t.Errorf("Params name blocks the component does not declare: %v", bytes)
		}
	}
}

func TestRopeFreqsMatchGolden(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, name)
			_, shape := modeltest.TensorOf(t, g.inputs, "hidden_states")
			cos, sin, err := g.cfg.RopeFreqs(shape[2], shape[3], shape[4])
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				got  []float64
			}{{"rope_freqs_cos", cos}, {"rope_freqs_sin", sin}} {
				want, wshape := modeltest.TensorOf(t, g.outputs, tc.name)
				if wshape[0] != 1 || wshape[2] != 1 || wshape[1]*wshape[3] != len(tc.got) {
					t.Fatalf("%s: golden %v does not fit %d values", tc.name, wshape, len(tc.got))
				}
				got := make([]float32, len(tc.got))
				for i, v := range tc.got {
					got[i] = float32(v)
				}
				worst := modeltest.Compare(t, tc.name, got, want, atol, rtol)
				t.Logf("%s: max abs error %.3g (atol %g, rtol %g)", tc.name, worst, atol, rtol)
			}
		})
	}
}

// TestForwardMatchesGolden runs both golden cases with the reference GEMM
// and with the one ferry runs with (gemm.Best: OpenBLAS or the Go kernels).
func TestForwardMatchesGolden(t *testing.T) {
	for _, name := range goldenCases {
		for _, impl := range []gemm.Impl{gemm.Naive{}, gemm.Best()} {
			t.Run(name+"/"+impl.Name(), func(t *testing.T) {
				g := loadGolden(t, name)
				x, xs := modeltest.TensorOf(t, g.inputs, "hidden_states")
				ts, _ := modeltest.TensorOf(t, g.inputs, "timestep")
				ctx, cs := modeltest.TensorOf(t, g.inputs, "encoder_hidden_states")
				want, _ := modeltest.TensorOf(t, g.outputs, "sample")
				if ts[0] == ts[1] {
					t.Fatalf("golden timesteps %v are not distinct", ts)
				}

				r := newRigGEMM(t, impl)
				m := r.model(t, g.cfg, residency.SourceOf(g.weights))
				got := r.forward(t, m, x, xs, ts, ctx, cs)
				worst := modeltest.Compare(t, "sample", got, want, atol, rtol)
				t.Logf("sample: max abs error %.3g (atol %g, rtol %g; golden absmax %.3g)", worst, atol, rtol, absMax(want))

				// The device holds the weights now; a second pass must give
				// it back exactly what it held before.
				before := r.dev.Stats().Allocated
				again := r.forward(t, m, x, xs, ts, ctx, cs)
				if after := r.dev.Stats().Allocated; after != before {
					t.Errorf("device allocated %d bytes before Forward, %d after", before, after)
				}
				if !slices.Equal(got, again) {
					t.Error("a second Forward gave a different result")
				}
			})
		}
	}
}

func absMax(d []float32) float64 {
	m := 0.0
	for _, v := range d {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}
