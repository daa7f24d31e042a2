package server

import (
	"bytes"
	"image/jpeg"
	"testing"
	"time"

	"ferry/imageproc"
	"ferry/server/queue"
)

// TestThumbnails: OpenAI's thumbnail and spritesheet variants are JPEGs
// of the stored video's first frame and of its frames in a grid.
func TestThumbnails(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	v := h.wait(h.submit(tiny("")), 2*time.Minute, terminal)
	if v.Status != queue.StatusCompleted {
		t.Fatalf("job: %s %+v", v.Status, v.Error)
	}
	_, _, stored := h.do("GET", "/v1/videos/"+v.ID+"/content", "")
	c, err := decodeClip(stored, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		variant string
		w, h    int
		cells   []int // the frame in each cell; -1 an empty one
	}{
		{"thumbnail", 32, 32, []int{0}},
		{"spritesheet", 96, 64, []int{0, 1, 2, 3, 4, -1}}, // 5 frames: 3 columns, 2 rows
	} {
		code, hdr, data := h.do("GET", "/v1/videos/"+v.ID+"/content?variant="+tc.variant, "")
		if code != 200 || hdr.Get("Content-Type") != "image/jpeg" {
			t.Fatalf("%s: %d %s %.200s", tc.variant, code, hdr.Get("Content-Type"), data)
		}
		img, err := jpeg.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", tc.variant, err)
		}
		got := imageproc.FromImage(img)
		if got.Width != tc.w || got.Height != tc.h {
			t.Fatalf("%s: %dx%d, want %dx%d", tc.variant, got.Width, got.Height, tc.w, tc.h)
		}
		cols := tc.w / 32
		for i, f := range tc.cells {
			var want []uint8
			if f >= 0 {
				want = c.frames[f].Pix
			}
			if d := cellDiff(got, i%cols*32, i/cols*32, want); d > 6 {
				t.Errorf("%s cell %d: mean difference %.1f from frame %d (JPEG's loss is a few levels)", tc.variant, i, d, f)
			}
		}
	}
	code, _, data := h.do("GET", "/v1/videos/"+v.ID+"/content?variant=gif", "")
	if code != 400 || errorCode(t, data) != "invalid_value" {
		t.Errorf("an unknown variant: %d %s", code, data)
	}
}

// cellDiff is the mean absolute difference of the 32×32 cell at (x0, y0)
// from want (32×32 RGB; nil: black).
func cellDiff(img *imageproc.RGB, x0, y0 int, want []uint8) float64 {
	var sum float64
	for y := range 32 {
		for x := range 32 {
			for ch := range 3 {
				g := float64(img.Pix[3*((y0+y)*img.Width+x0+x)+ch])
				w := 0.0
				if want != nil {
					w = float64(want[3*(y*32+x)+ch])
				}
				sum += max(g-w, w-g)
			}
		}
	}
	return sum / (32 * 32 * 3)
}

// TestSpritesheetLayout: at most 16 frames, first to last evenly, in a
// near-square grid, cells scaled down to 256 pixels wide.
func TestSpritesheetLayout(t *testing.T) {
	var frames []*imageproc.RGB
	for i := range 21 {
		pix := make([]uint8, 3*300*150)
		for j := range pix {
			pix[j] = uint8(10 * i)
		}
		f, err := imageproc.NewRGB(300, 150, pix)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	sheet, err := spritesheet(frames)
	if err != nil {
		t.Fatal(err)
	}
	if sheet.Width != 4*256 || sheet.Height != 4*128 {
		t.Fatalf("sheet %dx%d, want 4 by 4 cells of 256x128", sheet.Width, sheet.Height)
	}
	for i := range 16 {
		want := uint8(10 * (i * 20 / 15)) // frames 0, 1, 2, 4, ..., 20
		x, y := i%4*256+128, i/4*128+64
		if got := sheet.Pix[3*(y*sheet.Width+x)]; got != want {
			t.Errorf("cell %d holds %d, want frame %d's %d", i, got, i*20/15, want)
		}
	}
}
