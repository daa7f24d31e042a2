package cli

import (
	"math"
	"path/filepath"
	"testing"

	"ferry/checkpoint"
)

// The wan_pipeline golden case through `ferry generate`: the saved folder,
// prompt, negative prompt and latents; the video compared in diffusers' np
// layout (atol 2e-4, manifest.json), and bit-identical under four plans.
func TestGenerateWanGolden(t *testing.T) {
	golden := filepath.Join("..", "pipeline", "wan", "testdata", "wan_pipeline")
	want := readTensor(t, filepath.Join(golden, "outputs.safetensors"), "video_np")
	dir := t.TempDir()
	diskPlan := writeFile(t, "disk.yaml", "name: stream-k0-disk\ncomponents:\n  text_encoder: {placement: stream, tier: disk}\n  transformer: {placement: stream, tier: disk}\n  vae: {placement: stream, tier: disk}\n")
	var ref []float32
	for i, plan := range []string{"resident", "onload", "stream", diskPlan} {
		out := filepath.Join(dir, "video"+string(rune('0'+i))+".safetensors")
		code, _, stderr := ferry(t, "generate", "--model", filepath.Join(golden, "pipeline"),
			"--prompt", "A cat walks on the grass, realistic", "--negative-prompt", "blurry, low quality",
			"--steps", "3", "--guidance", "5", "--max-sequence-length", "32",
			"--latents", filepath.Join(golden, "inputs.safetensors"), "--plan", plan, "--dtype", "fp32", "--out", out, "--quiet")
		if code != 0 {
			t.Fatalf("plan %s: exit %d: %s", plan, code, stderr)
		}
		checkPlanVideo(t, plan, readTensor(t, out, "video"), want, 2e-4, &ref)
	}
}

// checkPlanVideo checks one plan's video: the first (*ref nil) against
// diffusers' within atol, every later one bit-identical to the first.
func checkPlanVideo(t *testing.T, plan string, got, want []float32, atol float64, ref *[]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	if *ref == nil {
		*ref = got
		worst := 0.0
		for j := range got {
			worst = max(worst, math.Abs(float64(got[j])-float64(want[j])))
		}
		if worst > atol || math.IsNaN(worst) {
			t.Fatalf("plan %s: video max |diff| %.3g > %g", plan, worst, atol)
		}
		t.Logf("video max |diff| vs diffusers: %.3g", worst)
		return
	}
	for j := range *ref {
		if math.Float32bits(got[j]) != math.Float32bits((*ref)[j]) {
			t.Fatalf("plan %s: value %d is %v, first plan %v", plan, j, got[j], (*ref)[j])
		}
	}
}

func readTensor(t *testing.T, path, name string) []float32 {
	t.Helper()
	f, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, ok := f.Lookup(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", path, name)
	}
	v, err := f.ReadF32(info)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
