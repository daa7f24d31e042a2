package gemm_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/backend/cpu/parallel"
	"ferry/dtype"
)

// storedTypes are the storage dtypes the expanding packers widen.
var storedTypes = []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2}

// storedCase is one product over a stored weight.
type storedCase struct {
	m, n, k int
	pad     int
	beta    float32
	scale   float32 // 0: unscaled
	nanC    bool
	bias    bool // a bias per column (Stored.WithBias)
}

// storedCases hit the edges of the 6×16 and 14×32 tiles and of the 4×16
// portable one, K blocks of 256 and 512 steps (balanced: 600 is two
// blocks), A blocks of 98 and 144 rows, odd sizes, the parallel threshold
// and the special betas.
var storedCases = []storedCase{
	{m: 1, n: 1, k: 1},
	{m: 3, n: 5, k: 0, beta: 0.5},
	{m: 0, n: 4, k: 3},
	{m: 2, n: 3, k: 4, nanC: true},
	{m: 6, n: 16, k: 16},
	{m: 7, n: 17, k: 19, pad: 3, beta: 1},
	{m: 14, n: 32, k: 33, scale: 0.37},
	{m: 13, n: 31, k: 31, beta: 0.5, scale: 3},
	{m: 29, n: 65, k: 47, pad: 1},
	{m: 100, n: 63, k: 600, beta: 1, scale: 0.01},
	{m: 150, n: 130, k: 120, nanC: true},
	{m: 230, n: 70, k: 1100, pad: 2},
	{m: 40, n: 1000, k: 130, scale: 2},
	{m: 301, n: 48, k: 260, beta: 0.25},
	{m: 3, n: 5, k: 0, beta: 0.5, bias: true},
	{m: 2, n: 3, k: 4, nanC: true, bias: true},
	{m: 13, n: 31, k: 31, beta: 0.5, scale: 3, bias: true},
	{m: 230, n: 70, k: 1100, pad: 2, bias: true},
	{m: 301, n: 48, k: 260, beta: 1, bias: true},
}

// selection is a kernel selection the stored products are checked under:
// what this CPU picks, and what an AVX2-only CPU picks (FERRY_CPU=avx2).
type selection struct {
	name string
	cap  string
}

var selections = []selection{{"native", "avx512"}, {"avx2", "avx2"}}

// eachSelection runs fn once per selection with the Go GEMM that
// selection builds; the AVX2 one is skipped, with a message, where the
// CPU lacks AVX2.
func eachSelection(t *testing.T, pool *parallel.Pool, fn func(t *testing.T, g *gemm.Go)) {
	for _, sel := range selections {
		t.Run(sel.name, func(t *testing.T) {
			restore := gemm.CapISA(sel.cap)
			g := gemm.NewGo(pool)
			expands := gemm.HasExpand()
			restore()
			if sel.cap == "avx2" && g.Kernel() != "avx2" {
				t.Skipf("CPU lacks AVX2+FMA: the avx2 selection runs the %s kernel", g.Kernel())
			}
			if g.Expands(dtype.BF16) != expands {
				t.Errorf("kernel %s: Expands(BF16) = %v, the CPU's expanding packers %v", g.Kernel(), g.Expands(dtype.BF16), expands)
			}
			fn(t, g)
		})
	}
}

func TestSgemmStored(t *testing.T) {
	eachSelection(t, nil, func(t *testing.T, g *gemm.Go) {
		for _, dt := range storedTypes {
			for _, c := range storedCases {
				t.Run(fmt.Sprintf("%s/%s/%dx%dx%d/pad%d/beta%g/scale%g/bias%v", g.Kernel(), dt, c.m, c.n, c.k, c.pad, c.beta, c.scale, c.bias), func(t *testing.T) {
					runStoredCase(t, g, dt, c)
				})
			}
		}
	})
}

// TestSgemmStoredPortable checks the Go widening path (the portable
// kernel: no assembly at all) on a few cases.
func TestSgemmStoredPortable(t *testing.T) {
	g := mustGo(t, nil, "portable")
	if g.Expands(dtype.F16) {
		t.Error("the portable kernel claims to expand at the fp32 rate")
	}
	for _, dt := range storedTypes {
		for _, c := range storedCases[:8] {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", dt, c.m, c.n, c.k), func(t *testing.T) { runStoredCase(t, g, dt, c) })
		}
	}
}

// randStored returns random raw weights of dt: normal values of a few
// binades (fp8 and fp16 subnormals included), never NaN or infinity.
func randStored(rng *rand.Rand, dt dtype.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := range n {
		v := float32(rng.NormFloat64())
		switch dt {
		case dtype.BF16:
			h := dtype.F32ToBF16(v)
			b[2*i], b[2*i+1] = byte(h), byte(h>>8)
		case dtype.F16:
			if i%7 == 0 {
				v *= 1e-5 // subnormal halves
			}
			h := dtype.F32ToF16(v)
			b[2*i], b[2*i+1] = byte(h), byte(h>>8)
		case dtype.F8E4M3:
			x := byte(rng.IntN(256))
			for x&0x7f == 0x7f { // NaN encodings
				x = byte(rng.IntN(256))
			}
			b[i] = x
		case dtype.F8E5M2:
			x := byte(rng.IntN(256))
			for x&0x7c == 0x7c { // infinities and NaNs
				x = byte(rng.IntN(256))
			}
			b[i] = x
		}
	}
	return b
}

func decodeStored(dt dtype.DType, b []byte, i int) float64 {
	switch dt {
	case dtype.BF16:
		return float64(dtype.BF16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8))
	case dtype.F16:
		return float64(dtype.F16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8))
	case dtype.F8E4M3:
		return float64(dtype.F8E4M3ToF32(b[i]))
	}
	return float64(dtype.F8E5M2ToF32(b[i]))
}

func runStoredCase(t *testing.T, g *gemm.Go, dt dtype.DType, c storedCase) {
	rng := rand.New(rand.NewPCG(uint64(c.m*7919+c.n), uint64(c.k)+uint64(dt)))
	lda, ldw, ldc := max(c.k, 1)+c.pad, max(c.k, 1)+c.pad, max(c.n, 1)+c.pad
	a := randSlice(rng, rowsLen(c.m, c.k, lda))
	w := randStored(rng, dt, rowsLen(c.n, c.k, ldw))
	cm := randSlice(rng, rowsLen(c.m, c.n, ldc))
	if c.nanC {
		for i := range cm {
			cm[i] = float32(math.NaN())
		}
	}
	scale := c.scale
	if scale == 0 {
		scale = 1
	}
	var bias []float32
	if c.bias {
		bias = randSlice(rng, c.n)
	}
	want, tol := refStored(c, dt, scale, a, lda, w, ldw, cm, ldc, bias)
	pw, err := g.PackStored(nil, dt, c.n, c.k, w, ldw)
	if err != nil {
		t.Fatal(err)
	}
	if got := pw.Bytes(); got != int64(g.StoredBytes(dt, c.n, c.k)) {
		t.Fatalf("packed %d bytes, StoredBytes says %d", got, g.StoredBytes(dt, c.n, c.k))
	}
	if c.scale != 0 {
		pw = pw.Scaled(c.scale)
	}
	if c.bias {
		if pw, err = pw.WithBias(bias); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.SgemmStored(c.m, a, lda, pw, c.beta, cm, ldc); err != nil {
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

// refStored is scale·A·Wᵀ + beta·C (+ bias) in float64 from W decoded by
// package dtype, with a per-element tolerance: float32 FMA accumulation
// over k terms errs at most k·2⁻²⁴·Σ|a·w|, plus the roundings of the
// scale, of beta·C and of the bias's addition.
func refStored(c storedCase, dt dtype.DType, scale float32, a []float32, lda int, w []byte, ldw int, cm []float32, ldc int, bias []float32) (want, tol []float64) {
	want, tol = make([]float64, c.m*c.n), make([]float64, c.m*c.n)
	u := math.Ldexp(1, -24)
	for i := range c.m {
		for j := range c.n {
			var s, abs float64
			for p := range c.k {
				x := float64(a[i*lda+p]) * decodeStored(dt, w, j*ldw+p)
				s += x
				abs += math.Abs(x)
			}
			s *= float64(scale)
			abs *= math.Abs(float64(scale))
			if c.beta != 0 {
				bc := float64(c.beta) * float64(cm[i*ldc+j])
				s += bc
				abs += math.Abs(bc)
			}
			if bias != nil {
				s += float64(bias[j])
				abs += math.Abs(float64(bias[j]))
			}
			want[i*c.n+j] = s
			tol[i*c.n+j] = float64(c.k+3)*u*abs + 1e-30
		}
	}
	return want, tol
}

// TestStoredMatchesWidenedFP32 checks that a product over a stored weight
// is bit for bit the fp32 GEMM's over the weight widened (the same kernel,
// blocking and summation order): keeping weights 16-bit on the device
// changes no result.
func TestStoredMatchesWidenedFP32(t *testing.T) {
	eachSelection(t, nil, func(t *testing.T, g *gemm.Go) {
		const m, n, k = 75, 96, 700
		rng := rand.New(rand.NewPCG(1, 2))
		a := randSlice(rng, m*k)
		for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E5M2} {
			w := randStored(rng, dt, n*k)
			wide := make([]float32, n*k)
			if err := gemm.Widen(wide, w, dt, 1); err != nil {
				t.Fatal(err)
			}
			pk, err := g.PackB(nil, true, n, k, wide, k)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := g.PackStored(nil, dt, n, k, w, k)
			if err != nil {
				t.Fatal(err)
			}
			want, got := make([]float32, m*n), make([]float32, m*n)
			if err := g.SgemmPacked(false, m, 1, a, k, pk, 0, want, n); err != nil {
				t.Fatal(err)
			}
			if err := g.SgemmStored(m, a, k, ps, 0, got, n); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %s: C[%d] = %g, fp32 over the widened weight %g", g.Kernel(), dt, i, got[i], want[i])
				}
			}
		}
	})
}

func TestStoredRejects(t *testing.T) {
	g := gemm.DefaultGo()
	w := make([]byte, 2*8*8)
	if _, err := g.PackStored(nil, dtype.F32, 8, 8, w, 8); err == nil {
		t.Error("PackStored accepted F32")
	}
	if _, err := g.PackStored(nil, dtype.BF16, 8, 8, w[:10], 8); err == nil {
		t.Error("PackStored accepted a short weight")
	}
	if _, err := g.PackStored(make([]byte, 3), dtype.BF16, 8, 8, w, 8); err == nil {
		t.Error("PackStored accepted a short dst")
	}
	if _, err := g.StoredView(dtype.F16, make([]byte, 5), 8, 8); err == nil {
		t.Error("StoredView accepted the wrong size")
	}
	ps, err := g.PackStored(nil, dtype.BF16, 8, 8, w, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SgemmStored(2, make([]float32, 15), 8, ps, 0, make([]float32, 16), 8); err == nil {
		t.Error("SgemmStored accepted a short A")
	}
	if err := g.SgemmStored(2, make([]float32, 16), 8, nil, 0, make([]float32, 16), 8); err == nil {
		t.Error("SgemmStored accepted a nil weight")
	}
	other := mustGo(t, nil, "portable")
	if other.PanelWidth() != g.PanelWidth() {
		if err := other.SgemmStored(2, make([]float32, 16), 8, ps, 0, make([]float32, 16), 8); err == nil {
			t.Error("a GEMM with another panel width accepted the weight")
		}
	}
	if err := gemm.Widen(make([]float32, 4), make([]byte, 16), dtype.F32, 1); err == nil {
		t.Error("Widen accepted F32")
	}
}

// TestGoBF16Selections runs the bf16 GEMM's cases under each kernel
// selection: with FERRY_CPU=avx2's a CPU without AVX512-BF16 gets the
// expand kernel (rounded activations, widened weights, fp32 kernel), not
// the portable scalar loop.
func TestGoBF16Selections(t *testing.T) {
	for _, sel := range selections {
		t.Run(sel.name, func(t *testing.T) {
			restore := gemm.CapISA(sel.cap)
			g := gemm.NewGoBF16(nil)
			expands, native := gemm.HasExpand(), gemm.HasBF16Kernel()
			restore()
			switch {
			case sel.cap == "avx2" && !expands:
				t.Skipf("CPU lacks AVX2+FMA+F16C: the avx2 selection runs the %s bf16 kernel", g.Kernel())
			case sel.cap == "avx2" && (g.Kernel() != "expand" || native):
				t.Fatalf("avx2 selection: bf16 kernel %s (HasBF16Kernel %v), want expand without VDPBF16PS", g.Kernel(), native)
			}
			for _, c := range bf16Cases {
				t.Run(fmt.Sprintf("%s/%dx%dx%d/pad%d/beta%g", g.Kernel(), c.m, c.n, c.k, c.pad, c.beta), func(t *testing.T) {
					runBF16Case(t, g, c)
				})
			}
		})
	}
}
