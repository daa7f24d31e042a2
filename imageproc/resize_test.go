package imageproc

import (
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// readPNG decodes a test image into RGB.
func readPNG(t testing.TB, path string) *RGB {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return FromImage(img)
}

var filterNames = map[string]Filter{"lanczos": Lanczos, "bilinear": Bilinear, "bicubic": Bicubic, "box": Box, "hamming": Hamming}

// TestResizeMatchesPillow compares with Image.resize outputs that Pillow
// wrote (testdata/gen_pil.py): every sample must be equal.
func TestResizeMatchesPillow(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "resize", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Input, Filter, Want string
			Width, Height       int
		}
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range file.Cases {
		src := readPNG(t, filepath.Join("testdata", "resize", c.Input))
		t.Run(fmt.Sprintf("%s_%dx%d_to_%dx%d", c.Filter, src.Width, src.Height, c.Width, c.Height), func(t *testing.T) {
			want := readPNG(t, filepath.Join("testdata", "resize", c.Want))
			f, ok := filterNames[c.Filter]
			if !ok {
				t.Fatalf("unknown filter %q", c.Filter)
			}
			got, err := Resize(src, c.Width, c.Height, f)
			if err != nil {
				t.Fatal(err)
			}
			sameImage(t, got, want)
		})
	}
}

func sameImage(t *testing.T, got, want *RGB) {
	t.Helper()
	if got.Width != want.Width || got.Height != want.Height {
		t.Fatalf("got %s, want %s", got, want)
	}
	bad := 0
	for i := range got.Pix {
		if got.Pix[i] != want.Pix[i] {
			if bad < 5 {
				p := i / 3
				t.Errorf("pixel (%d,%d) channel %d = %d, want %d", p%got.Width, p/got.Width, i%3, got.Pix[i], want.Pix[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d samples differ", bad, len(got.Pix))
	}
}

// refWeights is Pillow's resampling matrix [out][in], derived again in
// float64 as dense rows: output o reads input i when i lies in the window
// Pillow rounds [center-support, center+support) to; the row is the
// filter at (i + 0.5 - center) / filterscale, normalised to sum 1, then
// rounded to 22 fractional bits (half away from zero).
func refWeights(in, out int, fn func(float64) float64, support float64) [][]float64 {
	scale := float64(in) / float64(out)
	fs := math.Max(scale, 1)
	sup := support * fs
	rows := make([][]float64, out)
	for o := range rows {
		center := (float64(o) + 0.5) * scale
		lo := math.Max(math.Trunc(center-sup+0.5), 0)
		hi := math.Min(math.Trunc(center+sup+0.5), float64(in))
		row := make([]float64, in)
		sum := 0.0
		for i := range in {
			if float64(i) >= lo && float64(i) < hi {
				row[i] = fn((float64(i) - center + 0.5) / fs)
				sum += row[i]
			}
		}
		for i := range row {
			if sum != 0 {
				row[i] /= sum
			}
			row[i] = math.Copysign(math.Trunc(math.Abs(row[i])*(1<<22)+0.5), row[i])
		}
		rows[o] = row
	}
	return rows
}

// refPass applies a fixed-point matrix along one axis in float64 (the
// sums are integers well below 2^53, so exact), rounding by adding half
// and flooring the division by 2^22, then clamping to 0..255.
func refPass(src []float64, w, h int, m [][]float64, horizontal bool) ([]float64, int, int) {
	ow, oh := w, h
	if horizontal {
		ow = len(m)
	} else {
		oh = len(m)
	}
	out := make([]float64, ow*oh*3)
	for y := range oh {
		for x := range ow {
			for c := range 3 {
				s := float64(1 << 21)
				if horizontal {
					for i, wi := range m[x] {
						s += wi * src[(y*w+i)*3+c]
					}
				} else {
					for i, wi := range m[y] {
						s += wi * src[(i*w+x)*3+c]
					}
				}
				out[(y*ow+x)*3+c] = math.Min(math.Max(math.Floor(s/(1<<22)), 0), 255)
			}
		}
	}
	return out, ow, oh
}

// refResize is the reference: horizontal pass, then vertical, each only
// when its side changes.
func refResize(src *RGB, w, h int, fn func(float64) float64, support float64) []uint8 {
	img := make([]float64, len(src.Pix))
	for i, v := range src.Pix {
		img[i] = float64(v)
	}
	cw, ch := src.Width, src.Height
	if w != cw {
		img, cw, ch = refPass(img, cw, ch, refWeights(cw, w, fn, support), true)
	}
	if h != ch {
		img, _, _ = refPass(img, cw, ch, refWeights(ch, h, fn, support), false)
	}
	out := make([]uint8, len(img))
	for i, v := range img {
		out[i] = uint8(v)
	}
	return out
}

// The reference filters, from their textbook definitions.
func refCubic(x float64) float64 {
	x = math.Abs(x)
	switch {
	case x < 1:
		return 1.5*x*x*x - 2.5*x*x + 1
	case x < 2:
		return -0.5*x*x*x + 2.5*x*x - 4*x + 2
	}
	return 0
}

func refLanczos(x float64) float64 {
	if x < -3 || x >= 3 {
		return 0
	}
	if x == 0 {
		return 1
	}
	return 3 * math.Sin(math.Pi*x) * math.Sin(math.Pi*x/3) / (math.Pi * math.Pi * x * x)
}

func randomImage(rng *rand.Rand, w, h int) *RGB {
	m := &RGB{Width: w, Height: h, Pix: make([]uint8, 3*w*h)}
	for i := range m.Pix {
		m.Pix[i] = uint8(rng.IntN(256))
	}
	// A few saturated blocks make the negative lobes overshoot and clip.
	for i := 0; i+3 <= len(m.Pix); i += 3 * (1 + rng.IntN(5)) {
		v := uint8(255 * rng.IntN(2))
		m.Pix[i], m.Pix[i+1], m.Pix[i+2] = v, v, v
	}
	return m
}

// TestResizeMatchesReference checks Resize against refResize on random
// images, scaling up and down, for bicubic and Lanczos.
func TestResizeMatchesReference(t *testing.T) {
	filters := []struct {
		f       Filter
		fn      func(float64) float64
		support float64
	}{{Bicubic, refCubic, 2}, {Lanczos, refLanczos, 3}}
	sizes := []struct{ w, h, ow, oh int }{
		{24, 16, 21, 14}, // mild downscale
		{31, 17, 7, 5},   // strong downscale: the filter widens
		{6, 5, 23, 19},   // upscale
		{13, 11, 29, 4},  // up one way, down the other
		{12, 9, 12, 20},  // vertical only
		{12, 9, 3, 9},    // horizontal only
		{1, 1, 4, 3},
		{4, 1, 1, 1},
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, fl := range filters {
		for _, s := range sizes {
			t.Run(fmt.Sprintf("%s_%dx%d_to_%dx%d", fl.f, s.w, s.h, s.ow, s.oh), func(t *testing.T) {
				src := randomImage(rng, s.w, s.h)
				got, err := Resize(src, s.ow, s.oh, fl.f)
				if err != nil {
					t.Fatal(err)
				}
				want := &RGB{Width: s.ow, Height: s.oh, Pix: refResize(src, s.ow, s.oh, fl.fn, fl.support)}
				sameImage(t, got, want)
			})
		}
	}
}

// TestResizeKeepsConstant: the weights sum to one, so a flat image stays
// flat whatever the filter and sizes.
func TestResizeKeepsConstant(t *testing.T) {
	for _, f := range []Filter{Lanczos, Bilinear, Bicubic, Box, Hamming} {
		for _, v := range []uint8{0, 1, 128, 254, 255} {
			src := &RGB{Width: 9, Height: 7, Pix: make([]uint8, 9*7*3)}
			for i := range src.Pix {
				src.Pix[i] = v
			}
			for _, size := range [][2]int{{3, 2}, {20, 31}, {9, 1}, {1, 7}} {
				got, err := Resize(src, size[0], size[1], f)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range got.Pix {
					if p != v {
						t.Fatalf("%s %v -> %v: sample %d = %d, want %d", f, src, got, i, p, v)
					}
				}
			}
		}
	}
}

func TestResizeSameSizeCopies(t *testing.T) {
	src := randomImage(rand.New(rand.NewPCG(1, 2)), 5, 4)
	got, err := Resize(src, 5, 4, Lanczos)
	if err != nil {
		t.Fatal(err)
	}
	sameImage(t, got, src)
	got.Pix[0]++
	if got.Pix[0] == src.Pix[0] {
		t.Error("the result shares the source's pixels")
	}
}

func TestResizeErrors(t *testing.T) {
	ok := &RGB{Width: 2, Height: 2, Pix: make([]uint8, 12)}
	for _, c := range []struct {
		name string
		src  *RGB
		w, h int
		f    Filter
	}{
		{"nil source", nil, 2, 2, Bicubic},
		{"short pixels", &RGB{Width: 2, Height: 2, Pix: make([]uint8, 11)}, 2, 2, Bicubic},
		{"zero width", ok, 0, 2, Bicubic},
		{"negative height", ok, 2, -1, Bicubic},
		{"huge", ok, maxSide + 1, 2, Bicubic},
		{"nearest", ok, 3, 3, 0},
		{"unknown filter", ok, 3, 3, 6},
	} {
		if _, err := Resize(c.src, c.w, c.h, c.f); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// FuzzResize: any sizes give an image of the asked size or an error, never
// a panic, and a flat image stays flat.
func FuzzResize(f *testing.F) {
	f.Add(uint8(48), uint8(32), uint8(42), uint8(28), uint8(3), uint8(77))
	f.Add(uint8(1), uint8(1), uint8(200), uint8(1), uint8(1), uint8(0))
	f.Add(uint8(0), uint8(3), uint8(3), uint8(0), uint8(9), uint8(255))
	f.Fuzz(func(t *testing.T, w, h, ow, oh, filter, value uint8) {
		// Small sides keep each run fast; 0 checks the errors.
		src := &RGB{Width: int(w % 40), Height: int(h % 40)}
		src.Pix = make([]uint8, 3*src.Width*src.Height)
		for i := range src.Pix {
			src.Pix[i] = value
		}
		got, err := Resize(src, int(ow%80), int(oh%80), Filter(filter%7))
		valid := src.Width > 0 && src.Height > 0 && ow%80 > 0 && oh%80 > 0 && filter%7 >= 1 && filter%7 <= 5
		if valid != (err == nil) {
			t.Fatalf("%v to %dx%d filter %d: error %v", src, ow%80, oh%80, filter%7, err)
		}
		if err != nil {
			return
		}
		if got.Width != int(ow%80) || got.Height != int(oh%80) || len(got.Pix) != 3*got.Width*got.Height {
			t.Fatalf("got %v with %d bytes, want %dx%d", got, len(got.Pix), ow%80, oh%80)
		}
		for i, p := range got.Pix {
			if p != value {
				t.Fatalf("sample %d = %d, want %d", i, p, value)
			}
		}
	})
}
