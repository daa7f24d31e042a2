package lora_test

import (
	"path/filepath"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/lora"
	"ferry/model/modeltest"
	"ferry/model/wan"
	pipewan "ferry/pipeline/wan"
	"ferry/residency"
	"ferry/tensor"
)

// The golden case "wan_train" (manifest.json, component "training"): its
// LoRA has rank 4 and alpha 8, which lora_trained.safetensors does not
// store (PEFT state dict without metadata), so the test sets it; and
// lora_sample's tolerance.
const (
	// goldenDir holds it (one copy for every package that tests training).
	goldenDir   = "../testdata/wan_train"
	goldenAlpha = 8
	goldenScale = 2 // alpha/rank
	sampleAtol  = 2e-4
)

func open(t *testing.T, path string) *checkpoint.Set {
	t.Helper()
	s, err := checkpoint.OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestLoRASampleMatchesGolden runs infer_inputs through the golden
// transformer with lora_trained applied, uploaded the way generate
// uploads it (pipeline/wan.UploadLoRA), with the reference GEMM and with
// the one ferry runs with, and compares with diffusers' lora_sample. The
// same pass without the adapters must miss it: the LoRA is what matches.
func TestLoRASampleMatchesGolden(t *testing.T) {
	cfg, err := wan.ReadConfig(filepath.Join(goldenDir, "model"))
	if err != nil {
		t.Fatal(err)
	}
	weights := open(t, filepath.Join(goldenDir, "model"))
	inputs := open(t, filepath.Join(goldenDir, "infer_inputs.safetensors"))
	outputs := open(t, filepath.Join(goldenDir, "outputs_lora.safetensors"))
	x, xs := modeltest.TensorOf(t, inputs, "hidden_states")
	ts, _ := modeltest.TensorOf(t, inputs, "timestep")
	ctx, cs := modeltest.TensorOf(t, inputs, "encoder_hidden_states")
	want, _ := modeltest.TensorOf(t, outputs, "lora_sample")

	file := filepath.Join(goldenDir, "lora_trained.safetensors")
	ads, err := lora.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ads {
		ads[i].Alpha = goldenAlpha
	}
	for _, impl := range []gemm.Impl{gemm.Naive{}, gemm.Best()} {
		t.Run(impl.Name(), func(t *testing.T) {
			rig := modeltest.NewRig(t, impl, nil)
			m := wan.New(cfg)
			if err := rig.Ex.Register(m.Component("transformer", residency.SourceOf(weights))); err != nil {
				t.Fatal(err)
			}
			ops := rig.Ex.Ops("transformer")
			ls, buf, err := pipewan.UploadLoRA(ops, []pipewan.LoRA{{File: file, Scale: 1, Adapters: ads}})
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Free()
			if len(ls) != len(ads) {
				t.Fatalf("%d adapters uploaded, want %d", len(ls), len(ads))
			}
			for _, l := range ls {
				if l.Scale != goldenScale {
					t.Fatalf("%s: scale %g, want %g", l.Module, l.Scale, float32(goldenScale))
				}
			}
			if err := m.SetLoRA(ls); err != nil {
				t.Fatal(err)
			}
			got := forward(t, ops, m, rig.Ex, x, xs, ts, ctx, cs)
			worst := modeltest.Compare(t, "lora_sample", got, want, sampleAtol, 0)
			t.Logf("lora_sample: max abs error %.3g (atol %g)", worst, sampleAtol)

			if err := m.SetLoRA(nil); err != nil {
				t.Fatal(err)
			}
			base := forward(t, ops, m, rig.Ex, x, xs, ts, ctx, cs)
			d := maxAbsDiff(base, want)
			if d <= 10*sampleAtol {
				t.Errorf("without the LoRA the sample is within %.3g of lora_sample: the adapters change nothing", d)
			}
			t.Logf("without the LoRA: max abs difference %.3g", d)
		})
	}
}

// forward uploads the inputs, runs Forward and downloads the result.
func forward(t *testing.T, ops *tensor.Ops, m *wan.Model, r residency.Runner, x []float32, xs []int, ts, ctx []float32, cs []int) []float32 {
	t.Helper()
	xt, ct := ops.Upload(x, xs...), ops.Upload(ctx, cs...)
	defer tensor.Free(xt, ct)
	out, err := m.Forward(r, ops, xt, ts, ct)
	if err != nil {
		t.Fatal(err)
	}
	got := ops.Download(out)
	out.Free()
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
