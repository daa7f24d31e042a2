package gemm_test

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/backend/cpu/gemm/gemmtest"
	"ferry/backend/cpu/parallel"
)

// TestConformance runs the shared suite on every implementation present:
// the naive reference, the Go GEMM with each kernel this CPU runs (the
// portable one included) on the default pool and on an odd 3-worker pool,
// its prepacked path, and OpenBLAS when it loads.
func TestConformance(t *testing.T) {
	t.Run("naive", func(t *testing.T) { gemmtest.Run(t, gemm.Naive{}) })
	pool3 := parallel.New(3)
	for _, name := range gemm.GoKernels() {
		g := mustGo(t, nil, name)
		t.Run("go-"+name, func(t *testing.T) { gemmtest.Run(t, g) })
		t.Run("go-"+name+"-packed", func(t *testing.T) { gemmtest.RunPacked(t, g) })
		t.Run("go-"+name+"-3workers", func(t *testing.T) { gemmtest.Run(t, mustGo(t, pool3, name)) })
	}
	t.Run("openblas", func(t *testing.T) {
		o, err := gemm.OpenBLAS()
		if err != nil {
			t.Skipf("OpenBLAS not installed, its conformance is not checked: %v", err)
		}
		gemmtest.Run(t, o)
	})
}

// TestNestedInPool: attention calls GEMM from inside pool workers; a
// product large enough to go parallel must then neither deadlock nor
// share buffers between the concurrent calls.
func TestNestedInPool(t *testing.T) {
	pool := parallel.New(2)
	g := gemm.NewGo(pool)
	const m, n, k = 96, 160, 300 // 9.2 Mflop: above the parallel threshold
	rngA, rngB := make([]float32, m*k), make([]float32, n*k)
	for i := range rngA {
		rngA[i] = float32(i%7) - 3
	}
	for i := range rngB {
		rngB[i] = float32(i%5) - 2
	}
	want := make([]float32, m*n)
	gemm.Naive{}.Sgemm(false, true, m, n, k, 1, rngA, k, rngB, k, 0, want, n)
	const calls = 6
	got := make([][]float32, calls)
	pool.Run(calls, func(i int) {
		got[i] = make([]float32, m*n)
		g.Sgemm(false, true, m, n, k, 1, rngA, k, rngB, k, 0, got[i], n)
	})
	for i := range got {
		for j := range want {
			if got[i][j] != want[j] { // small integers: every order of summation is exact
				t.Fatalf("call %d: C[%d] = %g, want %g", i, j, got[i][j], want[j])
			}
		}
	}
}

func mustGo(t testing.TB, pool *parallel.Pool, kernel string) *gemm.Go {
	t.Helper()
	g, err := gemm.NewGoKernel(pool, kernel)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGoKernelsEndWithPortable(t *testing.T) {
	ks := gemm.GoKernels()
	if len(ks) == 0 || ks[len(ks)-1] != "portable" {
		t.Fatalf("GoKernels() = %v, want the portable kernel last", ks)
	}
	if g := gemm.NewGo(nil); g.Kernel() != ks[0] {
		t.Errorf("NewGo picked %q, want the first kernel %q", g.Kernel(), ks[0])
	}
	if runtime.GOARCH == "amd64" && !contains(ks, "avx2") && !contains(ks, "avx512") {
		t.Logf("no assembly kernel on this amd64 CPU: %v", ks)
	}
	if _, err := gemm.NewGoKernel(nil, "vax"); err == nil {
		t.Error("NewGoKernel accepted an unknown kernel")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCheck(t *testing.T) {
	buf := func(n int) []float32 { return make([]float32, n) }
	tests := []struct {
		name           string
		transA, transB bool
		m, n, k        int
		a              []float32
		lda            int
		b              []float32
		ldb            int
		c              []float32
		ldc            int
		wantErr        string // "" means valid
	}{
		{"valid", false, false, 2, 3, 4, buf(8), 4, buf(12), 3, buf(6), 3, ""},
		{"valid transposed", true, true, 2, 3, 4, buf(8), 2, buf(12), 4, buf(6), 3, ""},
		{"valid padded", false, true, 2, 3, 4, buf(9), 5, buf(14), 5, buf(7), 4, ""},
		{"k zero", false, false, 2, 3, 0, nil, 1, nil, 3, buf(6), 3, ""},
		{"negative", false, false, -1, 3, 4, nil, 4, nil, 3, nil, 3, "negative size"},
		{"short A", false, false, 2, 3, 4, buf(7), 4, buf(12), 3, buf(6), 3, "A is 2×4"},
		{"short B transposed", false, true, 2, 3, 4, buf(8), 4, buf(11), 4, buf(6), 3, "B is 3×4"},
		{"small lda", false, false, 2, 3, 4, buf(8), 3, buf(12), 3, buf(6), 3, "leading dimension is 3"},
		{"small ldc", false, false, 2, 3, 4, buf(8), 4, buf(12), 3, buf(6), 2, "C is 2×3"},
		{"short C", false, false, 2, 3, 4, buf(8), 4, buf(12), 3, buf(5), 3, "needs 6 elements, has 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := gemm.Check(tt.transA, tt.transB, tt.m, tt.n, tt.k, tt.a, tt.lda, tt.b, tt.ldb, tt.c, tt.ldc)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestSgemmPanicsWithCheckError: bad arguments stop before any access,
// with Check's message (Impl has no error result).
func TestSgemmPanicsWithCheckError(t *testing.T) {
	impls := []gemm.Impl{gemm.NewGo(nil)}
	if o, err := gemm.OpenBLAS(); err == nil {
		impls = append(impls, o)
	}
	for _, impl := range impls {
		t.Run(impl.Name(), func(t *testing.T) {
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok || !strings.Contains(err.Error(), "gemm: A is 2×4") {
					t.Fatalf("recovered %v, want Check's error about A", r)
				}
			}()
			impl.Sgemm(false, false, 2, 3, 4, 1, make([]float32, 7), 4, make([]float32, 12), 3, 0, make([]float32, 6), 3)
		})
	}
}

func TestPackedSizeAndErrors(t *testing.T) {
	g := gemm.NewGo(nil)
	nr := g.PackedLen(1, 1) // one panel of one k step
	tests := []struct{ n, k, want int }{
		{0, 5, 0}, {5, 0, 0}, {1, 1, nr}, {nr, 7, 7 * nr}, {nr + 1, 3, 6 * nr}, {1536, 1536, 1536 * 1536},
	}
	for _, tt := range tests {
		if got := g.PackedLen(tt.n, tt.k); got != tt.want {
			t.Errorf("PackedLen(%d, %d) = %d, want %d", tt.n, tt.k, got, tt.want)
		}
	}
	b := make([]float32, 40*24)
	if _, err := g.PackB(make([]float32, g.PackedLen(40, 24)-1), true, 40, 24, b, 24); err == nil {
		t.Error("PackB accepted a short dst")
	}
	if _, err := g.PackB(nil, true, 40, 24, b[:100], 24); err == nil {
		t.Error("PackB accepted a short B")
	}
	pk, err := g.PackB(nil, true, 40, 24, b, 24)
	if err != nil {
		t.Fatal(err)
	}
	if pk.N() != 40 || pk.K() != 24 || pk.Bytes() != 4*int64(g.PackedLen(40, 24)) {
		t.Errorf("packed N=%d K=%d Bytes=%d, want 40, 24, %d", pk.N(), pk.K(), pk.Bytes(), 4*g.PackedLen(40, 24))
	}
	c := make([]float32, 3*40)
	if err := g.SgemmPacked(false, 3, 1, make([]float32, 3*23), 24, pk, 0, c, 40); err == nil {
		t.Error("SgemmPacked accepted a short A")
	}
	if err := g.SgemmPacked(false, 3, 1, make([]float32, 3*24), 24, nil, 0, c, 40); err == nil {
		t.Error("SgemmPacked accepted a nil B")
	}
	// A B packed for one kernel must not be read by another with other panels.
	for _, name := range gemm.GoKernels() {
		other := mustGo(t, nil, name)
		if other.PackedLen(1, 1) == nr {
			continue
		}
		if err := other.SgemmPacked(false, 3, 1, make([]float32, 3*24), 24, pk, 0, c, 40); err == nil {
			t.Errorf("kernel %s accepted B packed for %s", name, g.Kernel())
		}
	}
}

// TestGoReusesBuffers: after a warm-up call, products allocate no packing
// buffers (the pool's own bookkeeping is a few small objects).
func TestGoReusesBuffers(t *testing.T) {
	g := gemm.NewGo(parallel.New(2))
	const m, n, k = 300, 256, 700
	a, b, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	run := func() { g.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n) }
	run()
	held := g.HeldBytes()
	if held < 4*256*300 { // the shared B block holds at least 300 of the 700 K steps
		t.Errorf("HeldBytes() = %d after a 300×256×700 product, want the packing buffers counted", held)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 20
	for range calls {
		run()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	if perCall > 2048 {
		t.Errorf("%d bytes allocated per call, want the packing buffers reused (< 2 KiB)", perCall)
	}
	if g.HeldBytes() != held {
		t.Errorf("HeldBytes() grew from %d to %d over repeated equal products", held, g.HeldBytes())
	}
	small := func() { g.Sgemm(false, false, 5, 7, 9, 1, a, 9, b, 7, 0, c, 7) }
	small()
	if allocs := testing.AllocsPerRun(50, small); allocs != 0 {
		t.Errorf("small single-worker product: %v allocations per call, want 0", allocs)
	}
}

func TestSelect(t *testing.T) {
	_, blasErr := gemm.OpenBLAS()
	tests := []struct {
		env, want string
		warning   string // what EnvWarning says ("": nothing)
	}{
		{"go", "go", ""}, {"naive", "naive", ""}, {"", "go", ""},
		{"openblas", "go", "FERRY_GEMM=openblas make deps"}, {"bogus", "go", `unknown implementation "bogus"`},
	}
	// The default is go with the AVX-512 or AVX2 kernel, else OpenBLAS
	// when it loads; an unloadable or unknown name falls back to the
	// default, and EnvWarning says so.
	if blasErr == nil {
		tests[3].want, tests[3].warning = "openblas", ""
		if k := gemm.DefaultGo().Kernel(); k != "avx512" && k != "avx2" {
			tests[2].want, tests[4].want = "openblas", "openblas"
		}
	}
	for _, tt := range tests {
		t.Run("FERRY_GEMM="+tt.env, func(t *testing.T) {
			t.Setenv("FERRY_GEMM", tt.env)
			if got := gemm.Best().Name(); got != tt.want {
				t.Errorf("Best() = %s, want %s", got, tt.want)
			}
			w := gemm.EnvWarning()
			if tt.warning == "" && w != "" || !strings.Contains(w, tt.warning) || tt.warning != "" && !strings.Contains(w, "running "+tt.want+" instead") {
				t.Errorf("EnvWarning() = %q, want one line with %q naming the fallback %s", w, tt.warning, tt.want)
			}
		})
	}
	if _, err := gemm.Select("bogus"); err == nil {
		t.Error("Select accepted an unknown name")
	}
	if _, err := gemm.Select("openblas"); (err == nil) != (blasErr == nil) {
		t.Errorf("Select(openblas) error %v disagrees with OpenBLAS() error %v", err, blasErr)
	}
	names := []string{}
	for _, impl := range gemm.Available() {
		names = append(names, impl.Name())
	}
	want := "go,naive"
	if blasErr == nil {
		want = "openblas,go,naive"
	}
	if strings.Join(names, ",") != want {
		t.Errorf("Available() = %v, want %s", names, want)
	}
}

// TestOpenBLASCoreType checks that the core type chosen before loading
// actually reached OpenBLAS (it reads OPENBLAS_CORETYPE with libc getenv,
// which os.Setenv alone may not reach with CGO_ENABLED=0).
func TestOpenBLASCoreType(t *testing.T) {
	info, err := gemm.OpenBLASInfo()
	if err != nil {
		t.Skipf("OpenBLAS not installed, core type selection not checked: %v", err)
	}
	t.Logf("openblas %s: core %q (set %q: %s), %d threads, config %q",
		info.Path, info.CoreName, info.CoreType, info.CoreTypeReason, info.Threads, info.Config)
	if info.CoreType == "" {
		t.Skipf("no core type chosen here (%s); nothing to verify", info.CoreTypeReason)
	}
	if !strings.EqualFold(info.CoreName, info.CoreType) {
		t.Errorf("OpenBLAS runs core %q, ferry set OPENBLAS_CORETYPE=%q", info.CoreName, info.CoreType)
	}
	if info.Threads != parallel.Default().Workers() {
		t.Errorf("OpenBLAS threads %d, want the pool's %d", info.Threads, parallel.Default().Workers())
	}
}

// TestLargeKAccuracy: a DiT-sized inner dimension stays within a few ulps
// of the float64 result relative to the magnitude sum (the suite's bound
// allows k ulps; blocked FMA sums do far better, and a regression to
// e.g. a dropped K block would show here at once).
func TestLargeKAccuracy(t *testing.T) {
	const m, n, k = 3, 40, 8960
	a, b := make([]float32, m*k), make([]float32, n*k)
	for i := range a {
		a[i] = float32(math.Sin(float64(i)))
	}
	for i := range b {
		b[i] = float32(math.Cos(float64(i) * 0.7))
	}
	for _, impl := range gemm.Available() {
		c := make([]float32, m*n)
		impl.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
		worst := 0.0
		for i := range m {
			for j := range n {
				var s, mag float64
				for p := range k {
					v := float64(a[i*k+p]) * float64(b[j*k+p])
					s += v
					mag += math.Abs(v)
				}
				worst = max(worst, math.Abs(float64(c[i*n+j])-s)/mag)
			}
		}
		if ulps := worst / math.Ldexp(1, -24); ulps > 64 {
			t.Errorf("%s: error %.1f ulps of the magnitude sum, want ≤ 64", impl.Name(), ulps)
		} else {
			t.Logf("%s: worst error %.2f ulps of the magnitude sum", impl.Name(), ulps)
		}
	}
}
