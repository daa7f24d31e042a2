package cpu_test

import (
	"fmt"
	"math"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/backend/cpu/gemm/gemmtest"
	"ferry/tensor"
)

// Benchmarks. The kernels that multiply matrices (Attention, Conv) are
// measured with two stand-ins until the fast gemm.Impl is wired in:
//
//   - "null": a GEMM that does nothing, which measures everything the kernel
//     does besides its matrix products (softmax, im2col, bookkeeping): the
//     ceiling the kernel puts on any GEMM;
//   - "blocked": blockedGEMM below, plain Go, a stand-in for scale only.
//
// and the real ones: the Go GEMM and OpenBLAS where it loads.
func benchGEMMs() []gemm.Impl {
	impls := []gemm.Impl{nullGEMM{}, benchGo()}
	if o, err := gemm.OpenBLAS(); err == nil {
		impls = append(impls, o)
	}
	return impls
}

// benchGo is the Go GEMM with the kernel of the level the other kernels
// run at: under FERRY_CPU=avx2 on an AVX-512 machine, the AVX2 one, so
// that attention and convolutions are timed against the GEMM an AVX2
// machine runs (whatever gemm.DefaultGo makes of the variable).
func benchGo() *gemm.Go {
	if g, err := gemm.NewGoKernel(nil, cpu.KernelISA()); err == nil {
		return g
	}
	return gemm.DefaultGo()
}

// nullGEMM leaves C as it is.
type nullGEMM struct{}

func (nullGEMM) Name() string { return "null" }
func (nullGEMM) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
}

// blockedGEMM is a simple cache-blocked Go GEMM (no transA), single
// threaded per call: rows of C accumulate alpha·A[i,p]·B[p,:] over blocks of
// p (B not transposed) or dot products of rows (B transposed).
type blockedGEMM struct{}

func (blockedGEMM) Name() string { return "blocked" }

func (blockedGEMM) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	if transA {
		cpu.ExactGEMM{}.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
	if transB {
		for i := range m {
			ar := a[i*lda : i*lda+k]
			for j := range n {
				br := b[j*ldb : j*ldb+k]
				var s0, s1, s2, s3 float32
				p := 0
				for ; p+4 <= k; p += 4 {
					s0 += ar[p] * br[p]
					s1 += ar[p+1] * br[p+1]
					s2 += ar[p+2] * br[p+2]
					s3 += ar[p+3] * br[p+3]
				}
				for ; p < k; p++ {
					s0 += ar[p] * br[p]
				}
				c[i*ldc+j] += alpha * (s0 + s1 + s2 + s3)
			}
		}
		return
	}
	const kb = 128
	for p0 := 0; p0 < k; p0 += kb {
		p1 := min(p0+kb, k)
		for i := range m {
			row := c[i*ldc : i*ldc+n]
			for p := p0; p < p1; p++ {
				av := alpha * a[i*lda+p]
				br := b[p*ldb : p*ldb+n]
				for j, bv := range br {
					row[j] += av * bv
				}
			}
		}
	}
}

type bench struct {
	b         *testing.B
	be        *cpu.Backend
	ops       *tensor.Ops
	cpu0, cpu float64
	bytes     int64 // moved per op, for memory-bound kernels
}

// setBytes records the bytes one op reads plus writes: the benchmark then
// reports MB/s and GB/s.
func (x *bench) setBytes(n int64) {
	x.bytes = n
	x.b.SetBytes(n)
}

func newBench(b *testing.B, g gemm.Impl) *bench {
	be := cpu.New(cpu.NewDevice(0), g)
	if _, null := g.(nullGEMM); null {
		be.SetTileGEMM(g)
	}
	return &bench{b: b, be: be, ops: tensor.NewOps(be)}
}

func (x *bench) rand(shape ...int) *tensor.Tensor {
	n := tensor.NumElems(shape)
	data := make([]float32, n)
	s := uint32(12345)
	for i := range data {
		s = s*1664525 + 1013904223
		data[i] = float32(s>>8)/float32(1<<24)*2 - 1
	}
	t := x.ops.Upload(data, shape...)
	if err := x.ops.Err(); err != nil {
		x.b.Fatal(err)
	}
	return t
}

func (x *bench) empty(shape ...int) *tensor.Tensor {
	t := x.ops.Zeros(shape...)
	if err := x.ops.Err(); err != nil {
		x.b.Fatal(err)
	}
	return t
}

// run times fn after one warm-up call (scratch growth, first-touch page
// faults), recording the CPU time used for flopRate.
func (x *bench) run(fn func() error) {
	if err := fn(); err != nil {
		x.b.Fatal(err)
	}
	x.cpu0 = cpuSeconds()
	x.b.ResetTimer()
	for range x.b.N {
		if err := fn(); err != nil {
			x.b.Fatal(err)
		}
	}
	x.cpu = cpuSeconds() - x.cpu0
	if x.bytes > 0 {
		x.b.ReportMetric(float64(x.bytes)*float64(x.b.N)/x.b.Elapsed().Seconds()/1e9, "GB/s")
	}
}

// flopRate reports GFLOP/s of wall time and cpu-GFLOP/s, per second of CPU
// time (robust to other processes taking the cores; with w busy workers it
// reads as the per-core rate).
func (x *bench) flopRate(flopsPerOp float64) {
	flops := flopsPerOp * float64(x.b.N)
	x.b.ReportMetric(flops/x.b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if x.cpu > 0 {
		x.b.ReportMetric(flops/x.cpu/1e9, "cpu-GFLOP/s")
	}
}

// BenchmarkAttention: Wan-like self-attention, B=1, width 1536 (12 heads of
// 128 or 24 of 64), 1280 to 8192 tokens. Reports GFLOP/s = 4·B·H·Lq·Lk·D /
// time. The tiles run on the single-threaded Go GEMM whatever the big
// GEMM is, so only "null" (no products at all: the softmax and bookkeeping
// alone) and "go" are run.
func BenchmarkAttention(b *testing.B) {
	for _, g := range benchGEMMs()[:2] {
		for _, c := range []struct{ l, d int }{{1280, 128}, {4096, 128}, {8192, 128}, {1280, 64}, {4096, 64}} {
			b.Run(fmt.Sprintf("%s/L=%d/D=%d", g.Name(), c.l, c.d), func(b *testing.B) {
				x := newBench(b, g)
				h, l, d := 1536/c.d, c.l, c.d
				q, k, v := x.rand(1, l, h, d), x.rand(1, l, h, d), x.rand(1, l, h, d)
				out := x.empty(1, l, h, d)
				scale := float32(1 / math.Sqrt(float64(d)))
				x.run(func() error { return x.be.Attention(out, q, k, v, nil, scale) })
				x.flopRate(4.0 * float64(h) * float64(l) * float64(l) * float64(d))
			})
		}
	}
}

// BenchmarkConv3d: the Wan VAE's 3×3×3 convolution with [0,1,1] padding on
// 4 frames of 60×104. Reports GFLOP/s = 2·O·C·27·positions / time.
func BenchmarkConv3d(b *testing.B) {
	for _, g := range benchGEMMs() {
		for _, c := range []int{96, 384} {
			b.Run(fmt.Sprintf("%s/C=%d", g.Name(), c), func(b *testing.B) {
				x := newBench(b, g)
				in := x.rand(1, c, 4, 60, 104)
				w := x.rand(c, c, 3, 3, 3)
				bias := x.rand(c)
				out := x.empty(1, c, 2, 60, 104)
				x.run(func() error { return x.be.Conv(out, in, w, bias, []int{1, 1, 1}, []int{0, 1, 1}) })
				x.flopRate(2.0 * float64(c*c*27) * float64(out.Len()/c))
			})
		}
	}
}

// BenchmarkConv2d: the Wan VAE decoder's 3×3 image convolution at full
// resolution, 480×832, padding 1. Reports GFLOP/s = 2·O·C·9·positions / time.
func BenchmarkConv2d(b *testing.B) {
	for _, g := range benchGEMMs() {
		for _, c := range []int{96, 192} {
			b.Run(fmt.Sprintf("%s/C=%d", g.Name(), c), func(b *testing.B) {
				x := newBench(b, g)
				in := x.rand(1, c, 480, 832)
				w := x.rand(c, c, 3, 3)
				bias := x.rand(c)
				out := x.empty(1, c, 480, 832)
				x.run(func() error { return x.be.Conv(out, in, w, bias, []int{1, 1}, []int{1, 1}) })
				x.flopRate(2.0 * float64(c*c*9) * float64(out.Len()/c))
			})
		}
	}
}

// Memory-bound kernels report bytes read plus written per second.

const (
	benchRows = 1024
	benchCols = 5120 // Wan 14B's model width
)

func BenchmarkAdd(b *testing.B) {
	cases := []struct {
		name string
		a, b []int
	}{
		{"same", []int{benchRows, benchCols}, []int{benchRows, benchCols}},
		{"bias", []int{benchRows, benchCols}, []int{benchCols}},
		{"adaLN", []int{2, benchRows / 2, benchCols}, []int{2, 1, benchCols}},
		{"channel", []int{1, 96, 4, 60, 104}, []int{1, 96, 1, 1, 1}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			x := newBench(b, nil)
			ta, tb := x.rand(c.a...), x.rand(c.b...)
			x.setBytes(2*ta.Bytes() + tb.Bytes())
			x.run(func() error { return x.be.Add(ta, ta, tb) })
		})
	}
}

func BenchmarkUnary(b *testing.B) {
	for _, op := range []tensor.UnaryOp{tensor.SiLU, tensor.GELUTanh, tensor.GELUErf, tensor.ReLU} {
		b.Run(op.String(), func(b *testing.B) {
			x := newBench(b, nil)
			a := x.rand(benchRows, benchCols)
			out := x.empty(benchRows, benchCols)
			x.setBytes(2 * a.Bytes())
			x.run(func() error { return x.be.Unary(out, a, op) })
		})
	}
}

func BenchmarkNorms(b *testing.B) {
	x := newBench(b, nil)
	a := x.rand(benchRows, benchCols)
	w, bias := x.rand(benchCols), x.rand(benchCols)
	out := x.empty(benchRows, benchCols)
	vae := x.rand(1, 96, 4, 60, 104)
	vaeOut := x.empty(1, 96, 4, 60, 104)
	gw, gb := x.rand(96), x.rand(96)
	cases := []struct {
		name  string
		bytes int64
		fn    func() error
	}{
		{"layernorm", 2 * a.Bytes(), func() error { return x.be.LayerNorm(out, a, w, bias, 1e-6) }},
		{"rmsnorm", 2 * a.Bytes(), func() error { return x.be.RMSNorm(out, a, w, 1e-6) }},
		{"softmax", 2 * a.Bytes(), func() error { return x.be.Softmax(out, a) }},
		{"groupnorm", 2 * vae.Bytes(), func() error { return x.be.GroupNorm(vaeOut, vae, gw, gb, 32, 1e-6) }},
		{"rmsnorm-channels", 2 * vae.Bytes(), func() error { return x.be.RMSNormChannels(vaeOut, vae, gw, 1e-12) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			x.b = b
			x.setBytes(c.bytes)
			x.run(c.fn)
		})
	}
}

func BenchmarkLayout(b *testing.B) {
	x := newBench(b, nil)
	blhd := x.rand(1, 4096, 12, 128)
	bhld := x.empty(1, 12, 4096, 128)
	mat := x.rand(2048, 2560)
	matT := x.empty(2560, 2048)
	cos, sin := x.ops.UploadF64(make([]float64, 4096*64), 4096, 64), x.ops.UploadF64(make([]float64, 4096*64), 4096, 64)
	rope := x.empty(1, 4096, 12, 128)
	cases := []struct {
		name  string
		bytes int64
		fn    func() error
	}{
		{"permute_BLHD_BHLD", 2 * blhd.Bytes(), func() error { return x.be.Permute(bhld, blhd, []int{0, 2, 1, 3}) }},
		{"transpose_2d", 2 * mat.Bytes(), func() error { return x.be.Permute(matT, mat, []int{1, 0}) }},
		{"rope", 2*blhd.Bytes() + 2*cos.Bytes(), func() error { return x.be.Rope(rope, blhd, cos, sin) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			x.b = b
			x.setBytes(c.bytes)
			x.run(c.fn)
		})
	}
}

// BenchmarkAttentionVsGEMM times attention pair by pair (gemmtest.Paired)
// against the fp32 GEMM of a Linear over the same tokens (M = L,
// K = N = 1536, weights packed once): "ratio" is attention's throughput
// over the GEMM's, the goal's ">= 70% of GEMM throughput".
func BenchmarkAttentionVsGEMM(b *testing.B) {
	g := benchGo()
	for _, c := range []struct{ l, d int }{{1280, 128}, {4096, 128}, {8192, 128}, {1280, 64}, {4096, 64}, {8192, 64}} {
		b.Run(fmt.Sprintf("L=%d/D=%d", c.l, c.d), func(b *testing.B) {
			x := newBench(b, g)
			h, l, d := 1536/c.d, c.l, c.d
			q, k, v := x.rand(1, l, h, d), x.rand(1, l, h, d), x.rand(1, l, h, d)
			out := x.empty(1, l, h, d)
			scale := float32(1 / math.Sqrt(float64(d)))
			attn := gemmtest.Side{Name: "attention", Flops: 4 * float64(h) * float64(l) * float64(l) * float64(d), Run: func() {
				if err := x.be.Attention(out, q, k, v, nil, scale); err != nil {
					b.Fatal(err)
				}
			}}
			a, w, y := x.rand(l, 1536).F32(), x.rand(1536, 1536).F32(), x.empty(l, 1536).F32()
			gemmtest.Paired(b, attn, gemmtest.Linear(b, "gemm", g, l, 1536, 1536, a, w, y))
		})
	}
}

// BenchmarkConvVsGEMM times the Wan VAE's 3×3×3 convolution (as
// BenchmarkConv3d) pair by pair against the fp32 GEMM of a Linear over as
// many rows as the convolution has output positions (K = N = 1536,
// weights packed once): "ratio" is the convolution's throughput over the
// GEMM's, the ">= 0.6x the GEMM".
func BenchmarkConvVsGEMM(b *testing.B) {
	g := benchGo()
	for _, c := range []int{96, 384} {
		b.Run(fmt.Sprintf("C=%d", c), func(b *testing.B) {
			x := newBench(b, g)
			in, w, bias := x.rand(1, c, 4, 60, 104), x.rand(c, c, 3, 3, 3), x.rand(c)
			out := x.empty(1, c, 2, 60, 104)
			positions := out.Len() / c
			conv := gemmtest.Side{Name: "conv", Flops: 2 * float64(c*c*27) * float64(positions), Run: func() {
				if err := x.be.Conv(out, in, w, bias, []int{1, 1, 1}, []int{0, 1, 1}); err != nil {
					b.Fatal(err)
				}
			}}
			a, wt, y := x.rand(positions, 1536).F32(), x.rand(1536, 1536).F32(), x.empty(positions, 1536).F32()
			gemmtest.Paired(b, conv, gemmtest.Linear(b, "gemm", g, positions, 1536, 1536, a, wt, y))
		})
	}
}
