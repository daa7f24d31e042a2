package gemm_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/dtype"
)

// bf16Case is one product: sizes, padding of the leading dimensions, beta,
// and an offset of W by one element (odd address: the scalar packer).
type bf16Case struct {
	m, n, k   int
	pad       int
	beta      float32
	shiftW    bool
	nanC      bool
	wantError bool
}

// bf16Cases hit the edges of the 14×32 and 4×16 tiles, K blocks of 256 and
// 128 pairs, N blocks of 4096 and 1024, odd K (half-empty last pair), the
// parallel threshold and the special betas.
var bf16Cases = []bf16Case{
	{m: 1, n: 1, k: 1},
	{m: 3, n: 5, k: 0, beta: 0.5},
	{m: 0, n: 4, k: 3},
	{m: 4, n: 0, k: 3},
	{m: 2, n: 3, k: 4, nanC: true},
	{m: 14, n: 32, k: 32},
	{m: 15, n: 33, k: 31, pad: 3, beta: 1},
	{m: 13, n: 31, k: 33, beta: 0.5},
	{m: 29, n: 65, k: 47, pad: 1},
	{m: 5, n: 17, k: 64, shiftW: true},
	{m: 100, n: 63, k: 600, beta: 1},
	{m: 150, n: 130, k: 120, nanC: true},
	{m: 230, n: 70, k: 1100, pad: 2},
	{m: 40, n: 1000, k: 130},
	{m: 3, n: 4200, k: 34},
	{m: 200, n: 96, k: 1536, beta: 1},
	{m: 171, n: 40, k: 37, shiftW: true, beta: 0.25},
	{m: 60, n: 600, k: 300, beta: 1}, // few rows, many columns: split by columns
}

// eachBF16Case runs fn as a subtest for every bf16 kernel and case.
func eachBF16Case(t *testing.T, fn func(t *testing.T, g *gemm.GoBF16, c bf16Case)) {
	for _, name := range gemm.BF16Kernels() {
		g, err := gemm.NewGoBF16Kernel(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range bf16Cases {
			t.Run(fmt.Sprintf("%s/%dx%dx%d/pad%d/beta%g/shift%v", name, c.m, c.n, c.k, c.pad, c.beta, c.shiftW), func(t *testing.T) {
				fn(t, g, c)
			})
		}
	}
}

func TestGoBF16(t *testing.T) {
	eachBF16Case(t, func(t *testing.T, g *gemm.GoBF16, c bf16Case) { runBF16Case(t, g, c) })
}

// TestGoBF16Packed runs the same cases with the weight packed once
// (PackWeights) and multiplied by GemmBF16Packed: the same sums in the same
// order, so the results must equal the unpacked product's bit for bit.
func TestGoBF16Packed(t *testing.T) {
	eachBF16Case(t, func(t *testing.T, g *gemm.GoBF16, c bf16Case) {
		rng := rand.New(rand.NewPCG(uint64(c.m), uint64(c.n*31+c.k)))
		lda, ldw, ldc := max(c.k, 1)+c.pad, max(c.k, 1)+c.pad, max(c.n, 1)+c.pad
		a := randSlice(rng, rowsLen(c.m, c.k, lda))
		w := make([]uint16, rowsLen(c.n, c.k, ldw)+1)
		for i := range w {
			w[i] = dtype.F32ToBF16(float32(rng.NormFloat64()))
		}
		if c.shiftW {
			w = w[1:]
		}
		want := randSlice(rng, rowsLen(c.m, c.n, ldc))
		got := append([]float32(nil), want...)
		if err := g.GemmBF16(c.m, c.n, c.k, a, lda, w, ldw, c.beta, want, ldc); err != nil {
			t.Fatal(err)
		}
		pw, err := g.PackWeights(nil, c.n, c.k, w, ldw)
		if err != nil {
			t.Fatal(err)
		}
		if pw.Bytes() != 4*int64(g.PackedWords(c.n, c.k)) || pw.N() != c.n || pw.K() != c.k {
			t.Fatalf("packed %d×%d: %d bytes, N %d, K %d", c.n, c.k, pw.Bytes(), pw.N(), pw.K())
		}
		if err := g.GemmBF16Packed(c.m, a, lda, pw, c.beta, got, ldc); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("C[%d] = %g packed, %g unpacked", i, got[i], want[i])
			}
		}
	})
}

// TestGoBF16PackedRejects: a weight packed for another kernel, a nil
// weight, and operands too short are errors, not panics.
func TestGoBF16PackedRejects(t *testing.T) {
	kernels := gemm.BF16Kernels()
	g, _ := gemm.NewGoBF16Kernel(nil, kernels[0])
	w := make([]uint16, 64*40)
	pw, err := g.PackWeights(nil, 64, 40, w, 40)
	if err != nil {
		t.Fatal(err)
	}
	a, c := make([]float32, 3*40), make([]float32, 3*64)
	if err := g.GemmBF16Packed(3, a, 40, nil, 0, c, 64); err == nil {
		t.Error("nil packed weight accepted")
	}
	if err := g.GemmBF16Packed(3, a[:100], 40, pw, 0, c, 64); err == nil {
		t.Error("short A accepted")
	}
	if err := g.GemmBF16Packed(3, a, 40, pw, 0, c[:100], 64); err == nil {
		t.Error("short C accepted")
	}
	if _, err := g.PackWeights(make([]uint32, 10), 64, 40, w, 40); err == nil {
		t.Error("short dst accepted")
	}
	if len(kernels) > 1 {
		other, _ := gemm.NewGoBF16Kernel(nil, kernels[len(kernels)-1])
		if err := other.GemmBF16Packed(3, a, 40, pw, 0, c, 64); err == nil {
			t.Errorf("weight packed for %s accepted by %s", kernels[0], kernels[len(kernels)-1])
		}
	}
}

func runBF16Case(t *testing.T, g gemm.BF16Impl, c bf16Case) {
	rng := rand.New(rand.NewPCG(uint64(c.m*7919+c.n), uint64(c.k)))
	lda, ldw, ldc := max(c.k, 1)+c.pad, max(c.k, 1)+c.pad, max(c.n, 1)+c.pad
	a := randSlice(rng, rowsLen(c.m, c.k, lda))
	wf := randSlice(rng, rowsLen(c.n, c.k, ldw)+1)
	w := make([]uint16, len(wf))
	for i, v := range wf {
		w[i] = dtype.F32ToBF16(v)
	}
	if c.shiftW {
		w = w[1:]
	}
	cm := randSlice(rng, rowsLen(c.m, c.n, ldc))
	if c.nanC {
		for i := range cm {
			cm[i] = float32(math.NaN())
		}
	}
	want, tol := refBF16(c, a, lda, w, ldw, cm, ldc)
	if err := g.GemmBF16(c.m, c.n, c.k, a, lda, w, ldw, c.beta, cm, ldc); err != nil {
		t.Fatal(err)
	}
	for i := range c.m {
		for j := range c.n {
			got, ref := float64(cm[i*ldc+j]), want[i*c.n+j]
			if math.IsNaN(got) || math.Abs(got-ref) > tol[i*c.n+j] {
				t.Fatalf("C[%d,%d] = %g, want %g ± %g", i, j, got, ref, tol[i*c.n+j])
			}
		}
	}
}

// refBF16 computes the product in float64 from bf16-rounded A and W (the
// inputs the GEMM multiplies) and a per-element tolerance: the bf16
// products are exact in float32 (8-bit × 8-bit significands), so the only
// error is float32 summation of k terms, at most k·2⁻²⁴·Σ|a·w| (plus the
// beta·C term's own rounding).
func refBF16(c bf16Case, a []float32, lda int, w []uint16, ldw int, cm []float32, ldc int) (want, tol []float64) {
	want, tol = make([]float64, c.m*c.n), make([]float64, c.m*c.n)
	u := math.Ldexp(1, -24)
	for i := range c.m {
		for j := range c.n {
			var s, abs float64
			for p := range c.k {
				x := float64(dtype.BF16ToF32(dtype.F32ToBF16(a[i*lda+p])))
				y := float64(dtype.BF16ToF32(w[j*ldw+p]))
				s += x * y
				abs += math.Abs(x * y)
			}
			if c.beta != 0 {
				bc := float64(c.beta) * float64(cm[i*ldc+j])
				s += bc
				abs += math.Abs(bc)
			}
			want[i*c.n+j] = s
			tol[i*c.n+j] = float64(c.k+2)*u*abs + 1e-30
		}
	}
	return want, tol
}

func rowsLen(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func TestGoBF16RejectsBadArguments(t *testing.T) {
	g := gemm.DefaultBF16()
	cases := []struct {
		name          string
		m, n, k       int
		la, lw, lc    int
		lda, ldw, ldc int
	}{
		{"negative m", -1, 2, 2, 4, 4, 4, 2, 2, 2},
		{"short A", 2, 2, 2, 3, 4, 4, 2, 2, 2},
		{"short W", 2, 2, 2, 4, 3, 4, 2, 2, 2},
		{"short C", 2, 2, 2, 4, 4, 3, 2, 2, 2},
		{"small lda", 2, 2, 2, 4, 4, 4, 1, 2, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := g.GemmBF16(c.m, c.n, c.k, make([]float32, c.la), c.lda, make([]uint16, c.lw), c.ldw, 0, make([]float32, c.lc), c.ldc)
			if err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestBF16KernelsAgree checks the assembly kernel against the portable one
// bit for bit where rounding cannot differ: integer-valued bf16 inputs
// whose sums stay exact in float32.
func TestBF16KernelsAgree(t *testing.T) {
	names := gemm.BF16Kernels()
	if len(names) < 2 {
		t.Logf("only %v here: nothing to compare", names)
		return
	}
	m, n, k := 37, 70, 301
	rng := rand.New(rand.NewPCG(1, 2))
	a := make([]float32, m*k)
	w := make([]uint16, n*k)
	for i := range a {
		a[i] = float32(rng.IntN(7) - 3)
	}
	for i := range w {
		w[i] = dtype.F32ToBF16(float32(rng.IntN(9) - 4))
	}
	var outs [][]float32
	for _, name := range names {
		g, err := gemm.NewGoBF16Kernel(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		c := make([]float32, m*n)
		if err := g.GemmBF16(m, n, k, a, k, w, k, 0, c, n); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, c)
	}
	for i := range outs[0] {
		if outs[0][i] != outs[1][i] {
			t.Fatalf("element %d: %s gives %g, %s gives %g", i, names[0], outs[0][i], names[1], outs[1][i])
		}
	}
}
