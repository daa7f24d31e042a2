package planner

import (
	"path/filepath"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
)

// A component's storage dtype is the float dtype holding the most bytes of
// its files (an fp8 checkpoint whose norms and biases stay in fp32 is fp8),
// whatever its config's torch_dtype says; the config's only where no
// weights open.
func TestStorageOf(t *testing.T) {
	dir := t.TempDir()
	bias := checkpoint.RawTensor{Name: "a.bias", DType: dtype.F32, Shape: []int{8}, Data: make([]byte, 32)}
	weight := checkpoint.RawTensor{Name: "b.weight", DType: dtype.F8E4M3, Shape: []int{8, 8}, Data: make([]byte, 64)}
	steps := checkpoint.RawTensor{Name: "c.steps", DType: dtype.I64, Shape: []int{16}, Data: make([]byte, 128)}
	path := filepath.Join(dir, "w.safetensors")
	if err := checkpoint.WriteFile(path, []checkpoint.RawTensor{bias, weight, steps}, nil); err != nil {
		t.Fatal(err)
	}
	w, err := checkpoint.OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, c := range []struct {
		config string
		want   dtype.DType
	}{
		{`{}`, dtype.F8E4M3},
		{`{"torch_dtype": "bfloat16"}`, dtype.F8E4M3},
	} {
		got, ok := storageOf([]byte(c.config), w)
		if !ok || got != c.want {
			t.Errorf("config %s: %v %v, want %v", c.config, got, ok, c.want)
		}
	}
	if _, ok := storageOf([]byte(`{}`), nil); ok {
		t.Error("a component without weights or torch_dtype has a storage dtype")
	}
	if got, ok := storageOf([]byte(`{"torch_dtype": "float16"}`), nil); !ok || got != dtype.F16 {
		t.Errorf("no weights, torch_dtype float16: %v %v, want F16", got, ok)
	}
}
