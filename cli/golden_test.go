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
		got := readTensor(t, out, "video")
		if len(got) != len(want) {
			t.Fatalf("%d values, want %d", len(got), len(want))
		}
		if ref == nil {
			ref = got
			worst := 0.0
			for j := range got {
				worst = max(worst, math.Abs(float64(got[j])-float64(want[j])))
			}
			if worst > 2e-4 || math.IsNaN(worst) {
				t.Fatalf("video max |diff| %.3g > 2e-4", worst)
			}
			t.Logf("video max |diff| vs diffusers: %.3g", worst)
			continue
		}
		for j := range ref {
			if math.Float32bits(got[j]) != math.Float32bits(ref[j]) {
				t.Fatalf("plan %s: value %d is %v, resident %v", plan, j, got[j], ref[j])
			}
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
