package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// The Wan 2.2 TI2V (text and image to video) and Wan 2.1 image-to-video
// golden cases through `ferry generate`: the saved folder, prompts, latents
// and image.png, the video compared in diffusers' np layout (atol 2e-4,
// manifest.json), and bit-identical under resident, stream k=1 and
// stream-from-disk plans (the image encoder included).
func TestGenerateWan22Golden(t *testing.T) {
	cases := []struct {
		dir  string
		args []string
		// model is another golden's folder to run (default: dir's own).
		model string
	}{
		{"wan22_ti2v_t2v_pipeline", []string{"--prompt", "A paper boat drifting down a gutter in the rain",
			"--negative-prompt", "low quality", "--guidance", "5", "--max-sequence-length", "24"}, ""},
		{"wan22_ti2v_i2v_pipeline", []string{"--prompt", "The boat turns slowly", "--guidance", "4",
			"--max-sequence-length", "24", "--image", "image.png"}, ""},
		// The TI2V-5B folder is a WanPipeline; diffusers loads the same
		// folder as WanImageToVideoPipeline for images (same weights).
		{"wan22_ti2v_i2v_pipeline", []string{"--prompt", "The boat turns slowly", "--guidance", "4",
			"--max-sequence-length", "24", "--image", "image.png"}, "wan22_ti2v_t2v_pipeline"},
		{"wan21_i2v_pipeline", []string{"--prompt", "A lighthouse at dusk, waves crashing",
			"--negative-prompt", "static, blurry", "--guidance", "5", "--max-sequence-length", "512", "--image", "image.png"}, ""},
	}
	diskPlan := writeFile(t, "disk.yaml", "name: stream-k0-disk\ncomponents:\n  text_encoder: {placement: stream, tier: disk}\n"+
		"  image_encoder: {placement: stream, tier: disk}\n  transformer: {placement: stream, tier: disk}\n  vae: {placement: stream, tier: disk}\n")
	for _, c := range cases {
		t.Run(c.dir+"/"+c.model, func(t *testing.T) {
			golden := filepath.Join("..", "pipeline", "wan", "testdata", c.dir)
			model := filepath.Join(golden, "pipeline")
			if c.model != "" {
				model = filepath.Join("..", "pipeline", "wan", "testdata", c.model, "pipeline")
			}
			want := readTensor(t, filepath.Join(golden, "outputs.safetensors"), "video_np")
			args := append([]string(nil), c.args...)
			for i, a := range args {
				if a == "image.png" {
					args[i] = filepath.Join(golden, a)
				}
			}
			dir := t.TempDir()
			var ref []float32
			plans := [][]string{{"--plan", "resident"}, {"--plan", "stream"}, {"--plan", diskPlan}}
			if strings.Contains(c.dir, "wan21") {
				// FastVideo's flag computes the CLIP tower on the host.
				plans = append(plans, []string{"--image-encoder-cpu-offload"})
			}
			for i, plan := range plans {
				out := filepath.Join(dir, "video"+string(rune('0'+i))+".safetensors")
				all := append([]string{"generate", "--model", model, "--steps", "3",
					"--latents", filepath.Join(golden, "inputs.safetensors"), "--dtype", "fp32", "--out", out, "--quiet"}, args...)
				all = append(all, plan...)
				code, _, stderr := ferry(t, all...)
				if code != 0 {
					t.Fatalf("plan %s: exit %d: %s", plan, code, stderr)
				}
				checkPlanVideo(t, strings.Join(plan, " "), readTensor(t, out, "video"), want, 2e-4, &ref)
			}
		})
	}
}

// TestGenerateImageFlag: --image is required by image-to-video folders and
// refused by text-to-video ones, each with one line saying what to do.
func TestGenerateImageFlag(t *testing.T) {
	td := filepath.Join("..", "pipeline", "wan", "testdata")
	img := filepath.Join(td, "wan21_i2v_pipeline", "image.png")
	cases := []struct {
		name, model string
		extra       []string
		want        string
	}{
		{"i2v without image", "wan21_i2v_pipeline", nil, "--image FILE.png|.jpg is required"},
		{"ti2v i2v without image", "wan22_ti2v_i2v_pipeline", nil, "--image FILE.png|.jpg is required"},
		{"wan2.1 t2v with image", "wan_pipeline", []string{"--image", img}, "this folder is a text-to-video pipeline"},
		{"unreadable image", "wan21_i2v_pipeline", []string{"--image", filepath.Join(td, "wan21_i2v_pipeline", "model.gif")}, "--image:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"generate", "--model", filepath.Join(td, c.model, "pipeline"), "--prompt", "x",
				"--out", filepath.Join(t.TempDir(), "v.safetensors")}, c.extra...)
			code, _, stderr := ferry(t, args...)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want a failure saying %q", code, stderr, c.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
				t.Errorf("error spans %d lines: %q", n+1, stderr)
			}
		})
	}
}

// TestGenerateRoundsToPatches: a TI2V-5B size that is a multiple of 16
// but not of its 32-pixel patches is rounded down with a note, as
// diffusers does; the video has the rounded size.
func TestGenerateRoundsToPatches(t *testing.T) {
	model := filepath.Join("..", "pipeline", "wan", "testdata", "wan22_ti2v_t2v_pipeline", "pipeline")
	out := filepath.Join(t.TempDir(), "v.safetensors")
	code, _, stderr := ferry(t, "generate", "--model", model, "--prompt", "a boat", "--height", "48", "--width", "80",
		"--frames", "5", "--steps", "1", "--dtype", "fp32", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "using 64x32 instead of 80x48") {
		t.Errorf("stderr %q lacks the rounding note", stderr)
	}
	if got, want := len(readTensor(t, out, "video")), 5*32*64*3; got != want {
		t.Errorf("%d video values, want %d (5 frames of 64x32)", got, want)
	}
}
