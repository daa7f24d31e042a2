package checkpoint

import (
	"encoding/binary"
	"math"
	"os"
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

// FuzzOpenScaled opens arbitrary headers over 64 bytes of data as a whole
// set: scales are taken out of the names or the file is refused in one
// line, and every scale left is finite and belongs to a tensor.
func FuzzOpenScaled(f *testing.F) {
	f.Add(`{"a.weight":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"a.scale_weight":{"dtype":"F32","shape":[],"data_offsets":[4,8]},"scaled_fp8":{"dtype":"F8_E4M3","shape":[0],"data_offsets":[8,8]}}`)
	f.Add(`{"a.weight":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"a.scale_weight":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]},"a.scale_input":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`)
	f.Add(`{"scale_weight":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"weight":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}`)
	f.Fuzz(func(t *testing.T, header string) {
		path := filepath.Join(t.TempDir(), "f.safetensors")
		data := rawFile(header, 64)
		for i := range 64 {
			data[len(data)-64+i] = byte(i * 37) // some scales finite, some not
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSet(path)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q is not one line", err)
			}
			return
		}
		defer s.Close()
		for _, n := range s.Names() {
			if isLeaf(n, scaleSuffix) || isLeaf(n, scaledMarker) || isLeaf(n, inputScaleSuffix) {
				t.Fatalf("%s left among the weights", n)
			}
		}
		for w, v := range s.scales {
			if _, ok := s.Lookup(w); !ok || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("scale %v for %q: not a finite scale of a tensor the set holds", v, w)
			}
		}
	})
}

// A registered naming maps a class's names and the scales with them; two
// names that map to one are refused in one line naming both.
func TestOpenSetAsRenames(t *testing.T) {
	RegisterNaming("TestModel", Naming{
		Detect: func(names []string) bool { return slices.Contains(names, "old.a.weight") },
		Rename: func(n string) (string, bool) { return strings.Replace(n, "old.", "new.", 1), n != "marker" },
	})
	w := RawTensor{Name: "old.a.weight", DType: dtype.F8E4M3, Shape: []int{2}, Data: []byte{0x38, 0x40}}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(path, []RawTensor{w, f32Raw("old.a.scale_weight", nil, 0.5), f32Raw("marker", nil, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSetAs(path, "TestModel")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Names(), []string{"new.a.weight"}) || s.Scale("new.a.weight") != 0.5 {
		t.Errorf("names %v, scale %v: want new.a.weight scaled by 0.5", s.Names(), s.Scale("new.a.weight"))
	}
	if info, _ := s.Lookup("new.a.weight"); info.Name != "new.a.weight" {
		t.Errorf("the tensor's info names %q", info.Name)
	}
	s.Close()
	dup := filepath.Join(t.TempDir(), "d.safetensors")
	b := w
	b.Name = "new.a.weight"
	if err := WriteFile(dup, []RawTensor{w, b}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = OpenSetAs(dup, "TestModel")
	if err == nil || !strings.Contains(err.Error(), "old.a.weight") || !strings.Contains(err.Error(), "new.a.weight") || strings.Contains(err.Error(), "\n") {
		t.Errorf("two names mapping to one: %v", err)
	}
}

// A naming's views read row ranges of a stored tensor (a fused projection
// split in three) and a tensor under another shape, with the stored
// tensor's scale; a view outside the tensor is refused in one line.
func TestOpenSetAsViews(t *testing.T) {
	RegisterNaming("TestViews", Naming{
		Detect: func(names []string) bool { return slices.Contains(names, "qkv.weight") },
		Rename: func(n string) (string, bool) { return n, true },
		Views: func(n string, shape []int) []View {
			switch n {
			case "qkv.weight":
				var vs []View
				for i, p := range []string{"q", "k", "v"} {
					vs = append(vs, View{Name: p + ".weight", Row0: i * 2, Rows: 2, Shape: []int{2, 2}})
				}
				return vs
			case "pos":
				return []View{{Name: "pos.flat", Rows: 1, Shape: []int{6}}}
			case "bad":
				return []View{{Name: "bad.tail", Row0: 1, Rows: 2, Shape: []int{2}}}
			}
			return nil
		},
	})
	qkv := make([]byte, 12)
	for i := range qkv {
		qkv[i] = byte(i)
	}
	pos := make([]byte, 24)
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	if err := WriteFile(path, []RawTensor{{Name: "qkv.weight", DType: dtype.F8E4M3, Shape: []int{6, 2}, Data: qkv},
		f32Raw("qkv.scale_weight", nil, 0.25), {Name: "pos", DType: dtype.F32, Shape: []int{1, 2, 3}, Data: pos}}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSetAs(path, "TestViews")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, p := range []string{"q", "k", "v"} {
		info, ok := s.Lookup(p + ".weight")
		got := make([]byte, info.Size)
		if !ok || s.ReadAt(info, got) != nil || !slices.Equal(got, qkv[4*i:4*i+4]) || !slices.Equal(info.Shape, []int{2, 2}) || s.Scale(p+".weight") != 0.25 {
			t.Errorf("%s.weight: %v %v scale %v, want rows %d-%d of qkv scaled by 0.25", p, info.Shape, got, s.Scale(p+".weight"), 2*i, 2*i+1)
		}
	}
	if info, ok := s.Lookup("pos.flat"); !ok || !slices.Equal(info.Shape, []int{6}) || info.Size != 24 {
		t.Errorf("pos.flat: %+v", info)
	}
	bad := filepath.Join(dir, "b.safetensors")
	if err := WriteFile(bad, []RawTensor{{Name: "qkv.weight", DType: dtype.F32, Shape: []int{1}, Data: make([]byte, 4)}, {Name: "bad", DType: dtype.F32, Shape: []int{2}, Data: make([]byte, 8)}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSetAs(bad, "TestViews"); err == nil || !strings.Contains(err.Error(), "bad.tail") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a view past the tensor: %v", err)
	}
}
