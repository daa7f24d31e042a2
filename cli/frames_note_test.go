package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateRoundsFrames: --frames that is not 4k+1 is rounded as
// WanPipeline rounds num_frames, with a note on stderr (none with
// --quiet), and the video has the rounded count.
func TestGenerateRoundsFrames(t *testing.T) {
	tiny := synthModel(t, "wan-tiny")
	for _, quiet := range []bool{false, true} {
		dir := t.TempDir()
		rep := filepath.Join(dir, "r.json")
		args := []string{"generate", "--model", tiny, "--prompt", "x", "--height", "32", "--width", "32",
			"--frames", "4", "--steps", "1", "--out", filepath.Join(dir, "v.safetensors"), "--report", rep}
		if quiet {
			args = append(args, "--quiet")
		}
		code, _, stderr := ferry(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		note := "note: frames 4 is not 4k+1"
		if got := strings.Contains(stderr, note); got == quiet {
			t.Errorf("quiet %v: stderr has %q: %v; stderr %q", quiet, note, got, stderr)
		}
		raw, err := os.ReadFile(rep)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Request struct {
				Frames int `json:"frames"`
			} `json:"request"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if r.Request.Frames != 5 {
			t.Errorf("quiet %v: report frames %d, want 5", quiet, r.Request.Frames)
		}
	}
}
