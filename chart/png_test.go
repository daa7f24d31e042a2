package chart

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"testing"
)

func renderPNG(t *testing.T, d Data) image.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, d, PNG); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
	return img
}

func sameRGB(c color.Color, want color.NRGBA) bool {
	r, g, b, _ := c.RGBA()
	return uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B
}

func TestPNGSize(t *testing.T) {
	cases := []struct{ w, h, wantW, wantH int }{
		{0, 0, DefaultWidth, DefaultHeight},
		{900, 500, 900, 500},
	}
	for _, c := range cases {
		d := sampleData()
		d.Width, d.Height = c.w, c.h
		if b := renderPNG(t, d).Bounds(); b.Dx() != c.wantW || b.Dy() != c.wantH {
			t.Errorf("size %v, want %dx%d", b, c.wantW, c.wantH)
		}
	}
}

// TestPNGBudgetLine finds the budget line's height in the SVG of the same
// data and checks the PNG has the line's color there, and background just
// above and below it (the line is 2 pixels thick).
func TestPNGBudgetLine(t *testing.T) {
	red := rgb(0xd62728)
	d := Data{
		Series: []Series{{Name: "device allocated", Points: []Point{{0, gib}, {10, 2 * gib}}}},
		Levels: []Level{{Name: "device budget", Bytes: 5 * gib, Color: hex(red)}},
	}
	y := findByID(t, renderSVG(t, d), "level-device-budget").float(t, "y1")
	img := renderPNG(t, d)
	row := int(math.Floor(y))
	for _, x := range []int{marginLeft + 5, marginLeft + 200, marginLeft + 500} {
		if c := img.At(x, row); !sameRGB(c, red) {
			t.Errorf("pixel (%d,%d) is %v, want the budget line's %v", x, row, c, red)
		}
		for _, off := range []int{-4, 4} {
			if c := img.At(x, row+off); sameRGB(c, red) {
				t.Errorf("pixel (%d,%d) is the line's color: the line is too thick or misplaced", x, row+off)
			}
		}
	}
}

func TestPNGDashedLineHasGaps(t *testing.T) {
	col := rgb(0x123456)
	d := Data{
		Series: []Series{{Name: "a", Points: []Point{{0, gib}}}},
		Levels: []Level{{Name: "predicted device peak", Bytes: 3 * gib, Kind: Predicted, Color: hex(col)}},
		End:    10,
	}
	y := findByID(t, renderSVG(t, d), "level-predicted-device-peak").float(t, "y1")
	img := renderPNG(t, d)
	on, off := 0, 0
	for x := marginLeft; x < marginLeft+400; x++ {
		if sameRGB(img.At(x, int(math.Floor(y))), col) {
			on++
		} else {
			off++
		}
	}
	if on < 150 || off < 150 {
		t.Fatalf("dashed line: %d pixels on, %d off; want about half each", on, off)
	}
}

func TestPNGTextPixels(t *testing.T) {
	for _, scale := range []int{1, 2, 3} {
		sc := &scene{width: 200, height: 60, background: colorBackground}
		sc.text(text{x: 10, y: 30, s: "GiB 0.5", scale: scale, fill: colorInk})
		img := rasterise(sc)
		want := 0
		for _, r := range "GiB 0.5" {
			for _, row := range glyphFor(r) {
				for b := row; b != 0; b &= b - 1 {
					want += scale * scale
				}
			}
		}
		got := 0
		for y := 0; y < 60; y++ {
			for x := 0; x < 200; x++ {
				if sameRGB(img.At(x, y), colorInk) {
					got++
				}
			}
		}
		if got != want {
			t.Errorf("scale %d: %d ink pixels, want %d", scale, got, want)
		}
	}
}
