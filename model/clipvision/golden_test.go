package clipvision

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/imageproc"
	"ferry/model/modeltest"
	"ferry/residency"
)

// goldenDir is the Wan 2.1 I2V golden's image encoder, processor config,
// image and image_embeds (testdata/README.md).
var goldenDir = filepath.Join("testdata", "wan21_i2v")

func openSet(t *testing.T, path string) *checkpoint.Set {
	t.Helper()
	s, err := checkpoint.OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// goldenPixels is CLIPImageProcessor's pixel_values for the golden's
// image.png, computed by imageproc.
func goldenPixels(t *testing.T) []float32 {
	t.Helper()
	f, err := os.Open(filepath.Join(goldenDir, "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := imageproc.ParseCLIPConfig(readFile(t, "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	px, h, w, err := imageproc.CLIPPreprocess(imageproc.FromImage(img), pc)
	if err != nil {
		t.Fatal(err)
	}
	if h != 28 || w != 28 {
		t.Fatalf("processed to %dx%d, want 28x28", w, h)
	}
	return px
}

// TestGolden runs the golden's image through imageproc and the tower and
// compares with image_embeds (hidden_states[-2]) within the manifest's
// atol 1e-4, with the exact reference GEMM and the fast one.
func TestGolden(t *testing.T) {
	cfg, err := ParseConfig(readFile(t, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, shape := modeltest.TensorOf(t, openSet(t, filepath.Join(goldenDir, "outputs.safetensors")), "image_embeds")
	if shape[1] != cfg.Tokens() || shape[2] != cfg.HiddenSize {
		t.Fatalf("image_embeds %v does not match the config", shape)
	}
	pixels := goldenPixels(t)
	src := residency.SourceOf(openSet(t, filepath.Join(goldenDir, "model.safetensors")))
	if err := cfg.CheckSource(src); err != nil {
		t.Fatal(err)
	}
	for _, g := range []gemm.Impl{gemm.Naive{}, gemm.Best()} {
		t.Run(g.Name(), func(t *testing.T) {
			r := newRig(t, nil, g)
			got := r.encode(t, r.tower(t, cfg, src), pixels, 1)
			worst := modeltest.Compare(t, "image_embeds", got, want, 1e-4, 0)
			t.Logf("max abs error %.3g (atol 1e-4)", worst)
		})
	}
}

// TestParamsMatchGoldenCheckpoint: Params lists the checkpoint exactly,
// and RunParams leaves out only the last layer and post_layernorm.
func TestParamsMatchGoldenCheckpoint(t *testing.T) {
	cfg, err := ParseConfig(readFile(t, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	modeltest.ParamsMatchCheckpoint(t, openSet(t, filepath.Join(goldenDir, "model.safetensors")), cfg.Params())
	run := map[string]bool{}
	for _, p := range cfg.RunParams() {
		run[p.Name] = true
	}
	for _, p := range cfg.Params() {
		skipped := p.Block == postBlock || p.Block == layerBlock(cfg.NumHiddenLayers-1)
		if run[p.Name] == skipped {
			t.Errorf("%s (block %s): in RunParams = %v", p.Name, p.Block, run[p.Name])
		}
	}
}
