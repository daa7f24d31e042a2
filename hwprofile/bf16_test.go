package hwprofile

import "testing"

// BF16Slower is true only where both GEMMs were measured and bf16 lost.
func TestBF16Slower(t *testing.T) {
	for _, c := range []struct {
		name string
		gemm []GemmRate
		want bool
	}{
		{"bf16 slower", []GemmRate{{Name: "go", GFLOPS: 316}, {Name: "go-bf16", GFLOPS: 198}}, true},
		{"bf16 faster", []GemmRate{{Name: "go", GFLOPS: 486}, {Name: "go-bf16", GFLOPS: 854}}, false},
		{"bf16 not measured", []GemmRate{{Name: "go", GFLOPS: 316}, {Name: "openblas", GFLOPS: 400}}, false},
		{"fp32 not measured", []GemmRate{{Name: "go-bf16", GFLOPS: 100}}, false},
		{"nothing", nil, false},
	} {
		if got := (Profile{Gemm: c.gemm}).BF16Slower(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if DefaultFor(ThisMachine()).BF16Slower() {
		t.Error("the built-in defaults say bf16 is slower: they measure neither")
	}
}
