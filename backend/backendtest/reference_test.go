package backendtest

import (
	"math"
	"testing"
)

// The references are checked here against values worked out by hand, so
// that the suite's yardstick does not rest on the code it measures.

func TestDecoders(t *testing.T) {
	cases := []struct {
		name string
		got  float32
		want float64
	}{
		{"f16 one", decodeF16(0x3c00), 1},
		{"f16 max", decodeF16(0x7bff), 65504},
		{"f16 smallest subnormal", decodeF16(0x0001), math.Ldexp(1, -24)},
		{"f16 -2", decodeF16(0xc000), -2},
		{"f16 +inf", decodeF16(0x7c00), math.Inf(1)},
		{"e4m3 max", decodeF8E4M3(0x7e), 448},
		{"e4m3 one", decodeF8E4M3(0x38), 1},
		{"e4m3 smallest subnormal", decodeF8E4M3(0x01), math.Ldexp(1, -9)},
		{"e4m3 -1.5", decodeF8E4M3(0xbc), -1.5},
		{"e5m2 max", decodeF8E5M2(0x7b), 57344},
		{"e5m2 one", decodeF8E5M2(0x3c), 1},
		{"e5m2 -inf", decodeF8E5M2(0xfc), math.Inf(-1)},
		{"bf16 one", decodeBF16(0x3f80), 1},
		{"bf16 round down tie to even", roundBF16(math.Float32frombits(0x3f808000)), 1},
		{"bf16 round up tie to even", roundBF16(math.Float32frombits(0x3f818000)), 1.015625},
		{"bf16 above tie", roundBF16(math.Float32frombits(0x3f808001)), 1.0078125},
	}
	for _, c := range cases {
		if float64(c.got) != c.want {
			t.Errorf("%s: %g, want %g", c.name, c.got, c.want)
		}
	}
	for _, nan := range []float32{decodeF16(0x7e00), decodeF8E4M3(0x7f), decodeF8E4M3(0xff), decodeF8E5M2(0x7d)} {
		if nan == nan {
			t.Errorf("NaN pattern decoded to %g", nan)
		}
	}
}

func TestReferenceLayouts(t *testing.T) {
	a := []float32{0, 1, 2, 3, 4, 5} // [2, 3]
	check := func(name string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", name, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: %v, want %v", name, got, want)
			}
		}
	}
	got, _ := refPermute(a, []int{2, 3}, []int{1, 0})
	check("transpose", got, []float32{0, 3, 1, 4, 2, 5})
	got, _ = refConcat([][]float32{a, {9, 9, 9}}, [][]int{{2, 3}, {1, 3}}, 0)
	check("concat", got, []float32{0, 1, 2, 3, 4, 5, 9, 9, 9})
	got, _ = refConcat([][]float32{a, {8, 9}}, [][]int{{2, 3}, {2, 1}}, 1)
	check("concat axis 1", got, []float32{0, 1, 2, 8, 3, 4, 5, 9})
	got, _ = refNarrow(a, []int{2, 3}, 1, 1, 2)
	check("narrow", got, []float32{1, 2, 4, 5})
	got, _ = refPad([]float32{1, 2}, []int{1, 2}, []int{1, 0}, []int{0, 1})
	check("pad", got, []float32{0, 0, 0, 1, 2, 0})
	got, _ = refUpsample([]float32{1, 2, 3, 4}, []int{2, 2}, []int{2, 2})
	check("upsample", got, []float32{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4})
	want, shape := refBinary([]float32{1, 2}, []int{2, 1}, []float32{10, 20, 30}, []int{3}, false)
	if !sameShape(shape, []int{2, 3}) || want[0] != 11 || want[2] != 31 || want[3] != 12 || want[5] != 32 {
		t.Fatalf("broadcast add: %v %v", shape, want)
	}
}

func TestReferenceArithmetic(t *testing.T) {
	// softmax of [0, ln 3] is [1/4, 3/4].
	sm := refSoftmax([]float32{0, float32(math.Log(3))}, 2)
	if math.Abs(sm[0]-0.25) > 1e-7 || math.Abs(sm[1]-0.75) > 1e-7 {
		t.Errorf("softmax: %v", sm)
	}
	// layernorm of [1, 3]: mean 2, variance 1: [-1, 1].
	ln, _ := refLayerNorm([]float32{1, 3}, nil, nil, 2, 0)
	if ln[0] != -1 || ln[1] != 1 {
		t.Errorf("layernorm: %v", ln)
	}
	// rmsnorm of [3, 4] (mean square 12.5) with weight [2, 1].
	rn, _ := refRMSNorm([]float32{3, 4}, []float32{2, 1}, 2, 0)
	if r := math.Sqrt(12.5); math.Abs(rn[0]-6/r) > 1e-15 || math.Abs(rn[1]-4/r) > 1e-15 {
		t.Errorf("rmsnorm: %v", rn)
	}
	// [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50].
	mm, _ := refMatMul([]float32{1, 2, 3, 4}, []float32{5, 6, 7, 8}, 1, 1, 2, 2, 2, false)
	if mm[0] != 19 || mm[1] != 22 || mm[2] != 43 || mm[3] != 50 {
		t.Errorf("matmul: %v", mm)
	}
	// linear: x [1 2] · w [[1 1], [0 3]]ᵀ + [10, 20] = [13, 26].
	li, _ := refLinear([]float32{1, 2}, []float32{1, 1, 0, 3}, []float32{10, 20}, 1, 2, 2)
	if li[0] != 13 || li[1] != 26 {
		t.Errorf("linear: %v", li)
	}
	// conv: a 3×3 image of ones, 3×3 kernel of ones, padding 1: corners see
	// 4 ones, edges 6, the centre 9.
	ones := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}
	cv, _ := refConv(convCase{x: []int{1, 1, 3, 3}, w: []int{1, 1, 3, 3}, stride: []int{1, 1}, pad: []int{1, 1}}, ones, ones, nil)
	want := []float64{4, 6, 4, 6, 9, 6, 4, 6, 4}
	for i := range want {
		if cv[i] != want[i] {
			t.Fatalf("conv: %v, want %v", cv, want)
		}
	}
	// attention with one key returns that key's value whatever the scores.
	at, _ := refAttention(attnCase{b: 1, lq: 2, lk: 1, h: 1, d: 2, scale: 1}, []float32{1, 2, 3, 4}, []float32{5, 6}, []float32{7, 8}, nil)
	if at[0] != 7 || at[1] != 8 || at[2] != 7 || at[3] != 8 {
		t.Errorf("attention: %v", at)
	}
	// two keys with scores 0 and ln 3 weigh the values 1/4 and 3/4.
	at, _ = refAttention(attnCase{b: 1, lq: 1, lk: 2, h: 1, d: 1, scale: float32(math.Log(3))}, []float32{1}, []float32{0, 1}, []float32{4, 8}, nil)
	if math.Abs(at[0]-7) > 1e-6 {
		t.Errorf("attention weights: %v, want 7", at)
	}
	// rope by a quarter turn maps (x0, x1) to (-x1, x0).
	ro, _ := refRope([]float32{1, 2}, []int{1, 1, 1, 2}, []float64{0}, []float64{1})
	if ro[0] != -2 || ro[1] != 1 {
		t.Errorf("rope: %v", ro)
	}
}
