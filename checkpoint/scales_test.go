package checkpoint

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/dtype"
)

func f32Raw(name string, shape []int, vs ...float32) RawTensor {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return RawTensor{Name: name, DType: dtype.F32, Shape: shape, Data: b}
}

// A scaled fp8 checkpoint (ComfyUI's NAME.scale_weight beside an fp8
// NAME.weight, a scaled_fp8 marker, input scales) opens as its weights
// alone, each with its scale; ReadF32 applies it.
func TestScales(t *testing.T) {
	dir := t.TempDir()
	// E4M3 0x38 is 1.0, 0x40 is 2.0.
	w := RawTensor{Name: "model.blocks.0.ffn.weight", DType: dtype.F8E4M3, Shape: []int{2, 2}, Data: []byte{0x38, 0x40, 0x38, 0x40}}
	plain := RawTensor{Name: "model.blocks.0.norm.weight", DType: dtype.F8E4M3, Shape: []int{2}, Data: []byte{0x38, 0x40}}
	tensors := []RawTensor{w, plain,
		f32Raw("model.blocks.0.ffn.scale_weight", nil, 0.25),
		f32Raw("model.blocks.0.ffn.scale_input", nil, 3),
		{Name: "model.scaled_fp8", DType: dtype.F8E4M3, Shape: []int{0}, Data: nil}}
	path := filepath.Join(dir, "scaled.safetensors")
	if err := WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := []string{w.Name, plain.Name}; !slices.Equal(s.Names(), want) {
		t.Fatalf("names %v, want %v", s.Names(), want)
	}
	if s.Scale(w.Name) != 0.25 || s.Scale(plain.Name) != 1 {
		t.Fatalf("scales %v and %v, want 0.25 and 1", s.Scale(w.Name), s.Scale(plain.Name))
	}
	info, _ := s.Lookup(w.Name)
	got, err := s.ReadF32(info)
	if err != nil || !slices.Equal(got, []float32{0.25, 0.5, 0.25, 0.5}) {
		t.Fatalf("ReadF32: %v %v, want the stored values times 0.25", got, err)
	}
}

// Malformed scales are refused in one line naming the tensor.
func TestScalesRefused(t *testing.T) {
	w := RawTensor{Name: "a.weight", DType: dtype.F8E4M3, Shape: []int{2}, Data: []byte{0x38, 0x40}}
	for _, c := range []struct {
		name  string
		scale RawTensor
		want  string
	}{
		{"no weight", f32Raw("b.scale_weight", nil, 1), "b.scale_weight"},
		{"two values", f32Raw("a.scale_weight", []int{2}, 1, 2), "a.scale_weight"},
		{"not finite", f32Raw("a.scale_weight", nil, float32(math.Inf(1))), "finite"},
	} {
		path := filepath.Join(t.TempDir(), "c.safetensors")
		if err := WriteFile(path, []RawTensor{w, c.scale}, nil); err != nil {
			t.Fatal(err)
		}
		_, err := OpenSet(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line naming %q", c.name, err, c.want)
		}
	}
}
