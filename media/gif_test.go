package media

import (
	"image/gif"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func decodeGIF(t *testing.T, path string) *gif.GIF {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := gif.DecodeAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return g
}

func TestGIFStructure(t *testing.T) {
	tests := []struct {
		fps       float64
		wantDelay int // centiseconds
	}{
		{16, 6}, {10, 10}, {24, 4}, {8, 13}, {100, 2}, {0.5, 200},
	}
	v := newLevels(5, 12, 20, true, 1)
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "out.gif")
		if err := Write(path, v.floats, v.f, v.h, v.w, tt.fps); err != nil {
			t.Fatal(err)
		}
		g := decodeGIF(t, path)
		if len(g.Image) != v.f {
			t.Fatalf("%d frames, want %d", len(g.Image), v.f)
		}
		if g.Config.Width != v.w || g.Config.Height != v.h {
			t.Errorf("logical screen %dx%d, want %dx%d", g.Config.Width, g.Config.Height, v.w, v.h)
		}
		if g.LoopCount != 0 {
			t.Errorf("loop count %d, want 0 (forever)", g.LoopCount)
		}
		for i, d := range g.Delay {
			if d != tt.wantDelay {
				t.Fatalf("fps %v: frame %d delay %d cs, want %d", tt.fps, i, d, tt.wantDelay)
			}
		}
	}
}

// TestGIFFewColoursExact: a frame with at most 256 colours is stored
// without loss.
func TestGIFFewColoursExact(t *testing.T) {
	v := newLevels(3, 16, 16, false, 2)
	for i := range v.bytes {
		v.bytes[i] = uint8(i / 3 % 7 * 40) // grey-ish bars, 7 colours
		v.floats[i] = float32(v.bytes[i]) / 255
	}
	path := filepath.Join(t.TempDir(), "out.gif")
	if err := Write(path, v.floats, v.f, v.h, v.w, 10); err != nil {
		t.Fatal(err)
	}
	g := decodeGIF(t, path)
	for i, img := range g.Image {
		if d, _ := compareImage(t, img, v.frame(i), v.w, v.h); d != 0 {
			t.Fatalf("frame %d: pixel off by %d", i, d)
		}
	}
}

// TestGIFManyColoursClose: a smooth frame of thousands of colours is
// quantized and dithered: small mean error, and the mean colour of each
// channel preserved (what error diffusion is for).
func TestGIFManyColoursClose(t *testing.T) {
	v := newLevels(2, 64, 96, true, 3)
	for i := range v.bytes { // add fine noise so there are many colours
		v.bytes[i] = uint8(min(255, int(v.bytes[i])+i*7919%13))
		v.floats[i] = float32(v.bytes[i]) / 255
	}
	path := filepath.Join(t.TempDir(), "out.gif")
	if err := Write(path, v.floats, v.f, v.h, v.w, 10); err != nil {
		t.Fatal(err)
	}
	g := decodeGIF(t, path)
	for i, img := range g.Image {
		if n := len(img.Palette); n > 256 || n < 64 {
			t.Errorf("frame %d: palette of %d colours", i, n)
		}
		_, mean := compareImage(t, img, v.frame(i), v.w, v.h)
		if mean > 4 {
			t.Errorf("frame %d: mean error %.2f levels", i, mean)
		}
		var got, want [3]float64
		for y := 0; y < v.h; y++ {
			for x := 0; x < v.w; x++ {
				r, gg, b, _ := img.At(x, y).RGBA()
				c := [3]uint32{r >> 8, gg >> 8, b >> 8}
				for ch := 0; ch < 3; ch++ {
					got[ch] += float64(c[ch])
					want[ch] += float64(v.frame(i)[(y*v.w+x)*3+ch])
				}
			}
		}
		for ch := 0; ch < 3; ch++ {
			if d := math.Abs(got[ch]-want[ch]) / float64(v.w*v.h); d > 1 {
				t.Errorf("frame %d channel %d: mean colour off by %.2f levels", i, ch, d)
			}
		}
	}
}

func TestMedianCutSplitsToLimit(t *testing.T) {
	var bins []bin
	for r := uint8(0); r < 32; r++ {
		for g := uint8(0); g < 32; g += 2 {
			bins = append(bins, bin{key: [3]uint8{r, g, 0}, count: 1, r: uint64(r) << 3, g: uint64(g) << 3})
		}
	}
	boxes := splitBoxes(bins, 256)
	if len(boxes) != 256 {
		t.Fatalf("%d boxes from %d cells, want 256", len(boxes), len(bins))
	}
	total := 0
	for _, b := range boxes {
		if len(b.bins) == 0 {
			t.Fatal("empty box")
		}
		total += len(b.bins)
	}
	if total != len(bins) {
		t.Fatalf("boxes hold %d cells, want %d", total, len(bins))
	}
	if few := splitBoxes(bins[:10], 256); len(few) != 10 {
		t.Fatalf("%d boxes from 10 cells, want 10", len(few))
	}
}
