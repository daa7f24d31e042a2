package checkpoint_test

import (
	"bytes"
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
	path := filepath.Join(t.TempDir(), "w.pth")
	if err := torchtest.Write(path, in); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
