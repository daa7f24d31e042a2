package imageproc

import (
	"math"
	"testing"
)

// TestVAEPixels checks samples against float32 bit patterns NumPy gave for
// (np.float32(v) / 255.0) * 2.0 - 1.0, and the channels-first layout.
func TestVAEPixels(t *testing.T) {
	samples := []uint8{0, 1, 37, 128, 200, 254, 255}
	want := []uint32{0xbf800000, 0xbf7dfdfe, 0xbf35b5b6, 0x3b808100, 0x3f119192, 0x3f7dfdfe, 0x3f800000}
	img := &RGB{Width: len(samples), Height: 1, Pix: make([]uint8, 3*len(samples))}
	for i, v := range samples {
		img.Pix[3*i] = v // red carries the samples; green and blue stay 0
	}
	got := VAEPixels(img)
	n := len(samples)
	for i := range samples {
		if b := math.Float32bits(got[i]); b != want[i] {
			t.Errorf("sample %d: bits %#x, want %#x", samples[i], b, want[i])
		}
		if got[n+i] != -1 || got[2*n+i] != -1 {
			t.Errorf("pixel %d: green %g, blue %g, want -1", i, got[n+i], got[2*n+i])
		}
	}
}
