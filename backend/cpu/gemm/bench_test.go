package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"ferry/backend/cpu/gemm"
	"ferry/backend/cpu/gemm/gemmtest"
	"ferry/backend/cpu/parallel"
	"ferry/dtype"
)

// DiT shapes: x [M, K] times Linear weights [N, K] (transB). M runs from
// a short clip's tokens to a 480p one's; K and N are Wan2.1-1.3B's model
// and FFN widths (1536, 8960), then the 14B's (5120, 13824). The 14B
// shapes are left out under -short.
var (
	benchMs     = []int{256, 1280, 4096, 8192}
	benchKNs13B = [][2]int{{1536, 1536}, {1536, 8960}, {8960, 1536}}
	benchKNs14B = [][2]int{{5120, 5120}, {5120, 13824}, {13824, 5120}}
)

// benchShapes lists the (m, k, n) shapes of the sweeps, 1.3B widths first.
func benchShapes() [][3]int {
	kns := benchKNs13B
	if !testing.Short() {
		kns = append(slices.Clone(kns), benchKNs14B...)
	}
	var shapes [][3]int
	for _, kn := range kns {
		for _, m := range benchMs {
			shapes = append(shapes, [3]int{m, kn[0], kn[1]})
		}
	}
	return shapes
}

// The operands of every benchmark are views of one set of buffers, grown
// (allocated and touched) only when a larger shape asks for it, so no
// benchmark pays for fresh pages or a garbage collection of the previous
// one's.
var (
	benchMu        sync.Mutex
	benchRNG       = rand.New(rand.NewPCG(5, 6))
	benchA, benchB []float32
	benchC         []float32
)

type benchOperands struct {
	m, n, k int
	a, b, c []float32
}

func newBenchOperands(m, n, k int) *benchOperands {
	benchMu.Lock()
	defer benchMu.Unlock()
	grow := func(s *[]float32, n int) {
		if len(*s) >= n {
			return
		}
		*s = nil // let the old buffer go before the new one is touched
		v := make([]float32, n)
		for i := range v {
			v[i] = benchRNG.Float32() - 0.5
		}
		*s = v
	}
	grow(&benchA, m*k)
	grow(&benchB, n*k)
	grow(&benchC, m*n)
	return &benchOperands{m: m, n: n, k: k, a: benchA[:m*k], b: benchB[:n*k], c: benchC[:m*n]}
}

// measure runs body b.N times and reports GFLOP/s of wall time and, as
// cpu-GFLOP/s, per second of CPU time used (robust to other processes
// taking the cores; with w workers it reads as the per-core rate).
func measure(b *testing.B, m, n, k int, body func()) {
	body() // warm up: workspace growth and first-touch page faults
	c0 := cpuSeconds()
	for b.Loop() {
		body()
	}
	cpu := cpuSeconds() - c0
	flops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu > 0 {
		b.ReportMetric(flops/cpu/1e9, "cpu-GFLOP/s")
	}
}

// BenchmarkSgemm compares the implementations at DiT shapes, interleaved
// (shape outer, implementation inner) so machine noise hits all alike.
// "go-packed" is the Go GEMM with the weights prepacked once.
func BenchmarkSgemm(b *testing.B) {
	impls := []gemm.Impl{}
	if o, err := gemm.OpenBLAS(); err == nil {
		impls = append(impls, o)
	} else {
		b.Logf("OpenBLAS not installed, not benchmarked: %v", err)
	}
	g := gemm.DefaultGo()
	impls = append(impls, g)
	for _, shape := range benchShapes() {
		m, k, n := shape[0], shape[1], shape[2]
		ops := newBenchOperands(m, n, k)
		name := fmt.Sprintf("M=%d/K=%d/N=%d", m, k, n)
		for _, impl := range impls {
			b.Run(name+"/"+impl.Name(), func(b *testing.B) {
				measure(b, m, n, k, func() {
					impl.Sgemm(false, true, m, n, k, 1, ops.a, k, ops.b, k, 0, ops.c, n)
				})
			})
			gemm.Settle(impl)
		}
		b.Run(name+"/go-bf16", func(b *testing.B) {
			benchBF16(b, gemm.DefaultBF16(), ops)
		})
		b.Run(name+"/go-bf16-packed", func(b *testing.B) {
			benchBF16Packed(b, gemm.DefaultBF16(), ops)
		})
		b.Run(name+"/go-packed", func(b *testing.B) {
			measure(b, m, n, k, packedSide(b, "", g, ops).Run)
		})
	}
}

// benchBF16 times the bf16 GEMM on the operands with B rounded to bf16
// once (the weights as they sit on the device).
func benchBF16(b *testing.B, g gemm.BF16Impl, ops *benchOperands) {
	w := make([]uint16, len(ops.b))
	for i, v := range ops.b {
		w[i] = dtype.F32ToBF16(v)
	}
	m, n, k := ops.m, ops.n, ops.k
	measure(b, m, n, k, func() {
		if err := g.GemmBF16(m, n, k, ops.a, k, w, k, 0, ops.c, n); err != nil {
			b.Fatal(err)
		}
	})
}

// benchBF16Packed times the bf16 GEMM with the weights packed once (as
// the executor packs them when it moves them to the device).
func benchBF16Packed(b *testing.B, g *gemm.GoBF16, ops *benchOperands) {
	measure(b, ops.m, ops.n, ops.k, packedBF16Side(b, "", g, ops).Run)
}

// BenchmarkGoWorkers measures how the Go GEMMs (fp32, bf16, bf16 with the
// weights packed once) scale from one worker to two (the goal is ≥ 1.8×). On a machine shared with other
// work compare GFLOP/s only between runs that had the cores to themselves;
// cpu-GFLOP/s staying flat from 1 to 2 workers says the split itself
// costs nothing.
func BenchmarkGoWorkers(b *testing.B) {
	pools := []*parallel.Pool{parallel.New(1), parallel.New(2)}
	for _, m := range benchMs {
		k, n := 1536, 1536
		ops := newBenchOperands(m, n, k)
		for _, pool := range pools {
			g := gemm.NewGo(pool)
			b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/go/workers=%d", m, k, n, pool.Workers()), func(b *testing.B) {
				measure(b, m, n, k, func() {
					g.Sgemm(false, true, m, n, k, 1, ops.a, k, ops.b, k, 0, ops.c, n)
				})
			})
		}
		for _, pool := range pools {
			b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/go-bf16/workers=%d", m, k, n, pool.Workers()), func(b *testing.B) {
				benchBF16(b, gemm.NewGoBF16(pool), ops)
			})
		}
		for _, pool := range pools {
			b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/go-bf16-packed/workers=%d", m, k, n, pool.Workers()), func(b *testing.B) {
				benchBF16Packed(b, gemm.NewGoBF16(pool), ops)
			})
		}
	}
}

// BenchmarkSmall times attention-tile sized products, where call overhead
// (purego, packing, dispatch) matters more than the kernel.
func BenchmarkSmall(b *testing.B) {
	impls := []gemm.Impl{gemm.DefaultGo()}
	if o, err := gemm.OpenBLAS(); err == nil {
		impls = append(impls, o)
	}
	for _, s := range [][3]int{{64, 64, 64}, {16, 128, 64}, {1, 256, 256}} {
		m, n, k := s[0], s[1], s[2]
		ops := newBenchOperands(m, n, k)
		for _, impl := range impls {
			b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/%s", m, k, n, impl.Name()), func(b *testing.B) {
				measure(b, m, n, k, func() {
					impl.Sgemm(false, true, m, n, k, 1, ops.a, k, ops.b, k, 0, ops.c, n)
				})
			})
			gemm.Settle(impl)
		}
	}
}

// BenchmarkGoKernels compares the Go GEMM's micro-kernels at one DiT shape
// (the portable kernel is the fallback off amd64).
func BenchmarkGoKernels(b *testing.B) {
	const m, k, n = 1280, 1536, 1536
	ops := newBenchOperands(m, n, k)
	for _, name := range gemm.GoKernels() {
		g, err := gemm.NewGoKernel(nil, name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/%s", m, k, n, name), func(b *testing.B) {
			measure(b, m, n, k, func() {
				g.Sgemm(false, true, m, n, k, 1, ops.a, k, ops.b, k, 0, ops.c, n)
			})
		})
	}
}

// BenchmarkPaired takes the ratios the CPU kernel goals are stated in,
// each timed pair by pair on one shape (gemmtest.Paired): the Go GEMM over
// packed weights against OpenBLAS (and its rate over the FMA peak of its
// kernel's instruction set, gemm.FMAPeak, measured once at the start, as
// of-peak), bf16 against fp32 (both over packed weights), and two workers
// against one (both GEMMs, packed weights).
func BenchmarkPaired(b *testing.B) {
	g, bf := gemm.DefaultGo(), gemm.DefaultBF16()
	blas, blasErr := gemm.OpenBLAS()
	if blasErr != nil {
		b.Logf("OpenBLAS not installed, not compared: %v", blasErr)
	}
	peak, isa := gemm.FMAPeak(parallel.Default().Workers(), 200*time.Millisecond)
	b.Logf("FMA peak (%s, %d threads): %.1f GFLOP/s", isa, parallel.Default().Workers(), peak)
	for _, shape := range benchShapes() {
		m, k, n := shape[0], shape[1], shape[2]
		ops := newBenchOperands(m, n, k)
		name := fmt.Sprintf("M=%d/K=%d/N=%d", m, k, n)
		fp32 := packedSide(b, "go-packed", g, ops)
		if blasErr == nil {
			ref := gemmtest.Side{Name: "openblas", Flops: fp32.Flops, After: func() { gemm.Settle(blas) }, Run: func() {
				blas.Sgemm(false, true, m, n, k, 1, ops.a, k, ops.b, k, 0, ops.c, n)
			}}
			b.Run("go-packed-vs-openblas/"+name, func(b *testing.B) {
				if rate, _ := gemmtest.Paired(b, fp32, ref); peak > 0 {
					b.ReportMetric(rate/peak, "of-peak")
				}
			})
		}
		b.Run("bf16-vs-fp32/"+name, func(b *testing.B) {
			gemmtest.Paired(b, packedBF16Side(b, "go-bf16-packed", bf, ops), fp32)
		})
	}
	one, two := parallel.New(1), parallel.New(2)
	for _, m := range benchMs {
		ops := newBenchOperands(m, 1536, 1536)
		shape := fmt.Sprintf("M=%d/K=1536/N=1536", m)
		b.Run("2-vs-1-workers/go-packed/"+shape, func(b *testing.B) {
			gemmtest.Paired(b, packedSide(b, "2-workers", gemm.NewGo(two), ops), packedSide(b, "1-worker", gemm.NewGo(one), ops))
		})
		b.Run("2-vs-1-workers/go-bf16-packed/"+shape, func(b *testing.B) {
			gemmtest.Paired(b, packedBF16Side(b, "2-workers", gemm.NewGoBF16(two), ops), packedBF16Side(b, "1-worker", gemm.NewGoBF16(one), ops))
		})
	}
}

// packedSide is g's product over B packed once.
func packedSide(b *testing.B, name string, g *gemm.Go, ops *benchOperands) gemmtest.Side {
	return gemmtest.Linear(b, name, g, ops.m, ops.n, ops.k, ops.a, ops.b, ops.c)
}

// packedBF16Side is g's product over B rounded to bf16 and packed once.
func packedBF16Side(b *testing.B, name string, g *gemm.GoBF16, ops *benchOperands) gemmtest.Side {
	m, n, k := ops.m, ops.n, ops.k
	w := make([]uint16, len(ops.b))
	for i, v := range ops.b {
		w[i] = dtype.F32ToBF16(v)
	}
	pw, err := g.PackWeights(nil, n, k, w, k)
	if err != nil {
		b.Fatal(err)
	}
	return gemmtest.Side{Name: name, Flops: 2 * float64(m) * float64(n) * float64(k), Run: func() {
		if err := g.GemmBF16Packed(m, ops.a, k, pw, 0, ops.c, n); err != nil {
			b.Fatal(err)
		}
	}}
}

// BenchmarkExpanded compares, pair by pair (gemmtest.Paired), the fp32
// GEMM over prepacked fp32 weights with the same GEMM over weights kept
// as bf16, fp16 and fp8 and widened as their panels are packed, at DiT
// shapes, under each kernel selection (native, and FERRY_CPU=avx2's: the
// AVX2 6×16 kernel). The ratio is the expanded rate over fp32's; the goal
// is at least 0.9. The bf16 GEMM (compute dtype bf16: activations rounded)
// is compared too: VDPBF16PS natively, the expand kernel under avx2.
func BenchmarkExpanded(b *testing.B) {
	shapes := [][3]int{{256, 1536, 1536}, {1280, 1536, 8960}, {1280, 8960, 1536}, {4096, 1536, 1536}}
	if !testing.Short() {
		shapes = append(shapes, [3]int{1280, 5120, 13824}, [3]int{8192, 5120, 5120})
	}
	for _, sel := range []string{"avx2", "avx512"} {
		restore := gemm.CapISA(sel)
		g, bf := gemm.NewGo(nil), gemm.NewGoBF16(nil)
		restore()
		if g.Kernel() != sel {
			b.Logf("no %s kernel on this CPU (selection runs %s): skipped", sel, g.Kernel())
			continue
		}
		for _, shape := range shapes {
			m, k, n := shape[0], shape[1], shape[2]
			ops := newBenchOperands(m, n, k)
			fp32 := packedSide(b, "fp32", g, ops)
			for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E4M3} {
				name := fmt.Sprintf("%s/%s-vs-fp32/M=%d/K=%d/N=%d", sel, dt, m, k, n)
				b.Run(name, func(b *testing.B) {
					gemmtest.Paired(b, storedSide(b, dt.String(), g, dt, ops), fp32)
				})
			}
			name := fmt.Sprintf("%s/go-bf16-%s-vs-fp32/M=%d/K=%d/N=%d", sel, bf.Kernel(), m, k, n)
			b.Run(name, func(b *testing.B) { gemmtest.Paired(b, packedBF16Side(b, "go-bf16", bf, ops), fp32) })
		}
	}
}

// storedSide is g's product over B rounded to dt, kept as dt and packed
// once (widened per product).
func storedSide(b *testing.B, name string, g *gemm.Go, dt dtype.DType, ops *benchOperands) gemmtest.Side {
	m, n, k := ops.m, ops.n, ops.k
	raw := make([]byte, n*k*dt.Size())
	for i, v := range ops.b {
		switch dt {
		case dtype.BF16:
			h := dtype.F32ToBF16(v)
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		case dtype.F16:
			h := dtype.F32ToF16(v)
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
		default:
			raw[i] = byte(i*131) &^ 0x40 // small-magnitude fp8 values, no NaNs
		}
	}
	pw, err := g.PackStored(nil, dt, n, k, raw, k)
	if err != nil {
		b.Fatal(err)
	}
	return gemmtest.Side{Name: name, Flops: 2 * float64(m) * float64(n) * float64(k), Run: func() {
		if err := g.SgemmStored(m, ops.a, k, pw, 0, ops.c, n); err != nil {
			b.Fatal(err)
		}
	}}
}

// BenchmarkPackStored packs a 16-bit weight of the 1.3B's feed-forward
// shape as the executor does at each load of a streamed block.
func BenchmarkPackStored(b *testing.B) {
	const n, k = 8960, 1536
	raw := make([]byte, 2*n*k)
	for i := range raw {
		raw[i] = byte(i * 131)
	}
	g := gemm.NewGo(nil)
	dst := make([]byte, g.StoredBytes(dtype.BF16, n, k))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := g.PackStored(dst, dtype.BF16, n, k, raw, k); err != nil {
			b.Fatal(err)
		}
	}
}
