package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/catalog"
	"ferry/dtype"
	"ferry/synth"
)

// TestLastImage: `ferry generate --last-image` runs a Wan 2.2 I2V folder
// from a first to a last frame (the report names both), and every misuse
// is one line and exit 2: no first image, a folder that takes no last
// frame, an unreadable file, a one-frame video.
func TestLastImage(t *testing.T) {
	i2v := tinyI2VMoE(t)
	golden := filepath.Join("..", "pipeline", "wan", "testdata")
	first := filepath.Join(golden, "wan21_i2v_pipeline", "image.png")
	last := filepath.Join(golden, "wan22_ti2v_i2v_pipeline", "image.png")
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	base := []string{"generate", "--prompt", "a boat", "--height", "32", "--width", "32", "--frames", "5", "--steps", "2", "--quiet"}
	args := append(append([]string(nil), base...), "--model", i2v, "--image", first, "--last-image", last,
		"--out", filepath.Join(dir, "v.safetensors"), "--report", report)
	if code, _, stderr := ferry(t, args...); code != 0 {
		t.Fatalf("generate with a last frame: exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"last_image": "`+last+`"`) {
		t.Errorf("the report does not name the last image %s", last)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no first image", []string{"--model", i2v, "--last-image", last}, "--image FILE.png|.jpg is required"},
		{"text to video", []string{"--model", filepath.Join(golden, "wan_pipeline", "pipeline"), "--last-image", last}, "needs --image too"},
		{"wan 2.1 i2v", []string{"--model", filepath.Join(golden, "wan21_i2v_pipeline", "pipeline"), "--image", first, "--last-image", last},
			"takes one image's embeddings"},
		{"unreadable", []string{"--model", i2v, "--image", first, "--last-image", filepath.Join(dir, "missing.png")}, "--last-image:"},
		{"one frame", []string{"--model", i2v, "--image", first, "--last-image", last, "--frames", "1"}, "more than one frame"},
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

// tinyI2VMoE writes Wan 2.2 I2V A14B's layout at wan-tiny's sizes (a
// WanImageToVideoPipeline with two experts and no image encoder) and
// returns its folder, named i2v-moe.
func tinyI2VMoE(t *testing.T) string {
	t.Helper()
	w := catalog.WanTinyMoE()
	w.Name, w.ImageToVideo = "wan-tiny-i2v-moe", true
	w.Transformer.InChannels = 2*w.VAE.ZDim + 4
	arch, err := synth.Wan(w)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "i2v-moe")
	if err := synth.Write(dir, arch, synth.Options{DType: dtype.BF16, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return dir
}
