package gemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddBiasVec: the AVX2 bias add gives addBiasGo's floats, bit for bit,
// for every tile shape the kernels write (rows up to 14, columns up to 32,
// so the vector steps and the scalar tail both run), and leaves the
// columns past the bias and the rows past rows alone.
func TestAddBiasVec(t *testing.T) {
	if !biasVec() {
		t.Skip("CPU lacks AVX2 (or FERRY_CPU caps it): addBias runs addBiasGo only")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for rows := 1; rows <= 14; rows++ {
		for cols := 1; cols <= 32; cols++ {
			ldc := cols + 3
			c := make([]float32, (rows+1)*ldc)
			for i := range c {
				c[i] = rng.Float32()*2 - 1
			}
			bias := make([]float32, cols)
			for i := range bias {
				bias[i] = rng.Float32()*2 - 1
			}
			want := append([]float32(nil), c...)
			addBiasGo(want, ldc, rows, bias)
			got := append([]float32(nil), c...)
			addBias(got, ldc, rows, bias)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("rows %d cols %d: C[%d] = %v, want %v", rows, cols, i, got[i], want[i])
				}
			}
		}
	}
}
