package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/media"
)

// TestVideoToVideo: `ferry generate --video` runs a text-to-video folder
// from an input video (an AVI of 7 frames: its first 5 are used, with a
// note), names the video and strength in the report, and refuses misuse
// with one line and exit 2.
func TestVideoToVideo(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.avi")
	frames := make([]float32, 7*24*40*3)
	for i := range frames {
		frames[i] = float32(i%97) / 96
	}
	if err := media.Write(in, frames, 7, 24, 40, 16); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join("..", "pipeline", "wan", "testdata", "wan_pipeline", "pipeline")
	report := filepath.Join(dir, "report.json")
	base := []string{"generate", "--model", model, "--prompt", "a cat", "--height", "32", "--width", "48", "--steps", "4"}
	args := append(append([]string(nil), base...), "--video", in, "--strength", "0.5", "--out", filepath.Join(dir, "v.safetensors"), "--report", report)
	code, _, stderr := ferry(t, args...)
	if code != 0 {
		t.Fatalf("generate --video: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "using its first 5") {
		t.Errorf("no note about the 7 frames cut to 5: %q", stderr)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"video": "` + in + `"`, `"strength": 0.5`, `"frames": 5`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the report lacks %s", want)
		}
	}
	i2v := filepath.Join("..", "pipeline", "wan", "testdata", "wan21_i2v_pipeline")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"strength without video", []string{"--strength", "0.5"}, "add --video"},
		{"strength 0", []string{"--video", in, "--strength", "0"}, "(0, 1]"},
		{"too few frames", []string{"--video", in, "--frames", "9"}, "has 7 frames"},
		{"no step", []string{"--video", in, "--strength", "0.1"}, "runs no step"},
		{"unreadable", []string{"--video", filepath.Join(dir, "missing.avi")}, "--video:"},
		{"image to video", []string{"--model", filepath.Join(i2v, "pipeline"), "--image", filepath.Join(i2v, "image.png"), "--video", in}, "text-to-video folder"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append(append([]string(nil), base...), c.args...), "--out", filepath.Join(dir, "x.safetensors"))
			code, _, stderr := ferry(t, args...)
			if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line containing %q", code, stderr, c.want)
			}
		})
	}
}

// TestPlanVideo: `ferry plan --video` plans what generate --video runs:
// the video's frames (7 cut to 5), the steps the strength runs, and the
// VAE with its encoder.
func TestPlanVideo(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.avi")
	if err := media.Write(in, make([]float32, 7*24*40*3), 7, 24, 40, 16); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join("..", "pipeline", "wan", "testdata", "wan_pipeline", "pipeline")
	type plan struct {
		Request struct {
			Frames, Steps int
		}
		Components []struct {
			Name        string
			StoredBytes int64 `json:"stored_bytes"`
		}
	}
	read := func(extra ...string) plan {
		t.Helper()
		args := append([]string{"plan", "--model", model, "--height", "32", "--width", "48", "--steps", "4", "--json"}, extra...)
		code, stdout, stderr := ferry(t, args...)
		if code != 0 {
			t.Fatalf("plan %v: exit %d: %s", extra, code, stderr)
		}
		var p plan
		if err := json.Unmarshal([]byte(stdout), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	vae := func(p plan) int64 {
		for _, c := range p.Components {
			if c.Name == "vae" {
				return c.StoredBytes
			}
		}
		return 0
	}
	t2v, v2v := read(), read("--video", in, "--strength", "0.5")
	if v2v.Request.Frames != 5 || v2v.Request.Steps != 2 {
		t.Errorf("video to video planned %d frames, %d steps; want 5 and 2", v2v.Request.Frames, v2v.Request.Steps)
	}
	if vae(v2v) <= vae(t2v) {
		t.Errorf("VAE stored bytes %d with the video, %d without: the encoder is not planned", vae(v2v), vae(t2v))
	}
	if code, _, stderr := ferry(t, "plan", "--model", model, "--strength", "0.5"); code != 2 || !strings.Contains(stderr, "add --video") {
		t.Errorf("--strength alone: exit %d, %q", code, stderr)
	}
}
