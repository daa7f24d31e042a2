package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestVideoPath(t *testing.T) {
	for _, c := range []struct {
		out  string
		i, n int
		want string
	}{
		{"cat.mp4", 0, 1, "cat.mp4"},
		{"cat.mp4", 0, 2, "cat-1.mp4"},
		{"out/cat.v1.avi", 1, 2, "out/cat.v1-2.avi"},
		{"frames/", 2, 3, "frames-3/"},
		{"video", 0, 2, "video-1"},
	} {
		if got := videoPath(c.out, c.i, c.n); got != c.want {
			t.Errorf("videoPath(%q, %d, %d) = %q, want %q", c.out, c.i, c.n, got, c.want)
		}
	}
}

// TestGenerateNumVideos: --num-videos 2 writes two numbered videos, the
// first the one a single run of the same seed writes (the batch's noise
// is one draw from the seed, its first slice the single run's), the
// second another; the report's request and the planner's batch say 2.
func TestGenerateNumVideos(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	single, _ := generateVideo(t, model)
	dir := t.TempDir()
	out, rep := filepath.Join(dir, "v.safetensors"), filepath.Join(dir, "r.json")
	code, _, stderr := ferry(t, "generate", "--model", model, "--prompt", "a red fox", "--height", "32", "--width", "32",
		"--frames", "5", "--steps", "2", "--seed", "3", "--num-videos", "2", "--out", out, "--report", rep, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if names := dirNames(t, dir); names != "r.json,v-1.safetensors,v-2.safetensors" {
		t.Fatalf("output folder holds %s", names)
	}
	first := readTensor(t, filepath.Join(dir, "v-1.safetensors"), "video")
	second := readTensor(t, filepath.Join(dir, "v-2.safetensors"), "video")
	sameVideo(t, "video 1 against the single run", first, single)
	if slices.Equal(first, second) {
		t.Error("the two videos are equal")
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Request struct {
			NumVideos int `json:"num_videos_per_prompt"`
		}
		Predicted struct{ Request struct{ Batch, Prompts int } }
	}
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	if report.Request.NumVideos != 2 || report.Predicted.Request.Batch != 2 || report.Predicted.Request.Prompts != 1 {
		t.Errorf("report: request num_videos_per_prompt %d, planner batch %d prompts %d; want 2, 2, 1",
			report.Request.NumVideos, report.Predicted.Request.Batch, report.Predicted.Request.Prompts)
	}
}

// TestGenerateNumVideosErrors: a count out of range, or one the latents
// disagree with, is one line and no output; latents of two videos make
// two without the flag.
func TestGenerateNumVideosErrors(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	two := latentsFile(t, 2, 16, 2, 4, 4)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--num-videos", "-1"}, "num-videos must be 1 to 64, got -1"},
		{[]string{"--num-videos", "65"}, "num-videos must be 1 to 64, got 65"},
		{[]string{"--latents", two, "--num-videos", "3"}, "holds 2 videos' latents, not --num-videos (3) for each of 1 prompts"},
		{[]string{"--latents", two, "--prompt", "a", "--prompt", "b", "--prompt", "c"}, "holds 2 videos' latents, not --num-videos (1) for each of 4 prompts"},
		{[]string{"--prompt", "b", "--negative-prompt", "x", "--negative-prompt", "y", "--negative-prompt", "z"}, "3 --negative-prompt for 2 --prompt"},
		{[]string{"--prompt", ""}, "--prompt TEXT is required"},
	} {
		dir := t.TempDir()
		args := append([]string{"generate", "--model", model, "--prompt", "a fox", "--steps", "1",
			"--out", filepath.Join(dir, "v.avi"), "--quiet"}, c.args...)
		code, _, stderr := ferry(t, args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", c.args, code, stderr, c.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%v: left %d files", c.args, len(entries))
		}
	}
	dir := t.TempDir()
	code, _, stderr := ferry(t, "generate", "--model", model, "--prompt", "a fox", "--steps", "1", "--latents", two,
		"--out", filepath.Join(dir, "v.avi"), "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("latents of two videos wrote %d files, want 2", len(entries))
	}
}

// TestGeneratePromptList: --prompt twice makes a batch of two prompts'
// videos; with the same (zero) latents for both, the second is the video
// its prompt makes alone.
func TestGeneratePromptList(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	dir := t.TempDir()
	gen := func(out string, latents string, prompts ...string) {
		args := []string{"generate", "--model", model, "--steps", "2", "--latents", latents, "--out", out, "--quiet"}
		for _, p := range prompts {
			args = append(args, "--prompt", p)
		}
		if code, _, stderr := ferry(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", prompts, code, stderr)
		}
	}
	gen(filepath.Join(dir, "b.safetensors"), latentsFile(t, 2, 16, 2, 4, 4), "a red fox", "a blue bird")
	gen(filepath.Join(dir, "alone.safetensors"), latentsFile(t, 1, 16, 2, 4, 4), "a blue bird")
	second := readTensor(t, filepath.Join(dir, "b-2.safetensors"), "video")
	alone := readTensor(t, filepath.Join(dir, "alone.safetensors"), "video")
	first := readTensor(t, filepath.Join(dir, "b-1.safetensors"), "video")
	sameVideo(t, "the second prompt's video against its own run", second, alone)
	if slices.Equal(first, second) {
		t.Error("two prompts made the same video")
	}
}

// sameVideo fails t where got and want (a batch's video and the one a run
// of its own gives) differ by more than the batched GEMMs' rounding.
func sameVideo(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	if worst > 1e-5 {
		t.Errorf("%s: max |diff| %.3g > 1e-5", what, worst)
	}
}

// TestGenerateLatentsOut: --output-type latent writes the golden request's
// final latents (diffusers' output_type="latent": its last step latents,
// within the golden's tolerance) as tensor "latents"; an --out that is no
// .safetensors, or an unknown type, is one line before anything runs.
func TestGenerateLatentsOut(t *testing.T) {
	golden := filepath.Join("..", "pipeline", "wan", "testdata", "wan_pipeline")
	steps := readTensor(t, filepath.Join(golden, "outputs.safetensors"), "step_latents")
	dir := t.TempDir()
	out := filepath.Join(dir, "lat.safetensors")
	args := []string{"generate", "--model", filepath.Join(golden, "pipeline"),
		"--prompt", "A cat walks on the grass, realistic", "--negative-prompt", "blurry, low quality",
		"--steps", "3", "--guidance", "5", "--max-sequence-length", "32",
		"--latents", filepath.Join(golden, "inputs.safetensors"), "--dtype", "fp32", "--quiet"}
	code, _, stderr := ferry(t, append(args, "--output-type", "latent", "--out", out)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := readTensor(t, out, "latents")
	want := steps[len(steps)-len(got):]
	worst := 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	if len(got) != len(steps)/3 || worst > 2e-4 {
		t.Errorf("%d latents (want %d), max |diff| %.3g from diffusers' last step (atol 2e-4)", len(got), len(steps)/3, worst)
	}
	for _, c := range []struct{ typ, out, want string }{
		{"latent", "v.avi", "writes tensor \"latents\" to a .safetensors file"},
		{"pixels", "v.avi", "--output-type \"pixels\": want video or latent"},
	} {
		bad := t.TempDir()
		code, _, stderr := ferry(t, append(args, "--output-type", c.typ, "--out", filepath.Join(bad, c.out))...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("--output-type %s --out %s: exit %d, stderr %q; want one line with %q", c.typ, c.out, code, stderr, c.want)
		}
		if names := dirNames(t, bad); names != "" {
			t.Errorf("--output-type %s: left %s", c.typ, names)
		}
	}
}
