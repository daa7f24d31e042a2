package media

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"ferry/checkpoint"
)

func TestWriteSafetensorsRoundTrip(t *testing.T) {
	const f, h, w = 2, 3, 4
	frames := make([]float32, f*h*w*3)
	for i := range frames {
		frames[i] = float32(i) / float32(len(frames)) // exact floats, not 8-bit steps
	}
	path := filepath.Join(t.TempDir(), "out.safetensors")
	if err := CheckPath(path, f); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, frames, f, h, w, 16); err != nil {
		t.Fatal(err)
	}
	file, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	info, ok := file.Lookup("video")
	if !ok {
		t.Fatal("no tensor video")
	}
	if !slices.Equal(info.Shape, []int{1, f, h, w, 3}) {
		t.Fatalf("shape %v", info.Shape)
	}
	raw := make([]byte, info.Size)
	if err := file.ReadAt(info, raw); err != nil {
		t.Fatal(err)
	}
	for i, want := range frames {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			t.Fatalf("value %d: %v, want %v", i, got, want)
		}
	}
}
