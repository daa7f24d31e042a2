package cli

import (
	"path/filepath"
	"slices"
	"testing"

	"ferry/lora"
	"ferry/model/wan/wantest"
)

// A LoRA trains on a base transformer stored as ComfyUI's scaled fp8 files
// store it (the original layout, fp8 weights with scale_weight) exactly as
// on the same weights dequantized to float32 in diffusers' layout: under
// --dtype fp32 the base weights are widened with their scales folded in,
// so losses and the saved adapters are bit-identical.
func TestTrainScaledFP8Base(t *testing.T) {
	dir := t.TempDir()
	src, _ := filepath.Abs(trainGoldenModel)
	deq := map[string][]float32{}
	fp8, f32 := filepath.Join(dir, "fp8"), filepath.Join(dir, "f32")
	wantest.WriteComponent(t, src, fp8, wantest.OriginalName, wantest.ScaledFP8(deq, nil))
	wantest.WriteComponent(t, src, f32, wantest.Same, wantest.Dequantized(deq))
	if len(deq) == 0 {
		t.Fatal("no weight was quantized")
	}
	train := func(model, name string) (trainReport, []lora.Adapter) {
		rep, out := filepath.Join(dir, name+".json"), filepath.Join(dir, name+".safetensors")
		code, _, stderr := ferry(t, "train", "--model", model, "--fixed-batch", trainGoldenBatch, "--dtype", "fp32",
			"--lora-rank", "4", "--lora-alpha", "8", "--lora-init", filepath.Join(trainGolden, "lora_init.safetensors"),
			"--steps", "2", "--lr", "1e-3", "--report", rep, "--out", out, "--quiet")
		if code != 0 {
			t.Fatalf("train on %s: exit %d: %s", name, code, stderr)
		}
		ads, err := lora.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		return readReport(t, rep), ads
	}
	r8, lora8 := train(fp8, "fp8")
	r32, lora32 := train(f32, "f32")
	for i := range r32.Steps {
		if r8.Steps[i].Loss != r32.Steps[i].Loss {
			t.Errorf("step %d: loss %v on the scaled fp8 base, %v on the dequantized one", i+1, r8.Steps[i].Loss, r32.Steps[i].Loss)
		}
	}
	if len(lora8) != len(lora32) || len(lora8) == 0 {
		t.Fatalf("%d and %d adapters", len(lora8), len(lora32))
	}
	for i, a := range lora32 {
		b := lora8[i]
		if a.Module != b.Module || !slices.Equal(a.A, b.A) || !slices.Equal(a.B, b.B) {
			t.Errorf("%s: the adapters trained on the two bases differ", a.Module)
		}
	}
}
