// Package gemmtest is the conformance suite every gemm.Impl runs (gonum's
// habit: one suite, every implementation). It compares against a float64
// reference over a table of shapes chosen to hit edge tiles, block edges,
// padded leading dimensions, all four transpose combinations and the
// alpha/beta special cases.
//
//	func TestMine(t *testing.T) { gemmtest.Run(t, mine) }
package gemmtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"ferry/backend/cpu/gemm"
)

// Shape is one product size. Full shapes run every combination of
// transposes, alpha, beta and padding; the others (larger) run a few.
type Shape struct {
	M, N, K int
	Full    bool
}

// Shapes is the table Run uses. Tile and block sizes of the current Go
// kernels are 14×32 and 6×16 (AVX-512, AVX2), 4×16 portable, kc up to 512,
// mc 98, nc 4096; products of at most 256 rows (128 portable) stream B,
// larger ones share a packed B block; the parallel threshold is 4 Mflop.
// The table has shapes below, at and just past each.
var Shapes = []Shape{
	{1, 1, 1, true}, {1, 1, 0, true}, {3, 5, 0, true}, {0, 4, 3, true}, {4, 0, 3, true},
	{2, 3, 4, true}, {5, 7, 3, true}, {1, 33, 17, true}, {33, 1, 17, true},
	{6, 16, 16, true}, {7, 17, 15, true}, {14, 32, 16, true}, {15, 33, 31, true},
	{13, 31, 33, true}, {28, 64, 64, true}, {29, 65, 47, true}, {16, 48, 100, true},
	{100, 63, 64, true}, {64, 16, 33, true}, {97, 97, 97, true},
	{150, 130, 120, false}, // parallel path (4.7 Mflop), several M and N tiles
	{230, 70, 800, false},  // three K blocks, two M blocks of 196
	{3, 4100, 5, false},    // two N blocks of 4096
	{200, 300, 50, false},  // parallel, split by rows
	{40, 1000, 130, false}, // parallel, split by columns
	{256, 96, 1536, false}, // a DiT width in K
	{300, 70, 1100, false}, // shared B block: three K blocks, four M blocks
	{513, 33, 40, false},   // shared B block, split by rows, odd edges
	{270, 4200, 20, false}, // shared B block, two N blocks of 4096
}

// product is one call's arguments and expected result.
type product struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int
	nanC           bool // C starts as NaN (beta = 0 must not read it)
}

func (p product) String() string {
	return fmt.Sprintf("m=%d n=%d k=%d transA=%v transB=%v alpha=%g beta=%g lda=%d ldb=%d ldc=%d",
		p.m, p.n, p.k, p.transA, p.transB, p.alpha, p.beta, p.lda, p.ldb, p.ldc)
}

// Run checks impl over Shapes, then runs two products concurrently.
func Run(t *testing.T, impl gemm.Impl) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range Shapes {
		t.Run(fmt.Sprintf("%dx%dx%d", s.M, s.N, s.K), func(t *testing.T) {
			fails := 0
			for _, p := range products(s, rng) {
				if err := check(impl, p); err != nil {
					t.Errorf("%s: %s: %v", impl.Name(), p, err)
					if fails++; fails == 5 {
						t.Fatalf("stopping after %d failures", fails)
					}
				}
			}
		})
	}
	t.Run("concurrent", func(t *testing.T) { runConcurrent(t, impl) })
}

// RunPacked runs the suite on a Packer's prepacked path: every product
// packs its B first, then calls SgemmPacked.
func RunPacked(t *testing.T, p gemm.Packer) {
	t.Helper()
	Run(t, packedImpl{p})
}

// packedImpl adapts a Packer's packed path to Impl.
type packedImpl struct{ p gemm.Packer }

func (pi packedImpl) Name() string { return pi.p.Name() + "-packed" }

func (pi packedImpl) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	pk, err := pi.p.PackB(nil, transB, n, k, b, ldb)
	if err != nil {
		panic(err)
	}
	if err := pi.p.SgemmPacked(transA, m, alpha, a, lda, pk, beta, c, ldc); err != nil {
		panic(err)
	}
}

// products lists the calls made for one shape.
func products(s Shape, rng *rand.Rand) []product {
	type scal struct{ alpha, beta float32 }
	scalars := []scal{{1, 0}, {1, 1}, {-0.75, 0.5}, {1.5, 0}, {0, 0.5}}
	pads := []int{0, 3}
	if !s.Full {
		scalars = []scal{{1, 0}, {-0.75, 0.5}}
		pads = []int{5}
	}
	var ps []product
	for _, tr := range [4][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		for _, sc := range scalars {
			for _, pad := range pads {
				if !s.Full && tr[0] && tr[1] {
					continue
				}
				ps = append(ps, newProduct(s, tr[0], tr[1], sc.alpha, sc.beta, pad, rng))
			}
		}
	}
	return ps
}

// newProduct fills operands with uniform values in [-1, 1). Padding
// elements (past each row) hold a sentinel that must survive.
func newProduct(s Shape, transA, transB bool, alpha, beta float32, pad int, rng *rand.Rand) product {
	p := product{transA: transA, transB: transB, m: s.M, n: s.N, k: s.K, alpha: alpha, beta: beta}
	ar, ac := s.M, s.K
	if transA {
		ar, ac = s.K, s.M
	}
	br, bc := s.K, s.N
	if transB {
		br, bc = s.N, s.K
	}
	p.a, p.lda = matrix(ar, ac, pad, rng)
	p.b, p.ldb = matrix(br, bc, pad, rng)
	p.c, p.ldc = matrix(s.M, s.N, pad, rng)
	if beta == 0 && pad == 0 {
		p.nanC = true
		for i := range p.c {
			if i%p.ldc < s.N {
				p.c[i] = float32(math.NaN())
			}
		}
	}
	return p
}

// sentinel marks padding; any write to it is a bug.
const sentinel = -12345.5

func matrix(rows, cols, pad int, rng *rand.Rand) ([]float32, int) {
	ld := max(1, cols+pad)
	m := make([]float32, max(0, rows*ld))
	for i := range m {
		if i%ld < cols {
			m[i] = 2*rng.Float32() - 1
		} else {
			m[i] = sentinel
		}
	}
	return m, ld
}

// check runs impl on a copy of p's C and compares every element against
// the float64 reference.
//
// Tolerance: any summation order of k float32 products has error at most
// γ(k)·Σ|a||b| with γ(k) ≈ k·u, u = 2⁻²⁴ (Higham, Accuracy and Stability
// of Numerical Algorithms, §3.1); the alpha and beta scalings add a few
// roundings more. We allow 2·(k+4)·u times the magnitude sum
// |alpha|·Σ|a||b| + |beta|·|c|, plus a denormal floor. That passes any
// correct algorithm (blocked, FMA, tree sums) and fails a dropped or
// doubled term: with values uniform in [-1, 1), one product is ~0.25,
// while the bound for k = 1536 is about 3·10⁻³ times Σ|a||b| ≈ 384.
func check(impl gemm.Impl, p product) error {
	a, b := clone(p.a), clone(p.b)
	c := clone(p.c)
	impl.Sgemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, a, p.lda, b, p.ldb, p.beta, c, p.ldc)
	if !equalBits(a, p.a) || !equalBits(b, p.b) {
		return fmt.Errorf("modified an input operand")
	}
	u := math.Ldexp(1, -24)
	ref := newReference(p)
	for i := range p.m {
		for j := range p.n {
			want, mag := ref.at(i, j)
			got := float64(c[i*p.ldc+j])
			tol := 2*float64(p.k+4)*u*mag + 1e-30
			if math.IsNaN(got) || math.Abs(got-want) > tol {
				return fmt.Errorf("C[%d,%d] = %g, want %g (tolerance %.3g)", i, j, got, want, tol)
			}
		}
	}
	for i, v := range c {
		if i%p.ldc >= p.n && v != sentinel {
			return fmt.Errorf("wrote padding C[%d] (column %d of ldc %d) = %g", i, i%p.ldc, p.ldc, v)
		}
	}
	return nil
}

// reference computes alpha·op(A)·op(B) + beta·C in float64, with op(A)
// rows and op(B) columns copied out contiguous so each element is a plain
// dot product.
type reference struct {
	p      product
	ar, bc [][]float64 // rows of op(A), columns of op(B)
}

func newReference(p product) *reference {
	r := &reference{p: p, ar: make([][]float64, p.m), bc: make([][]float64, p.n)}
	for i := range p.m {
		r.ar[i] = make([]float64, p.k)
		for q := range p.k {
			idx := i*p.lda + q
			if p.transA {
				idx = q*p.lda + i
			}
			r.ar[i][q] = float64(p.a[idx])
		}
	}
	for j := range p.n {
		r.bc[j] = make([]float64, p.k)
		for q := range p.k {
			idx := q*p.ldb + j
			if p.transB {
				idx = j*p.ldb + q
			}
			r.bc[j][q] = float64(p.b[idx])
		}
	}
	return r
}

// at returns element (i, j) and the sum of magnitudes that bounds its
// rounding error.
func (r *reference) at(i, j int) (want, mag float64) {
	var s, sa float64
	b := r.bc[j]
	for q, av := range r.ar[i] {
		v := av * b[q]
		s += v
		sa += math.Abs(v)
	}
	p := r.p
	alpha, beta := float64(p.alpha), float64(p.beta)
	want, mag = alpha*s, math.Abs(alpha)*sa
	if p.beta != 0 {
		cv := float64(p.c[i*p.ldc+j])
		want += beta * cv
		mag += math.Abs(beta * cv)
	}
	return want, mag
}

// runConcurrent runs two different products at once from two goroutines
// (Impl promises safety for concurrent use; attention calls GEMM from
// every worker).
func runConcurrent(t *testing.T, impl gemm.Impl) {
	rng := rand.New(rand.NewPCG(3, 4))
	ps := []product{
		newProduct(Shape{M: 120, N: 150, K: 130}, false, true, 1, 0, 1, rng),
		newProduct(Shape{M: 61, N: 77, K: 300}, true, false, 0.5, 1, 2, rng),
	}
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if err := check(impl, p); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: concurrent %s: %v", impl.Name(), ps[i], err)
		}
	}
}

func clone(s []float32) []float32 { return append([]float32(nil), s...) }

func equalBits(x, y []float32) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return false
		}
	}
	return true
}
