package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/pipeline/wan"
	"ferry/residency"
	"ferry/synth"
)

func TestPlanBuiltinNoFiles(t *testing.T) {
	code, out, stderr := ferry(t, "plan", "--model", "wan2.1-t2v-14b", "--height", "480", "--width", "832", "--frames", "81", "--device-mem", "8GiB", "--host-mem", "96GiB")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"transformer", "peak device", "budget 8.00 GiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanJSONAndOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.yaml")
	var pred struct {
		PeakDeviceReserved int64   `json:"peak_device_reserved_bytes"`
		TotalS             float64 `json:"total_s"`
		Fits               bool    `json:"fits"`
	}
	ferryJSON(t, &pred, "plan", "--model", "wan2.1-t2v-1.3b", "--height", "256", "--width", "256", "--frames", "17",
		"--steps", "2", "--device-mem", "1536MiB", "--host-mem", "4GiB", "--json", "--out", path)
	if !pred.Fits || pred.PeakDeviceReserved > 1536<<20 || pred.TotalS <= 0 {
		t.Errorf("prediction %+v", pred)
	}
	if _, err := residency.LoadPlan(path); err != nil {
		t.Errorf("--out wrote a plan that does not load: %v", err)
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--model", "wan2.1-t2v-14b", "--device-mem", "1MiB", "--host-mem", "1GiB"}, "--device-mem"},
		{[]string{"plan", "--model", "wan2.1-t2v-1.3b", "--use-fsdp-inference"}, "fsdp"},
		{[]string{"plan", "--model", "wan2.1-t2v-1.3b", "--plan", "warp-speed"}, "neither a preset"},
		{[]string{"plan", "--model", "wan9"}, "no built-in"},
		{[]string{"plan", "--model", "wan2.1-t2v-1.3b", "--frames", "80"}, "frames"},
	} {
		code, _, stderr := ferry(t, tc.args...)
		if code != ExitUsage || !strings.Contains(strings.ToLower(stderr), strings.ToLower(tc.want)) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q (want %q)", tc.args, code, stderr, tc.want)
		}
	}
}

func TestFastVideoFlags(t *testing.T) {
	code, out, stderr := ferry(t, "plan", "--model", "wan2.1-t2v-1.3b", "--height", "256", "--width", "256", "--frames", "17", "--dit-layerwise-offload", "--text-encoder-cpu-offload", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"placement": "stream"`) {
		t.Errorf("FastVideo flags did not stream: %s", out)
	}
}

func TestCalibrateQuick(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	var c struct {
		GemmGFLOPS map[string]float64 `json:"gemm_gflops"`
		DiskGBps   float64            `json:"disk_gbps"`
		Path       string             `json:"path"`
	}
	ferryJSON(t, &c, "calibrate", "--quick", "--json", "--disk-gbps", "0.2")
	if c.GemmGFLOPS["go"] <= 0 || c.DiskGBps != 0.2 {
		t.Errorf("calibration %+v", c)
	}
	if _, err := os.Stat(c.Path); err != nil {
		t.Errorf("profile not saved: %v", err)
	}
}

// TestCalibrateKeepsCheckpointFigures: the probes that need a checkpoint
// run only when asked, so a later calibrate keeps what they measured, and
// a folder that cannot serve them is a one-line usage error.
func TestCalibrateKeepsCheckpointFigures(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), make([]byte, 6<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	type figure struct {
		Us        float64 `json:"reclaim_touch_us_per_page"`
		Sustained float64 `json:"disk_sustained_gbps"`
		Burst     float64 `json:"disk_burst_gb"`
		Note      string  `json:"checkpoint_note"`
	}
	calibrate := func(args ...string) figure {
		t.Helper()
		var f figure
		ferryJSON(t, &f, append([]string{"calibrate", "--quick", "--json"}, args...)...)
		return f
	}
	probed := calibrate("--checkpoint", dir)
	if probed.Note == "" || !(probed.Us > 0) {
		t.Fatalf("after the probe: %+v, want a figure and a note", probed)
	}
	if again := calibrate(); again != probed {
		t.Errorf("calibrate without the probe: %+v, want the probed %+v kept", again, probed)
	}
	code, _, stderr := ferry(t, "calibrate", "--quick", "--checkpoint", t.TempDir())
	if code != ExitUsage || !strings.Contains(stderr, "holds no files") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("empty folder: exit %d, stderr %q", code, stderr)
	}
}

// TestPlanProbesTheCheckpoint: with the checkpoint out of the page cache,
// ferry plan prices uncached reads at the rate it measured reading the
// checkpoint itself, and --disk-gbps still overrides that.
func TestPlanProbesTheCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wan-tiny")
	a, err := synth.Lookup("wan-tiny")
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Write(dir, a, synth.Options{Seed: 1, DType: dtype.BF16}); err != nil {
		t.Fatal(err)
	}
	drop := func() {
		t.Helper()
		f, err := checkpoint.OpenFolder(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, c := range f.Components {
			w, err := c.Weights()
			if err != nil {
				continue // scheduler, tokenizer: no weights
			}
			for _, file := range w.Files() {
				if s, err := os.OpenFile(file.Path(), os.O_RDWR, 0); err == nil {
					s.Sync() // dirty pages cannot be dropped
					s.Close()
				}
			}
			if err := w.DropAll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan := func(extra ...string) (gbps float64, note string) {
		t.Helper()
		args := append([]string{"plan", "--model", dir, "--height", "64", "--width", "64", "--frames", "5", "--steps", "2", "--json"}, extra...)
		var pred struct {
			DiskGBps float64 `json:"disk_gbps"`
			DiskNote string  `json:"disk_note"`
		}
		ferryJSON(t, &pred, args...)
		return pred.DiskGBps, pred.DiskNote
	}
	drop()
	if gbps, note := plan(); gbps <= 0 || !strings.Contains(note, "of the checkpoint outside the page cache") {
		t.Errorf("uncached checkpoint: priced at %g GB/s (%q), want the rate of a probe read", gbps, note)
	}
	drop()
	if gbps, note := plan("--disk-gbps", "0.05"); gbps != 0.05 || note != "set by --disk-gbps" {
		t.Errorf("with --disk-gbps 0.05: %g GB/s (%q)", gbps, note)
	}
}

// --image plans what ferry generate --image runs: a TI2V model switches to
// image to video (its VAE's encoder joins the plan), an image-to-video
// model plans as it does without the flag, and a text-to-video model or a
// file that is not an image is one line.
func TestPlanImage(t *testing.T) {
	img := filepath.Join(t.TempDir(), "first.png")
	writePNGFile(t, img, 48, 32)
	vaeBlocks := func(model string, extra ...string) int {
		t.Helper()
		args := append([]string{"plan", "--model", model, "--height", "256", "--width", "256", "--frames", "17", "--steps", "2", "--json"}, extra...)
		var pred struct {
			Components []struct {
				Name   string `json:"name"`
				Blocks int    `json:"blocks"`
			} `json:"components"`
		}
		ferryJSON(t, &pred, args...)
		for _, c := range pred.Components {
			if c.Name == "vae" {
				return c.Blocks
			}
		}
		t.Fatalf("%v: no vae in the prediction", args)
		return 0
	}
	if t2v, i2v := vaeBlocks("wan2.2-ti2v-5b"), vaeBlocks("wan2.2-ti2v-5b", "--image", img); i2v <= t2v {
		t.Errorf("TI2V with --image plans %d VAE blocks, without %d: the encoder is missing", i2v, t2v)
	}
	if a, b := vaeBlocks("wan2.1-i2v-14b"), vaeBlocks("wan2.1-i2v-14b", "--image", img); a != b {
		t.Errorf("an image-to-video model plans %d VAE blocks with --image, %d without", b, a)
	}
	notImage := filepath.Join(t.TempDir(), "notes.png")
	if err := os.WriteFile(notImage, []byte("not a picture"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--model", "wan2.1-t2v-1.3b", "--image", img}, "text-to-video"},
		{[]string{"plan", "--model", "wan2.2-ti2v-5b", "--image", notImage}, "--image"},
		{[]string{"plan", "--model", "wan2.2-ti2v-5b", "--image", filepath.Join(t.TempDir(), "missing.png")}, "--image"},
	} {
		code, _, stderr := ferry(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q (want %q)", tc.args, code, stderr, tc.want)
		}
	}
}

// TestPlanPrompt: --prompt plans the prompt's tokens, counted by the
// folder's tokenizer as ferry generate counts them, where the default
// plans the whole text; a built-in name has no tokenizer to count with.
func TestPlanPrompt(t *testing.T) {
	dir := synthModel(t, "wan-tiny")
	type prediction struct {
		Request struct {
			TextLen      int `json:"text_len"`
			PromptTokens int `json:"prompt_tokens"`
		} `json:"request"`
		TextEncoderS float64 `json:"text_encoder_s"`
		PeakDevice   int64   `json:"peak_device_bytes"`
	}
	// One placement for both, so that the prompt is all that differs:
	// auto may place a cheaper text encoder otherwise, at a higher peak.
	plan := func(extra ...string) prediction {
		t.Helper()
		args := append([]string{"plan", "--model", dir, "--height", "64", "--width", "64", "--frames", "5", "--steps", "2", "--plan", "stream", "--json"}, extra...)
		var p prediction
		ferryJSON(t, &p, args...)
		return p
	}
	whole, short := plan(), plan("--prompt", "a red fox", "--negative-prompt", "blurry")
	if whole.Request.PromptTokens != whole.Request.TextLen {
		t.Errorf("without --prompt the plan counts %d of %d tokens", whole.Request.PromptTokens, whole.Request.TextLen)
	}
	job := wanTinyRequest(t, dir, "a red fox", "blurry")
	if short.Request.PromptTokens != job || job >= whole.Request.TextLen {
		t.Errorf("--prompt plans %d tokens, ferry generate's count is %d (of %d)", short.Request.PromptTokens, job, whole.Request.TextLen)
	}
	if short.TextEncoderS >= whole.TextEncoderS || short.PeakDevice > whole.PeakDevice {
		t.Errorf("a short prompt predicts text encoder %.3g s and peak %d, the whole text %.3g s and %d",
			short.TextEncoderS, short.PeakDevice, whole.TextEncoderS, whole.PeakDevice)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--model", "wan2.1-t2v-1.3b", "--prompt", "a red fox"}, "pipeline folder"},
		{[]string{"plan", "--model", dir, "--negative-prompt", "blurry"}, "needs --prompt"},
	} {
		code, _, stderr := ferry(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q (want %q)", tc.args, code, stderr, tc.want)
		}
	}
}

// wanTinyRequest is the prompt tokens ferry generate plans for prompt and
// negative at guidance 5 on the folder dir.
func wanTinyRequest(t *testing.T, dir, prompt, negative string) int {
	t.Helper()
	return openWan(t, dir).PromptTokens(wan.Request{Prompt: prompt, NegativePrompt: negative, Guidance: 5, MaxSeqLen: 512})
}
