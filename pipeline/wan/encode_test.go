package wan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/pipeline"
	"ferry/planner"
)

// vaeGoldenDir is the Wan VAE golden case of package wanvae: a tiny VAE
// (z_dim 16, as the golden pipeline's transformer expects) with diffusers'
// encode_mean of a [1, 3, 9, 32, 40] video.
const vaeGoldenDir = "../../model/wanvae/testdata/wan_vae"

// encoderFolder is the golden pipeline with the VAE golden case's VAE in
// place of its own (linked, not copied), so that EncodeVideo can be
// compared with diffusers' encoder output.
func encoderFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs(filepath.Join(goldenDir, "pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	vae, err := filepath.Abs(vaeGoldenDir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(src, "model_index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model_index.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"scheduler", "text_encoder", "tokenizer", "transformer"} {
		if err := os.Symlink(filepath.Join(src, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(vae, filepath.Join(dir, "vae")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openEncoders opens dir's pipeline with its encoders registered under
// the plan (nil: resident).
func openEncoders(t *testing.T, dir, plan string) (*Pipeline, *pipeline.Runtime) {
	t.Helper()
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := planner.Preset(plan, planner.PresetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := pipeline.NewRuntime(pipeline.Budget{}, pl, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RegisterEncoders(rt.Exec); err != nil {
		t.Fatal(err)
	}
	return p, rt
}

func closeRuntime(t *testing.T, rt *pipeline.Runtime) {
	t.Helper()
	rt.Close()
	if err := rt.CheckReleased(); err != nil {
		t.Error(err)
	}
}

// TestEncodePromptMatchesDiffusers: the real tokens' rows of diffusers'
// prompt_embeds, and only those (the rest of diffusers' rows are zero).
func TestEncodePromptMatchesDiffusers(t *testing.T) {
	want := tensors(t, filepath.Join(goldenDir, "outputs.safetensors"))["prompt_embeds"]
	mask := tensors(t, filepath.Join(goldenDir, "inputs.safetensors"))["prompt_attention_mask"]
	real := 0
	for _, v := range mask {
		real += int(v)
	}
	for _, plan := range []string{"resident", "stream"} {
		t.Run(plan, func(t *testing.T) {
			p, rt := openEncoders(t, filepath.Join(goldenDir, "pipeline"), plan)
			got, n, err := p.EncodePrompt(rt, goldenPrompt, 32)
			closeRuntime(t, rt)
			if err != nil {
				t.Fatal(err)
			}
			d := p.TextDim()
			if n != real || len(got) != n*d {
				t.Fatalf("%d tokens, %d values; want %d tokens of %d", n, len(got), real, d)
			}
			maxDiff(t, "prompt rows", got, want[:n*d], atolEmbeds)
			for i, v := range want[n*d:] {
				if v != 0 {
					t.Fatalf("diffusers' row %d is not padding (value %v): the real length is wrong", n+i/d, v)
				}
			}
		})
	}
}

// TestEncodeVideoMatchesDiffusers: the posterior mean of diffusers'
// AutoencoderKLWan, normalised with the config's statistics as
// (mean − latents_mean) / latents_std.
func TestEncodeVideoMatchesDiffusers(t *testing.T) {
	in := tensors(t, filepath.Join(vaeGoldenDir, "inputs.safetensors"))
	mean := tensors(t, filepath.Join(vaeGoldenDir, "outputs.safetensors"))["encode_mean"]
	p, rt := openEncoders(t, encoderFolder(t), "resident")
	got, shape, err := p.EncodeVideo(rt, in["video"], 9, 32, 40)
	closeRuntime(t, rt)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{16, 3, 4, 5}; len(shape) != 4 || shape[0] != want[0] || shape[1] != want[1] || shape[2] != want[2] || shape[3] != want[3] {
		t.Fatalf("shape %v, want %v", shape, want)
	}
	cfg := p.VAEConfig()
	inner := len(mean) / 16
	want := make([]float32, len(mean))
	for i, v := range mean {
		c := i / inner
		want[i] = float32((float64(v) - cfg.LatentsMean[c]) / cfg.LatentsStd[c])
	}
	maxDiff(t, "normalised mean", got, want, 1e-4)
	// Denormalize (what decode applies) must bring back the raw mean.
	back := append([]float32(nil), got...)
	if err := cfg.Denormalize(back, append([]int{1}, shape...)); err != nil {
		t.Fatal(err)
	}
	maxDiff(t, "denormalised", back, mean, 1e-4)
}

// TestEncodeVideoRejectsBadShapes: frames must be 4k+1 and the values
// must fill [3, F, H, W].
func TestEncodeVideoRejectsBadShapes(t *testing.T) {
	p, rt := openEncoders(t, encoderFolder(t), "resident")
	defer closeRuntime(t, rt)
	for _, tc := range []struct {
		f, h, w, n int
		want       string
	}{
		{4, 8, 8, 3 * 4 * 64, "4k+1"},
		{1, 12, 8, 3 * 96, "multiples of 8"},
		{1, 8, 8, 10, "values"},
	} {
		_, _, err := p.EncodeVideo(rt, make([]float32, tc.n), tc.f, tc.h, tc.w)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%dx%dx%d: err %v, want %q", tc.f, tc.h, tc.w, err, tc.want)
		}
	}
}

// TestEncoderFingerprint changes with the VAE and not between openings.
func TestEncoderFingerprint(t *testing.T) {
	fp := func(dir string) string {
		s, err := openPipeline(t, dir).EncoderFingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := fp(filepath.Join(goldenDir, "pipeline")), fp(filepath.Join(goldenDir, "pipeline"))
	c := fp(encoderFolder(t))
	if a != b || a == c || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("fingerprints %s, %s (same folder), %s (other VAE)", a, b, c)
	}
}
