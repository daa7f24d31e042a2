package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// The wan22_moe_pipeline golden case through `ferry generate`: Wan 2.2's
// two experts (boundary_ratio 0.875, 2 of 6 steps on the high-noise one),
// guidance 5 then --guidance-2 3, the saved latents; the video within the
// manifest's 2e-4, and bit-identical under resident, stream k=1 (the
// handoff prefetching across the switch) and streaming from disk.
func TestGenerateWan22MoEGolden(t *testing.T) {
	golden := filepath.Join("..", "pipeline", "wan", "testdata", "wan22_moe_pipeline")
	want := readTensor(t, filepath.Join(golden, "outputs.safetensors"), "video_np")
	dir := t.TempDir()
	var ref []float32
	for i, plan := range []string{"resident", "stream", "stream-disk"} {
		out := filepath.Join(dir, "video"+string(rune('0'+i))+".safetensors")
		code, _, stderr := ferry(t, "generate", "--model", filepath.Join(golden, "pipeline"),
			"--prompt", "A red kite above a windy beach", "--negative-prompt", "blurry",
			"--steps", "6", "--guidance", "5", "--guidance-2", "3", "--max-sequence-length", "24",
			"--latents", filepath.Join(golden, "inputs.safetensors"), "--plan", plan, "--dtype", "fp32", "--out", out, "--quiet")
		if code != 0 {
			t.Fatalf("plan %s: exit %d: %s", plan, code, stderr)
		}
		checkPlanVideo(t, plan, readTensor(t, out, "video"), want, 2e-4, &ref)
	}
}

// --guidance-2 on a one-transformer folder is refused in one line.
func TestGuidance2NeedsTwoExperts(t *testing.T) {
	golden := filepath.Join("..", "pipeline", "wan", "testdata", "wan_pipeline")
	code, _, stderr := ferry(t, "generate", "--model", filepath.Join(golden, "pipeline"), "--prompt", "a cat",
		"--guidance-2", "3", "--steps", "1", "--out", filepath.Join(t.TempDir(), "v.safetensors"), "--quiet")
	if code == 0 || !strings.Contains(stderr, "--guidance-2") || !strings.Contains(stderr, "two-expert") {
		t.Fatalf("exit %d, stderr %q: want a refusal naming --guidance-2", code, stderr)
	}
}
