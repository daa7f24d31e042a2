package checkpoint

import (
	"math"
	"slices"
	"testing"

	"ferry/dtype"
)

// TestPyTorchFile reads a safetensors file written by PyTorch (the tiny
// UMT5 encoder of the golden set, bf16). The expected values were read from
// the raw bytes with Python's struct module, independently of this package.
func TestPyTorchFile(t *testing.T) {
	s, err := OpenSet("testdata/umt5_bf16.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Len() != 22 {
		t.Errorf("%d tensors, want 22", s.Len())
	}
	if md := s.Files()[0].Metadata(); md["format"] != "pt" {
		t.Errorf("metadata %v, want format=pt", md)
	}
	checkConsistent(t, s.Files()[0])
	shapes := map[string][]int{
		"shared.weight": {384, 32},
		"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": {32, 4},
		"encoder.block.1.layer.1.DenseReluDense.wo.weight":                     {32, 48},
		"encoder.final_layer_norm.weight":                                      {32},
	}
	for name, shape := range shapes {
		info, ok := s.Lookup(name)
		if !ok || info.DType != dtype.BF16 || !slices.Equal(info.Shape, shape) {
			t.Errorf("%s = %+v, %v; want BF16 %v", name, info, ok, shape)
		}
	}
	emb, _ := s.Lookup("shared.weight")
	vals, err := s.ReadF32(emb)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for i, v := range vals {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("shared.weight[%d] = %v", i, v)
		}
		sum += float64(v)
	}
	if want := []float32{0.478515625, -1.984375, -0.5625, -1.109375}; !slices.Equal(vals[:4], want) {
		t.Errorf("shared.weight[:4] = %v, want %v", vals[:4], want)
	}
	if math.Abs(sum-23.422842979431152) > 1e-9 {
		t.Errorf("sum(shared.weight) = %v, want 23.422842979431152", sum)
	}
	// Row 5 of the embedding by ReadRows, as the text encoder gathers tokens.
	row := make([]byte, 32*2)
	if err := s.ReadRows(emb, []int{5}, row); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 32)
	if err := dtype.ToF32(got, row, dtype.BF16); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0.0164794921875 || got[1] != -1.234375 {
		t.Errorf("row 5 starts %v, want [0.0164794921875 -1.234375]", got[:2])
	}
}
