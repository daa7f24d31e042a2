package gemm_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/backend/cpu/gemm"
)

// TestPackedBias checks SgemmPacked over a B with a bias (WithBias) on
// every kernel against alpha·op(A)·B + beta·C + bias in float64, across
// tile edges, several K blocks, transposed A, the special betas (a NaN C
// under beta 0 must not leak), alpha, K = 0 and a column view, within the
// float32 accumulation bound.
func TestPackedBias(t *testing.T) {
	cases := []struct {
		m, n, k     int
		alpha, beta float32
		transA, nan bool
	}{
		{m: 1, n: 1, k: 1, alpha: 1},
		{m: 7, n: 17, k: 19, alpha: 1, nan: true},
		{m: 14, n: 33, k: 600, alpha: 2, beta: 1},
		{m: 61, n: 70, k: 37, alpha: 1, beta: 0.5},
		{m: 230, n: 40, k: 1100, alpha: 0.5, transA: true},
		{m: 300, n: 96, k: 260, alpha: 1, beta: 1},
		{m: 5, n: 20, k: 0, alpha: 1, beta: 0.5},
	}
	for _, name := range gemm.GoKernels() {
		g, err := gemm.NewGoKernel(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%dx%dx%d/alpha%g/beta%g/transA%v", name, c.m, c.n, c.k, c.alpha, c.beta, c.transA), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.m), uint64(c.n*c.k+1)))
				p := biasCase{m: c.m, n: c.n, k: c.k, alpha: c.alpha, beta: c.beta, transA: c.transA,
					a: randSlice(rng, c.m*c.k), b: randSlice(rng, c.n*c.k), bias: randSlice(rng, c.n), c: randSlice(rng, c.m*c.n)}
				if c.nan {
					for i := range p.c {
						p.c[i] = float32(math.NaN())
					}
				}
				pk, err := g.PackB(nil, true, c.n, c.k, p.b, max(c.k, 1))
				if err != nil {
					t.Fatal(err)
				}
				biased, err := pk.WithBias(p.bias)
				if err != nil {
					t.Fatal(err)
				}
				got := append([]float32(nil), p.c...)
				if err := g.SgemmPacked(c.transA, c.m, c.alpha, p.a, max(p.lda(), 1), biased, c.beta, got, c.n); err != nil {
					t.Fatal(err)
				}
				p.check(t, got, 0, c.n)
				if nr := pk.NR(); c.n > nr {
					// A view from the second panel on carries its part of the bias.
					view, err := biased.Columns(nr, c.n-nr)
					if err != nil {
						t.Fatal(err)
					}
					got := make([]float32, c.m*(c.n-nr))
					if err := g.SgemmPacked(c.transA, c.m, c.alpha, p.a, max(p.lda(), 1), view, 0, got, c.n-nr); err != nil {
						t.Fatal(err)
					}
					p.beta = 0
					p.check(t, got, nr, c.n-nr)
				}
			})
		}
	}
}

// biasCase is one biased product: A (m×k, or k×m when transA), B as a
// Linear weight (n×k), C's starting values (m×n).
type biasCase struct {
	m, n, k       int
	alpha, beta   float32
	transA        bool
	a, b, bias, c []float32
}

func (p *biasCase) lda() int {
	if p.transA {
		return p.m
	}
	return p.k
}

// check compares got (m rows of n columns, row stride n) with columns
// [j0, j0+n) of alpha·op(A)·Bᵀ + beta·C + bias in float64, within
// (k+3)·2⁻²⁴ of the sum of the terms' magnitudes.
func (p *biasCase) check(t *testing.T, got []float32, j0, n int) {
	t.Helper()
	u := math.Ldexp(1, -24)
	for i := range p.m {
		for jj := range n {
			j := j0 + jj
			var s, abs float64
			for q := range p.k {
				av := p.a[i*p.k+q]
				if p.transA {
					av = p.a[q*p.m+i]
				}
				x := float64(p.alpha) * float64(av) * float64(p.b[j*p.k+q])
				s += x
				abs += math.Abs(x)
			}
			if p.beta != 0 {
				x := float64(p.beta) * float64(p.c[i*p.n+j])
				s += x
				abs += math.Abs(x)
			}
			s += float64(p.bias[j])
			abs += math.Abs(float64(p.bias[j]))
			v := float64(got[i*n+jj])
			if math.IsNaN(v) || math.Abs(v-s) > float64(p.k+3)*u*abs+1e-30 {
				t.Fatalf("C[%d,%d] = %g, want %g", i, j, v, s)
			}
		}
	}
}

// TestBiasRejects: a bias of the wrong length, and a biased B where the
// product adds no bias, are errors, not silently dropped biases; a nil
// bias leaves an unbiased operand as it is.
func TestBiasRejects(t *testing.T) {
	g := gemm.DefaultGo()
	const m, n, k = 6, 20, 8
	rng := rand.New(rand.NewPCG(3, 4))
	b := randSlice(rng, n*k)
	pk, err := g.PackB(nil, true, n, k, b, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pk.WithBias(make([]float32, n-1)); err == nil {
		t.Error("WithBias accepted 19 biases for 20 columns")
	}
	if same, err := pk.WithBias(nil); err != nil || same != pk {
		t.Errorf("WithBias(nil) on an unbiased operand: %p, %v; want the operand itself", same, err)
	}
	biased, err := pk.WithBias(make([]float32, n))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := biased.WithBias(nil); err != nil || plain == biased {
		t.Errorf("WithBias(nil) on a biased operand: %p, %v; want a copy without the bias", plain, err)
	}
	pa, err := g.PackA(nil, false, m, k, randSlice(rng, m*k), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SgemmPackedAB(1, pa, biased, 0, make([]float32, m*n), n); err == nil {
		t.Error("SgemmPackedAB accepted a biased B")
	}
	ps, err := g.PackStored(nil, storedTypes[0], n, k, make([]byte, 2*n*k), k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.WithBias(make([]float32, n+1)); err == nil {
		t.Error("Stored.WithBias accepted 21 biases for 20 rows")
	}
}
