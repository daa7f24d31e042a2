package gemm_test

import (
	"math"
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

// TestPackedAB multiplies row views of a packed A by column views of a
// packed B, both ways A can be stored and with beta 0 and 1, and compares
// each with the naive product of the same rows and columns. The second
// size has more rows and K steps than one cache block holds.
func TestPackedAB(t *testing.T) {
	for _, size := range []struct{ m, n, k int }{{61, 70, 37}, {230, 40, 1100}} {
		for _, name := range gemm.GoKernels() {
			testPackedAB(t, name, size.m, size.n, size.k)
		}
	}
}

func testPackedAB(t *testing.T, name string, m, n, k int) {
	t.Helper()
	{
		g, err := gemm.NewGoKernel(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(9, 10))
		a, b := randSlice(rng, m*k), randSlice(rng, n*k)
		absA, absB := make([]float32, len(a)), make([]float32, len(b))
		for i, v := range a {
			absA[i] = abs32(v)
		}
		for i, v := range b {
			absB[i] = abs32(v)
		}
		pb, err := g.PackB(nil, true, n, k, b, k)
		if err != nil {
			t.Fatal(err)
		}
		mr, nr := g.RowPanel(), pb.NR()
		for _, transA := range []bool{false, true} {
			lda := k
			if transA {
				lda = m // a holds Aᵀ: k rows of m
			}
			pa, err := g.PackA(nil, transA, m, k, a, lda)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ i0, m, j0, n int }{
				{0, m, 0, n}, {mr, m - mr, nr, n - nr}, {0, mr, 0, 1}, {2 * mr, 2 * mr, nr, 3}, {m / mr * mr, m % mr, 0, n},
			} {
				rows, err := pa.Rows(c.i0, c.m)
				if err != nil {
					t.Fatalf("%s: rows [%d, %d): %v", name, c.i0, c.i0+c.m, err)
				}
				cols, err := pb.Columns(c.j0, c.n)
				if err != nil {
					t.Fatal(err)
				}
				for _, beta := range []float32{0, 1} {
					got := randSlice(rng, c.m*c.n)
					want := append([]float32(nil), got...)
					got0 := append([]float32(nil), got...)
					if err := g.SgemmPackedAB(0.5, &rows, cols, beta, got, c.n); err != nil {
						t.Fatal(err)
					}
					ai := c.i0 * lda
					if transA {
						ai = c.i0
					}
					gemm.Naive{}.Sgemm(transA, true, c.m, c.n, k, 0.5, a[ai:], lda, b[c.j0*k:], k, beta, want, c.n)
					// float32 sums of k terms: within k·2⁻²³ of the
					// sum of the terms' magnitudes (and of beta·C's).
					bound := append([]float32(nil), want...)
					for i := range bound {
						bound[i] = beta * abs32(got0[i])
					}
					gemm.Naive{}.Sgemm(transA, true, c.m, c.n, k, 0.5, absA[ai:], lda, absB[c.j0*k:], k, 1, bound, c.n)
					for i := range got {
						if d := abs32(got[i] - want[i]); d > float32(k+1)*0x1p-23*bound[i] {
							t.Fatalf("%s transA=%v beta=%g: rows [%d, %d) columns [%d, %d): element %d = %g, want %g",
								name, transA, beta, c.i0, c.i0+c.m, c.j0, c.j0+c.n, i, got[i], want[i])
						}
					}
				}
			}
			for _, bad := range []struct{ i0, m int }{{1, 3}, {0, m + 1}, {-mr, 2}, {0, mr + 1}} {
				if _, err := pa.Rows(bad.i0, bad.m); err == nil {
					t.Errorf("%s: Rows(%d, %d) accepted", name, bad.i0, bad.m)
				}
			}
		}
		testFilledA(t, g, name, a, b, absA, absB, pb, m, n, k)
		other, err := g.PackA(nil, false, 3, k+1, a, k+1)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.SgemmPackedAB(1, other, pb, 0, make([]float32, 3*n), n); err == nil {
			t.Errorf("%s: product of 3×%d by %d×%d accepted", name, k+1, k, n)
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// testFilledA multiplies A (m×k, row-major in a) by the packed B with A
// written by a filler, block by block, and compares with the naive
// product; the filler also checks that the blocks it is asked for tile A.
func testFilledA(t *testing.T, g *gemm.Go, name string, a, b, absA, absB []float32, pb *gemm.Packed, m, n, k int) {
	t.Helper()
	mr := g.RowPanel()
	filled := 0
	fill := func(dst []float32, i0, rows, p0, steps int) {
		if i0%mr != 0 || i0+rows > m || p0+steps > k || len(dst) < rows*steps {
			t.Fatalf("%s: fill rows [%d, %d) steps [%d, %d) into %d floats", name, i0, i0+rows, p0, p0+steps, len(dst))
		}
		filled += rows * steps
		for q := 0; q*mr < rows; q++ {
			pr := min(mr, rows-q*mr)
			for s := range steps {
				for j := range pr {
					dst[q*mr*steps+s*pr+j] = a[(i0+q*mr+j)*k+p0+s]
				}
			}
		}
	}
	got := make([]float32, m*n)
	want := make([]float32, m*n)
	if err := g.SgemmFilledA(m, k, 0.5, fill, pb, 0, got, n); err != nil {
		t.Fatal(err)
	}
	if filled != m*k {
		t.Fatalf("%s: filled %d elements of A, want %d", name, filled, m*k)
	}
	gemm.Naive{}.Sgemm(false, true, m, n, k, 0.5, a, k, b, k, 0, want, n)
	bound := make([]float32, m*n) // as in testPackedAB
	gemm.Naive{}.Sgemm(false, true, m, n, k, 0.5, absA, k, absB, k, 0, bound, n)
	for i := range got {
		if d := abs32(got[i] - want[i]); d > float32(k+1)*0x1p-23*bound[i] {
			t.Fatalf("%s: filled product element %d = %g, want %g", name, i, got[i], want[i])
		}
	}
	if err := g.SgemmFilledA(m, k+1, 1, fill, pb, 0, got, n); err == nil {
		t.Errorf("%s: filled product of %d×%d by %d×%d accepted", name, m, k+1, k, n)
	}
}

// TestPackedABToB checks that a product written as a packed B operand
// holds what SgemmPackedAB writes row-major, bit for bit, with zero
// padding columns, and multiplies as that matrix packed by PackB would.
func TestPackedABToB(t *testing.T) {
	for _, size := range []struct{ m, n, k int }{{61, 70, 37}, {230, 40, 1100}, {12, 16, 5}} {
		for _, name := range gemm.GoKernels() {
			g, err := gemm.NewGoKernel(nil, name)
			if err != nil {
				t.Fatal(err)
			}
			m, n, k := size.m, size.n, size.k
			rng := rand.New(rand.NewPCG(11, 12))
			pa, err := g.PackA(nil, false, m, k, randSlice(rng, m*k), k)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := g.PackB(nil, true, n, k, randSlice(rng, n*k), k)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, m*n)
			if err := g.SgemmPackedAB(0.5, pa, pb, 0, want, n); err != nil {
				t.Fatal(err)
			}
			dst := make([]float32, g.PackedLen(n, m))
			for i := range dst {
				dst[i] = float32(math.NaN()) // unwritten floats show
			}
			got, err := g.SgemmPackedABToB(0.5, pa, pb, dst)
			if err != nil {
				t.Fatal(err)
			}
			if got.K() != m || got.N() != n {
				t.Fatalf("%s %v: result is %d×%d, want %d×%d", name, size, got.K(), got.N(), m, n)
			}
			nr := pb.NR()
			for j0 := 0; j0 < n; j0 += nr {
				for i := range m {
					for j := range nr {
						x, w := dst[j0*m+i*nr+j], float32(0)
						if j0+j < n {
							w = want[i*n+j0+j]
						}
						if x != w {
							t.Fatalf("%s %v: panel %d row %d column %d = %g, want %g", name, size, j0/nr, i, j, x, w)
						}
					}
				}
			}
			// The result as the B operand of a next product.
			next, err := g.PackA(nil, false, 3, m, randSlice(rng, 3*m), m)
			if err != nil {
				t.Fatal(err)
			}
			repacked, err := g.PackB(nil, false, n, m, want, n)
			if err != nil {
				t.Fatal(err)
			}
			c1, c2 := make([]float32, 3*n), make([]float32, 3*n)
			if err := g.SgemmPackedAB(1, next, &got, 0, c1, n); err != nil {
				t.Fatal(err)
			}
			if err := g.SgemmPackedAB(1, next, repacked, 0, c2, n); err != nil {
				t.Fatal(err)
			}
			for i := range c1 {
				if c1[i] != c2[i] {
					t.Fatalf("%s %v: next product element %d = %g, through PackB %g", name, size, i, c1[i], c2[i])
				}
			}
			if _, err := g.SgemmPackedABToB(1, pa, pb, dst[:len(dst)-1]); err == nil {
				t.Errorf("%s %v: a destination one float short accepted", name, size)
			}
		}
	}
}
