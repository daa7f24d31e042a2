package cli

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ferry/dataset"
	"ferry/dtype"
	"ferry/media"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/planner"
	"ferry/tokenizer"
)

// pattern is a test picture: channel c of pixel (x, y) in frame f.
func pattern(f, x, y, c int) uint8 { return uint8(x*7 + y*5 + f*40 + c*60) }

// writePNG writes a w×h PNG of frame 0 of pattern.
func writePNGFile(t *testing.T, path string, w, h int) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{pattern(0, x, y, 0), pattern(0, x, y, 1), pattern(0, x, y, 2), 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeGIFFile writes frames of w×h in a 64-grey palette with image/gif.
func writeGIFFile(t *testing.T, path string, frames, w, h int) {
	t.Helper()
	pal := make(color.Palette, 64)
	for i := range pal {
		pal[i] = color.Gray{uint8(i * 4)}
	}
	g := &gif.GIF{}
	for f := range frames {
		img := image.NewPaletted(image.Rect(0, 0, w, h), pal)
		for i := range img.Pix {
			img.Pix[i] = uint8((i + 3*f) % 64)
		}
		g.Image, g.Delay = append(g.Image, img), append(g.Delay, 10)
	}
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, g); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeAVIFile writes frames of w×h with media's MJPEG writer.
func writeAVIFile(t *testing.T, path string, frames, w, h int) {
	t.Helper()
	pix := make([]float32, frames*h*w*3)
	for f := range frames {
		for y := range h {
			for x := range w {
				for c := range 3 {
					pix[((f*h+y)*w+x)*3+c] = float32(pattern(f, x, y, c)) / 255
				}
			}
		}
	}
	if err := media.Write(path, pix, frames, h, w, 8); err != nil {
		t.Fatal(err)
	}
}

func writeCaption(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cacheData is a data folder: a GIF of 7 frames (5 kept), an AVI of 11
// (9 kept), two images (1 frame) of other aspects, all larger than 32×32.
func cacheData(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	writeGIFFile(t, filepath.Join(dir, "cat.gif"), 7, 40, 36)
	writeAVIFile(t, filepath.Join(dir, "sea.avi"), 11, 48, 32)
	writePNGFile(t, filepath.Join(dir, "dog.png"), 48, 40)
	writePNGFile(t, filepath.Join(dir, "sky.png"), 32, 64)
	captions := map[string]string{
		"cat": "A cat walks on the grass",
		"sea": "  waves roll onto a beach at dusk, slow motion\n",
		"dog": "a dog",
		"sky": "clouds drift over the sky",
	}
	for n, c := range captions {
		writeCaption(t, dir, n, c)
	}
	return dir, captions
}

// mtimes maps every file under dir to its modification time.
func mtimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out[p] = info.ModTime()
		}
		return err
	})
	return out
}

// encoders opens the model with only its encoders, in fp32 as the tests
// run cache.
func encoders(t *testing.T, model string) (*wan.Pipeline, *pipeline.Runtime) {
	t.Helper()
	p := openWan(t, model)
	plan, _ := planner.Preset("resident", planner.PresetOptions{})
	rt, err := pipeline.NewRuntime(pipeline.Budget{}, plan, pipeline.Options{ComputeDType: dtype.F32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	if err := p.RegisterEncoders(rt.Exec); err != nil {
		t.Fatal(err)
	}
	return p, rt
}

// TestCache runs ferry cache on a small data folder and checks the cache
// against the pipeline's own encoders, then that reruns rewrite only what
// changed.
func TestCache(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	data, captions := cacheData(t)
	out := filepath.Join(t.TempDir(), "cache")
	args := []string{"cache", "--model", model, "--data", data, "--out", out, "--width", "32", "--height", "32", "--frames", "9", "--dtype", "fp32"}
	code, _, stderr := ferry(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if n := strings.Count(stderr, "cache: ["); n != 4 {
		t.Errorf("%d progress lines, want one per sample: %s", n, stderr)
	}
	c, err := dataset.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		bucket string
		shape  []int
		frames int
	}{
		"cat": {"32x32_5f", []int{16, 2, 4, 4}, 5},
		"sea": {"32x32_9f", []int{16, 3, 4, 4}, 9},
		"dog": {"32x32_1f", []int{16, 1, 4, 4}, 1},
		"sky": {"32x32_1f", []int{16, 1, 4, 4}, 1},
	}
	if c.Len() != len(want) || len(c.Buckets()) != 3 {
		t.Fatalf("%d samples in buckets %v", c.Len(), c.Buckets())
	}
	tok, err := tokenizer.Load(filepath.Join(model, "tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	p, rt := encoders(t, model)
	for i := range c.Len() {
		info := c.Sample(i)
		w, ok := want[info.Name]
		if !ok || info.Bucket != w.bucket || !slices.Equal(info.LatentShape, w.shape) {
			t.Errorf("sample %d: %+v, want %+v", i, info, w)
			continue
		}
		s, err := c.Load(i)
		if err != nil {
			t.Fatal(err)
		}
		// The text keeps the caption's real tokens only, as the tokenizer counts them.
		_, mask := tok.EncodeForModel(wan.CleanPrompt(strings.TrimSpace(captions[info.Name])), 512)
		real := 0
		for _, m := range mask {
			real += int(m)
		}
		if info.TextLen != real || !slices.Equal(s.TextShape, []int{real, 64}) {
			t.Errorf("%s: text %v (TextLen %d), want [%d 64]", info.Name, s.TextShape, info.TextLen, real)
		}
		text, n, err := p.EncodePrompt(rt, captions[info.Name], 512)
		if err != nil || n != real || !slices.Equal(text, s.Text) {
			t.Errorf("%s: cached text differs from EncodePrompt (%d tokens, %v)", info.Name, n, err)
		}
		// The latents are the pipeline's normalised encoding of the clip.
		ext := map[string]string{"cat": ".gif", "sea": ".avi", "dog": ".png", "sky": ".png"}[info.Name]
		clip, err := media.Decode(filepath.Join(data, info.Name+ext), 9)
		if err != nil {
			t.Fatal(err)
		}
		pix, err := dataset.Pixels(clip, w.frames, 32, 32)
		if err != nil {
			t.Fatal(err)
		}
		z, shape, err := p.EncodeVideo(rt, pix, w.frames, 32, 32)
		if err != nil || !slices.Equal(shape, s.LatentShape) {
			t.Fatalf("%s: EncodeVideo %v, %v", info.Name, shape, err)
		}
		if !slices.Equal(z, s.Latents) {
			t.Errorf("%s: cached latents differ from EncodeVideo", info.Name)
		}
		if mean, std := stats(s.Latents); math.IsNaN(mean) || std == 0 {
			t.Errorf("%s: latents mean %v std %v", info.Name, mean, std)
		}
	}

	// A rerun rewrites nothing.
	before := mtimes(t, out)
	time.Sleep(20 * time.Millisecond)
	code, _, stderr = ferry(t, args...)
	if code != 0 || strings.Count(stderr, "up to date (") != 4 {
		t.Fatalf("rerun: exit %d: %s", code, stderr)
	}
	if after := mtimes(t, out); !mapsEqualTime(before, after) {
		t.Errorf("a rerun touched files: before %v, after %v", before, after)
	}

	// A new caption re-encodes that sample only; a removed clip leaves the cache.
	writeCaption(t, data, "dog", "a big dog")
	os.Remove(filepath.Join(data, "sky.png"))
	os.Remove(filepath.Join(data, "sky.txt"))
	code, _, stderr = ferry(t, args...)
	if code != 0 || strings.Count(stderr, "cache: [") != 1 || !strings.Contains(stderr, "1 stale files removed") {
		t.Fatalf("after edits: exit %d: %s", code, stderr)
	}
	after := mtimes(t, out)
	for path, t0 := range before {
		base := filepath.Base(path)
		_, still := after[path]
		switch base {
		case "dog.safetensors", dataset.IndexName:
			if after[path].Equal(t0) {
				t.Errorf("%s was not rewritten", base)
			}
		case "sky.safetensors":
			if still {
				t.Errorf("%s outlived its clip", base)
			}
		default:
			if !after[path].Equal(t0) {
				t.Errorf("%s was rewritten", base)
			}
		}
	}
	if c, err := dataset.Open(out); err != nil || c.Len() != 3 {
		t.Errorf("after edits: %v samples, %v", c, err)
	}
}

func mapsEqualTime(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !b[k].Equal(v) {
			return false
		}
	}
	return true
}

func stats(v []float32) (mean, std float64) {
	for _, x := range v {
		mean += float64(x)
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (float64(x) - mean) * (float64(x) - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

// TestCacheKeepsWorkOnFailure: a clip that turns out corrupt only when its
// frames are decoded stops the run with exit 2 naming it; the samples done
// before it stay cached, and the next run (the clip fixed) skips them.
func TestCacheKeepsWorkOnFailure(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	data := t.TempDir()
	writePNGFile(t, filepath.Join(data, "a.png"), 32, 32)
	writeCaption(t, data, "a", "first")
	bad := filepath.Join(data, "b.avi")
	writeAVIFile(t, bad, 5, 32, 32)
	avi, _ := os.ReadFile(bad)
	// Break the JPEG of the last frame (its header is fine: Probe passes).
	last := bytes.LastIndex(avi, []byte{0xff, 0xd8})
	os.WriteFile(bad, append(avi[:last:last], bytes.Repeat([]byte{7}, len(avi)-last)...), 0o644)
	writeCaption(t, data, "b", "second")
	out := filepath.Join(t.TempDir(), "cache")
	args := []string{"cache", "--model", model, "--data", data, "--out", out, "--width", "32", "--height", "32", "--frames", "5", "--dtype", "fp32", "--quiet"}
	code, _, stderr := ferry(t, args...)
	if code != ExitUsage || !strings.Contains(stderr, bad) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want exit 2 naming %s", code, stderr, bad)
	}
	kept := filepath.Join(out, "32x32_1f", "a.safetensors")
	st, err := os.Stat(kept)
	if err != nil {
		t.Fatalf("the sample done before the failure is gone: %v", err)
	}
	writeAVIFile(t, bad, 5, 32, 32)
	if code, _, stderr = ferry(t, args...); code != 0 {
		t.Fatalf("after the fix: exit %d: %s", code, stderr)
	}
	if st2, err := os.Stat(kept); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("the kept sample was encoded again")
	}
	if c, err := dataset.Open(out); err != nil || c.Len() != 2 {
		t.Errorf("cache after the fix: %v", err)
	}
}

// TestCacheUserErrors: each bad data set or flag is one line naming the
// problem (and the file), exit code 2.
func TestCacheUserErrors(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	syn := synthModel(t, "synthetic")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) // fills a data folder holding a.png + a.txt
		flags []string
		want  []string // in the message
	}{
		{"caption without a clip", func(t *testing.T, dir string) { writeCaption(t, dir, "orphan", "x") }, nil,
			[]string{"orphan.txt", "caption without a clip"}},
		{"clip without a caption", func(t *testing.T, dir string) { writePNGFile(t, filepath.Join(dir, "mute.png"), 32, 32) }, nil,
			[]string{"mute.png", "has no caption"}},
		{"clip too small", func(t *testing.T, dir string) {
			writePNGFile(t, filepath.Join(dir, "tiny.png"), 40, 24)
			writeCaption(t, dir, "tiny", "x")
		}, nil, []string{"tiny.png", "40x24", "smaller than the target 32x32", "does not upscale"}},
		{"corrupt gif", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "bad.gif"), []byte("GIF89a broken"), 0o644)
			writeCaption(t, dir, "bad", "x")
		}, nil, []string{"bad.gif", "not a readable GIF"}},
		{"mp4 without ffmpeg", func(t *testing.T, dir string) {
			t.Setenv("PATH", "")
			os.WriteFile(filepath.Join(dir, "clip.mp4"), []byte("...."), 0o644)
			writeCaption(t, dir, "clip", "x")
		}, nil, []string{"clip.mp4", "install ffmpeg", ".avi"}},
		{"empty caption", func(t *testing.T, dir string) { writeCaption(t, dir, "a", "\n") }, nil, []string{"a.txt is empty"}},
		{"size not a multiple of 16", nil, []string{"--width", "40"}, []string{"multiples of 16", "nearest valid: 48x32"}},
		{"no frames", nil, []string{"--frames", "0"}, []string{"--frames"}},
		{"not a Wan folder", nil, []string{"--model", syn}, []string{"WanPipeline"}},
		{"missing data", nil, []string{"--data", "/nonexistent/data"}, []string{"no such folder"}},
		{"unknown plan", nil, []string{"--plan", "turbo"}, []string{"turbo"}},
		{"bad dtype", nil, []string{"--dtype", "fp8"}, []string{"--dtype"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePNGFile(t, filepath.Join(dir, "a.png"), 32, 32)
			writeCaption(t, dir, "a", "a picture")
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			out := filepath.Join(t.TempDir(), "cache")
			args := append([]string{"cache", "--model", model, "--data", dir, "--out", out, "--width", "32", "--height", "32", "--frames", "5"}, tc.flags...)
			code, _, stderr := ferry(t, args...)
			if code != ExitUsage || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if _, err := os.Stat(filepath.Join(out, dataset.IndexName)); err == nil {
				t.Error("a failed run wrote index.json")
			}
		})
	}
}

// TestCachePlans: a streamed plan writes the same cache as a resident one
// (the plan decides where weights live, never the result), and a budget
// no plan fits is the user's to fix.
func TestCachePlans(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	data := t.TempDir()
	writeAVIFile(t, filepath.Join(data, "sea.avi"), 5, 48, 32)
	writeCaption(t, data, "sea", "waves")
	run := func(plan string, extra ...string) (int, string, string) {
		out := filepath.Join(t.TempDir(), "cache")
		args := append([]string{"cache", "--model", model, "--data", data, "--out", out, "--width", "32", "--height", "32",
			"--frames", "5", "--dtype", "fp32", "--quiet", "--plan", plan}, extra...)
		code, _, stderr := ferry(t, args...)
		return code, out, stderr
	}
	load := func(dir string) *dataset.Sample {
		c, err := dataset.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Load(0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	code, resident, stderr := run("resident")
	if code != 0 {
		t.Fatalf("resident: exit %d: %s", code, stderr)
	}
	code, stream, stderr := run("stream")
	if code != 0 {
		t.Fatalf("stream: exit %d: %s", code, stderr)
	}
	a, b := load(resident), load(stream)
	if !slices.Equal(a.Latents, b.Latents) || !slices.Equal(a.Text, b.Text) {
		t.Error("the streamed plan's cache differs from the resident one's")
	}
	code, _, stderr = run("stream", "--device-mem", "64KiB")
	if code != ExitUsage || !strings.Contains(stderr, "budget") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("tiny budget: exit %d, stderr %q", code, stderr)
	}
}

// TestCacheInterrupt: a cancelled run (Ctrl-C) exits 130 with one line and
// leaves no index.json.
func TestCacheInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	data := t.TempDir()
	writePNGFile(t, filepath.Join(data, "a.png"), 32, 32)
	writeCaption(t, data, "a", "a picture")
	out := filepath.Join(t.TempDir(), "cache")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"cache", "--model", synthModel(t, "wan-tiny"), "--data", data, "--out", out,
		"--width", "32", "--height", "32", "--frames", "1", "--quiet"}, &stdout, &stderr)
	if code != ExitInterrupt || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %d and one line", code, stderr.String(), ExitInterrupt)
	}
	t.Logf("stderr: %s", stderr.String())
	if _, err := os.Stat(filepath.Join(out, dataset.IndexName)); err == nil {
		t.Error("an interrupted run wrote index.json")
	}
}
