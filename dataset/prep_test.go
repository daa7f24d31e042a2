package dataset

import (
	"math"
	"strings"
	"testing"

	"ferry/media"
)

func TestFrameCount(t *testing.T) {
	for _, tc := range []struct{ want, have, got int }{
		{81, 100, 81}, {81, 80, 77}, {17, 17, 17}, {17, 16, 13}, {16, 100, 13},
		{5, 4, 1}, {1, 1, 1}, {81, 1, 1}, {81, 0, 0}, {0, 10, 0},
	} {
		if got := FrameCount(tc.want, tc.have); got != tc.got {
			t.Errorf("FrameCount(%d, %d) = %d, want %d", tc.want, tc.have, got, tc.got)
		}
	}
}

func TestCheckSize(t *testing.T) {
	for _, tc := range []struct {
		w, h, width, height int
		ok                  bool
	}{
		{64, 64, 64, 64, true}, {100, 80, 64, 64, true}, {60, 80, 64, 64, false}, {80, 60, 64, 64, false},
	} {
		err := CheckSize(tc.w, tc.h, tc.width, tc.height)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "smaller than the target")) {
			t.Errorf("CheckSize(%dx%d to %dx%d) = %v", tc.w, tc.h, tc.width, tc.height, err)
		}
	}
}

// clipOf makes a one-frame clip whose pixel (x, y) channel c is f(x, y, c).
func clipOf(w, h int, f func(x, y, c int) byte) *media.Clip {
	px := make([]byte, 3*w*h)
	for y := range h {
		for x := range w {
			for c := range 3 {
				px[(y*w+x)*3+c] = f(x, y, c)
			}
		}
	}
	return &media.Clip{Width: w, Height: h, Frames: [][]byte{px}}
}

// at reads channel c of pixel (x, y) of frame 0 of a [3, F, H, W] result.
func at(v []float32, frames, h, w, c, x, y int) float32 { return v[c*frames*h*w+y*w+x] }

// TestPixels checks the resize against sums worked out by hand: the same
// size is exact, 2× down averages 2×2 blocks, a wider clip is cropped to
// its center, and 3 → 2 pixels weighs the middle one half to each side.
func TestPixels(t *testing.T) {
	norm := func(v float64) float32 { return float32(v/127.5 - 1) }
	grad := func(x, y, c int) byte { return byte(10*x + 50*y + 3*c) }
	for _, tc := range []struct {
		name          string
		clip          *media.Clip
		width, height int
		x, y, c       int
		want          float32
	}{
		{"same size", clipOf(4, 2, grad), 4, 2, 3, 1, 2, norm(30 + 50 + 6)},
		{"2x down", clipOf(4, 4, grad), 2, 2, 1, 1, 0, norm((120 + 130 + 170 + 180) / 4.0)},
		{"center crop", clipOf(8, 4, grad), 4, 4, 0, 0, 1, norm(20 + 0 + 3)},
		{"3 to 2", clipOf(3, 3, grad), 2, 2, 0, 0, 0, norm(10.0/3 + 50.0/3)}, // mean x and y are 1/3
		{"black", clipOf(6, 6, func(int, int, int) byte { return 0 }), 4, 4, 2, 3, 2, -1},
		{"white", clipOf(6, 6, func(int, int, int) byte { return 255 }), 4, 4, 1, 2, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Pixels(tc.clip, 1, tc.width, tc.height)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != 3*tc.width*tc.height {
				t.Fatalf("%d values", len(v))
			}
			if got := at(v, 1, tc.height, tc.width, tc.c, tc.x, tc.y); math.Abs(float64(got-tc.want)) > 1e-6 {
				t.Errorf("pixel (%d, %d) channel %d = %v, want %v", tc.x, tc.y, tc.c, got, tc.want)
			}
		})
	}
}

// TestPixelsLayout: frames and channels land in [3, F, H, W] order.
func TestPixelsLayout(t *testing.T) {
	c := &media.Clip{Width: 2, Height: 1, Frames: [][]byte{{0, 51, 102, 153, 204, 255}, {255, 255, 255, 0, 0, 0}}}
	v, err := Pixels(c, 2, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{-1, 0.2, 1, -1, -0.6, 0.6, 1, -1, -0.2, 1, 1, -1} // [c][f][x]
	for i := range want {
		if math.Abs(float64(v[i]-want[i])) > 1e-6 {
			t.Fatalf("values %v, want %v", v, want)
		}
	}
	if _, err := Pixels(c, 3, 2, 1); err == nil {
		t.Error("3 frames of a 2-frame clip accepted")
	}
	if _, err := Pixels(c, 1, 4, 1); err == nil {
		t.Error("upscaling accepted")
	}
}

// TestAreaWeights: every output's weights sum to 1 and cover their
// interval, for factors that do and do not divide.
func TestAreaWeights(t *testing.T) {
	for _, tc := range []struct{ n, m int }{{10, 3}, {7, 7}, {1920, 832}, {5, 4}} {
		for i, s := range areaWeights(tc.n, tc.m, 0, tc.m) {
			sum := 0.0
			for _, a := range s.w {
				sum += a
			}
			if math.Abs(sum-1) > 1e-9 || s.start < 0 || s.start+len(s.w) > tc.n {
				t.Fatalf("%d→%d: output %d: start %d, %d weights summing to %v", tc.n, tc.m, i, s.start, len(s.w), sum)
			}
		}
	}
}

func TestCoverSize(t *testing.T) {
	for _, tc := range []struct{ w, h, width, height, rw, rh int }{
		{1920, 1080, 832, 480, 853, 480}, {1080, 1920, 832, 480, 832, 1479}, {64, 64, 32, 32, 32, 32}, {100, 50, 32, 32, 64, 32},
	} {
		if rw, rh := coverSize(tc.w, tc.h, tc.width, tc.height); rw != tc.rw || rh != tc.rh {
			t.Errorf("coverSize(%dx%d → %dx%d) = %dx%d, want %dx%d", tc.w, tc.h, tc.width, tc.height, rw, rh, tc.rw, tc.rh)
		}
	}
}
