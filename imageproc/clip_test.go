package imageproc

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/checkpoint"
)

// TestCenterCrop checks the offsets transformers computes, including the
// zero padding when the window is larger than the image.
func TestCenterCrop(t *testing.T) {
	// src pixel (x, y) holds x+1 in R and y+1 in G, so a 0 marks padding.
	src := &RGB{Width: 5, Height: 4, Pix: make([]uint8, 60)}
	for y := range 4 {
		for x := range 5 {
			src.Pix[src.at(x, y)], src.Pix[src.at(x, y)+1] = uint8(x+1), uint8(y+1)
		}
	}
	for _, c := range []struct {
		w, h      int
		left, top int // source offset of output (0, 0)
	}{
		{5, 4, 0, 0},
		{3, 2, 1, 1},  // (5-3)//2, (4-2)//2
		{2, 3, 1, 0},  // odd differences round down
		{4, 1, 0, 1},  // (5-4)//2 = 0, (4-1)//2 = 1
		{6, 4, -1, 0}, // one column of padding, on the left (ceil(1/2) = 1)
		{8, 7, -2, -2},
		{1, 9, 2, -3},
	} {
		got, err := CenterCrop(src, c.w, c.h)
		if err != nil {
			t.Fatal(err)
		}
		for y := range c.h {
			for x := range c.w {
				sx, sy := x+c.left, y+c.top
				var wr, wg uint8
				if sx >= 0 && sx < 5 && sy >= 0 && sy < 4 {
					wr, wg = uint8(sx+1), uint8(sy+1)
				}
				o := got.at(x, y)
				if got.Pix[o] != wr || got.Pix[o+1] != wg || got.Pix[o+2] != 0 {
					t.Fatalf("crop %dx%d: pixel (%d,%d) = %v, want source (%d,%d)", c.w, c.h, x, y, got.Pix[o:o+3], sx, sy)
				}
			}
		}
	}
	if _, err := CenterCrop(src, 0, 3); err == nil {
		t.Error("crop to width 0: no error")
	}
}

func TestFloorHalf(t *testing.T) {
	for n, want := range map[int]int{4: 2, 3: 1, 1: 0, 0: 0, -1: -1, -2: -1, -3: -2, -4: -2} {
		if got := floorHalf(n); got != want {
			t.Errorf("floorHalf(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestCLIPPreprocessMatchesReference compares with pixel_values computed
// by testdata/gen_pil.py (Pillow 9.4 and NumPy, transformers 4.47's
// steps): the values must be equal, bit for bit.
func TestCLIPPreprocessMatchesReference(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "clip_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Base  string
		Cases []struct {
			Name, Image string
			Config      map[string]any
		}
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join("testdata", file.Base))
	if err != nil {
		t.Fatal(err)
	}
	want, err := checkpoint.OpenSet(filepath.Join("testdata", "clip_pixels.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg, err := ParseCLIPConfig(overlay(t, base, c.Config))
			if err != nil {
				t.Fatal(err)
			}
			got, h, w, err := CLIPPreprocess(readPNG(t, filepath.Join("testdata", c.Image)), cfg)
			if err != nil {
				t.Fatal(err)
			}
			info, ok := want.Lookup(c.Name)
			if !ok {
				t.Fatalf("no reference %q", c.Name)
			}
			if len(info.Shape) != 3 || info.Shape[0] != 3 || info.Shape[1] != h || info.Shape[2] != w {
				t.Fatalf("got [3 %d %d], reference %v", h, w, info.Shape)
			}
			ref, err := want.ReadF32(info)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ref {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("pixel_values[%d] = %.9g, reference %.9g", i, got[i], ref[i])
				}
			}
		})
	}
}

// overlay applies a case's config keys over the base JSON.
func overlay(t *testing.T, base []byte, over map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(base, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range over {
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseCLIPConfig(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "wan21_i2v_preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		raw  string
		want func(CLIPConfig) bool
	}{
		{"golden", string(golden), func(c CLIPConfig) bool {
			return c.ShortestEdge == 28 && c.CropWidth == 28 && c.CropHeight == 28 && c.Resample == Bicubic &&
				c.RescaleFactor == 1.0/255 && c.Mean == clipMean && c.Std == clipStd
		}},
		{"defaults", `{}`, func(c CLIPConfig) bool { return c == DefaultCLIPConfig() }},
		{"legacy ints", `{"size": 336, "crop_size": 320}`, func(c CLIPConfig) bool {
			return c.ShortestEdge == 336 && c.CropHeight == 320 && c.CropWidth == 320
		}},
		{"fixed size", `{"size": {"height": 10, "width": 12}, "do_center_crop": false, "resample": 1}`, func(c CLIPConfig) bool {
			return c.ShortestEdge == 0 && c.Height == 10 && c.Width == 12 && !c.DoCenterCrop && c.Resample == Lanczos
		}},
		{"scalar mean", `{"image_mean": 0.5, "image_std": [1, 2, 3]}`, func(c CLIPConfig) bool {
			return c.Mean == [3]float64{0.5, 0.5, 0.5} && c.Std == [3]float64{1, 2, 3}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseCLIPConfig([]byte(c.raw))
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(got) {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestParseCLIPConfigErrors(t *testing.T) {
	for _, c := range []struct{ raw, mention string }{
		{`{`, "preprocessor config"},
		{`{"resample": 0}`, "resample filter 0"},
		{`{"size": {"longest_edge": 3}}`, "size"},
		{`{"size": {"shortest_edge": -3}}`, "resize size"},
		{`{"crop_size": {"height": 3}}`, "crop_size"},
		{`{"crop_size": 0}`, "crop_size"},
		{`{"image_std": [1, 0, 1]}`, "non-zero std"},
		{`{"image_mean": [1, 2]}`, "image_mean"},
	} {
		_, err := ParseCLIPConfig([]byte(c.raw))
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %v, want one mentioning %q", c.raw, err, c.mention)
		}
	}
}

func TestResizeTarget(t *testing.T) {
	c := CLIPConfig{ShortestEdge: 224}
	for _, s := range []struct{ w, h, ow, oh int }{
		{832, 480, 388, 224}, // int(224·832/480) = int(388.27)
		{480, 832, 224, 388},
		{300, 300, 224, 224},
		{1280, 720, 398, 224}, // 398.22
		{48, 32, 336, 224},
	} {
		if w, h := c.ResizeTarget(s.w, s.h); w != s.ow || h != s.oh {
			t.Errorf("%dx%d -> %dx%d, want %dx%d", s.w, s.h, w, h, s.ow, s.oh)
		}
	}
}

func FuzzParseCLIPConfig(f *testing.F) {
	f.Add(`{"size": {"shortest_edge": 28}, "crop_size": {"height": 28, "width": 28}}`)
	f.Add(`{"size": 5, "crop_size": 3, "image_mean": 0.1}`)
	f.Add(`{"resample": 9, "image_std": []}`)
	img := &RGB{Width: 3, Height: 2, Pix: make([]uint8, 18)}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseCLIPConfig([]byte(raw))
		if err != nil {
			return
		}
		// Keep the work small: a valid config runs on a tiny image when
		// its sizes are small.
		if c.ShortestEdge > 64 || c.Height > 64 || c.Width > 64 || c.CropHeight > 64 || c.CropWidth > 64 {
			return
		}
		px, h, w, err := CLIPPreprocess(img, c)
		if err == nil && len(px) != 3*h*w {
			t.Fatalf("%d values for %dx%d", len(px), w, h)
		}
	})
}
