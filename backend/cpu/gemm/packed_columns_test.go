package gemm_test

import (
	"math/rand/v2"
	"testing"

	"ferry/backend/cpu/gemm"
)

// TestPackedColumns multiplies through column views of one packed operand
// and compares each with the product of the matching columns of B.
func TestPackedColumns(t *testing.T) {
	for _, name := range gemm.GoKernels() {
		g, err := gemm.NewGoKernel(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		m, n, k := 5, 100, 37
		rng := rand.New(rand.NewPCG(7, 8))
		a, b := randSlice(rng, m*k), randSlice(rng, n*k)
		pk, err := g.PackB(nil, true, n, k, b, k)
		if err != nil {
			t.Fatal(err)
		}
		nr := pk.NR()
		for _, c := range []struct{ j0, n int }{{0, n}, {nr, n - nr}, {2 * nr, 3}, {0, 1}, {3 * nr, n - 3*nr}} {
			view, err := pk.Columns(c.j0, c.n)
			if err != nil {
				t.Fatalf("%s: columns [%d, %d): %v", name, c.j0, c.j0+c.n, err)
			}
			got, want := make([]float32, m*c.n), make([]float32, m*c.n)
			if err := g.SgemmPacked(false, m, 1, a, k, view, 0, got, c.n); err != nil {
				t.Fatal(err)
			}
			gemm.Naive{}.Sgemm(false, true, m, c.n, k, 1, a, k, b[c.j0*k:], k, 0, want, c.n)
			for i := range got {
				if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
					t.Fatalf("%s: columns [%d, %d): element %d = %g, want %g", name, c.j0, c.j0+c.n, i, got[i], want[i])
				}
			}
		}
		for _, bad := range []struct{ j0, n int }{{1, 3}, {0, n + 1}, {-nr, 2}, {nr, n}} {
			if _, err := pk.Columns(bad.j0, bad.n); err == nil {
				t.Errorf("%s: Columns(%d, %d) accepted", name, bad.j0, bad.n)
			}
		}
	}
}
