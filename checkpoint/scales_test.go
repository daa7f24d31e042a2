package checkpoint

import (
	"path/filepath"
	"strings"
	"testing"

	"ferry/dtype"
)

// A scaled fp8 checkpoint (ComfyUI's NAME.scale_weight beside an fp8
// NAME.weight) is refused in one line naming the scale; an fp8 one without
// scales opens.
func TestScaledFP8Refused(t *testing.T) {
	dir := t.TempDir()
	w := RawTensor{Name: "blocks.0.ffn.weight", DType: dtype.F8E4M3, Shape: []int{4, 4}, Data: make([]byte, 16)}
	plain := filepath.Join(dir, "plain.safetensors")
	if err := WriteFile(plain, []RawTensor{w}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(plain)
	if err != nil {
		t.Fatalf("unscaled fp8: %v", err)
	}
	s.Close()
	scaled := filepath.Join(dir, "scaled.safetensors")
	scale := RawTensor{Name: "blocks.0.ffn.scale_weight", DType: dtype.F32, Shape: []int{1}, Data: make([]byte, 4)}
	if err := WriteFile(scaled, []RawTensor{w, scale}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = OpenSet(scaled)
	if err == nil || !strings.Contains(err.Error(), "blocks.0.ffn.scale_weight") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("scaled fp8: got %v, want one line naming the scale", err)
	}
}
