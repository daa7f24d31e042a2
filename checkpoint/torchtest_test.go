package checkpoint_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ferry/checkpoint"
	"ferry/checkpoint/torchtest"
	"ferry/dtype"
)

// TestTorchZipRoundTrip: what torchtest writes as torch.save would, Open
// reads back in place, byte for byte.
func TestTorchZipRoundTrip(t *testing.T) {
	in := []checkpoint.RawTensor{
		{Name: "a.weight", DType: dtype.BF16, Shape: []int{3, 2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{Name: "b", DType: dtype.F32, Shape: []int{}, Data: []byte{0, 0, 0x80, 0x3f}},
		{Name: "c.codes", DType: dtype.F8E4M3, Shape: []int{1, 1, 4}, Data: []byte{0x38, 0xb8, 0x00, 0x7e}},
	}
	// Enough more for three SETITEMS batches of Python's 1000 items.
	for i := range 2500 {
		in = append(in, checkpoint.RawTensor{Name: fmt.Sprintf("blocks.%d.scale", i), DType: dtype.I32, Shape: []int{1}, Data: []byte{byte(i), byte(i >> 8), 0, 0}})
	}
	path := filepath.Join(t.TempDir(), "w.pth")
	if err := torchtest.Write(path, in); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := len(f.Tensors()); n != len(in) {
		t.Fatalf("%d tensors, want %d", n, len(in))
	}
	for _, want := range in {
		info, ok := f.Lookup(want.Name)
		if !ok || info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) {
			t.Fatalf("%s: %+v, want %s %v", want.Name, info, want.DType, want.Shape)
		}
		got := make([]byte, info.Size)
		if err := f.ReadAt(info, got); err != nil || !bytes.Equal(got, want.Data) {
			t.Errorf("%s: %v %v, want %v", want.Name, got, err, want.Data)
		}
	}
}

// TestTorchShardIndex: transformers' sharded PyTorch weights
// (pytorch_model.bin.index.json naming pytorch_model-0000N-of-00002.bin)
// open as one set from their folder.
func TestTorchShardIndex(t *testing.T) {
	dir := t.TempDir()
	shards := map[string]string{}
	for i, name := range []string{"a.weight", "b.weight"} {
		shard := fmt.Sprintf("pytorch_model-%05d-of-00002.bin", i+1)
		r := checkpoint.RawTensor{Name: name, DType: dtype.F32, Shape: []int{1}, Data: []byte{0, 0, 0, byte(0x40 + i)}}
		if err := torchtest.Write(filepath.Join(dir, shard), []checkpoint.RawTensor{r}); err != nil {
			t.Fatal(err)
		}
		shards[name] = shard
	}
	// Written by hand: ferry's WriteIndex writes safetensors indexes only.
	index, _ := json.Marshal(map[string]any{"metadata": map[string]int{"total_size": 8}, "weight_map": shards})
	if err := os.WriteFile(filepath.Join(dir, "pytorch_model.bin.index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !slices.Equal(s.Names(), []string{"a.weight", "b.weight"}) || len(s.Files()) != 2 {
		t.Fatalf("names %v in %d files, want a.weight and b.weight in 2", s.Names(), len(s.Files()))
	}
	info, _ := s.Lookup("b.weight")
	got := make([]byte, 4)
	if err := s.ReadAt(info, got); err != nil || got[3] != 0x41 {
		t.Errorf("b.weight reads %v (%v), want its shard's bytes", got, err)
	}
}
