package cpu

import (
	"ferry/tensor"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// ulps is the distance between two float32 values in units in the last
// place (both finite, same sign or zero).
func ulps(a, b float32) int64 {
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if d := ia - ib; d < 0 {
		return -d
	} else {
		return d
	}
}

// TestExpShiftAccuracy sweeps exp over the whole range the online softmax
// feeds it (arguments in [-110, 0]) and checks every result against the
// correctly rounded float64 value: within 1 ulp for normal results, and
// within 1 subnormal step below the normal range.
func TestExpShiftAccuracy(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		const n = 1 << 20
		s := make([]float32, n+7)
		for i := range s {
			s[i] = float32(-110 * float64(i) / float64(len(s)-1))
		}
		s[3] = float32(math.Inf(-1))
		want := make([]float32, len(s))
		var sum float64
		for i, x := range s {
			want[i] = float32(math.Exp(float64(x)))
			sum += float64(want[i])
		}
		got := append([]float32(nil), s...)
		gotSum := expShift(got, 0)
		worst := int64(0)
		for i := range got {
			if want[i] < 0x1p-126 {
				if math.Abs(float64(got[i]-want[i])) > 0x1p-149 {
					t.Fatalf("exp(%g) = %g, want %g", s[i], got[i], want[i])
				}
				continue
			}
			if d := ulps(got[i], want[i]); d > 1 {
				t.Fatalf("exp(%g) = %g, want %g (%d ulps)", s[i], got[i], want[i], d)
			} else if d > worst {
				worst = d
			}
		}
		// float32 partial sums over 2^20 terms: relative error well under 1e-4.
		if rel := math.Abs(float64(gotSum)-sum) / sum; rel > 1e-4 {
			t.Errorf("sum %g, want %g (relative error %.2g)", gotSum, sum, rel)
		}
		t.Logf("worst error %d ulp (%v kernels)", worst, installedISA)
	})
}

// TestExpShiftShifts checks rowMax, the shift by m and every tail length.
func TestExpShiftShifts(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for n := 0; n <= 40; n++ {
			s := make([]float32, n+1)
			for i := range s {
				s[i] = float32(rng.NormFloat64() * 5)
			}
			sentinel := s[n]
			m := rowMax(s[:n], -1000)
			want := rowMaxGo(s[:n], -1000)
			if m != want {
				t.Fatalf("n=%d: max %g, want %g", n, m, want)
			}
			// The kernel rounds s - m to float32 first (an error of
			// u·|s-m| relative, far below that of the scores themselves).
			ref := make([]float32, n)
			for i := range ref {
				ref[i] = s[i] - m
			}
			refSum := expShiftGo(ref, 0)
			sum := expShift(s[:n], m)
			for i := range ref {
				if ulps(s[i], ref[i]) > 1 {
					t.Fatalf("n=%d: element %d = %g, want %g", n, i, s[i], ref[i])
				}
			}
			if math.Abs(float64(sum-refSum)) > 1e-6*float64(refSum)+1e-30 {
				t.Fatalf("n=%d: sum %g, want %g", n, sum, refSum)
			}
			if s[n] != sentinel {
				t.Fatalf("n=%d: wrote past the end", n)
			}
		}
	})
}

func TestScaleAndAddRows(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		for n := 0; n <= 40; n++ {
			a := make([]float32, n+1)
			b := make([]float32, n+1)
			for i := range a {
				a[i], b[i] = float32(i)+0.5, float32(2*i)-3
			}
			scaleRow(a[:n], 3)
			addRow(b[:n], a)
			for i := range n {
				if a[i] != (float32(i)+0.5)*3 || b[i] != float32(2*i)-3+a[i] {
					t.Fatalf("n=%d: element %d: a %g b %g", n, i, a[i], b[i])
				}
			}
			if a[n] != float32(n)+0.5 || b[n] != float32(2*n)-3 {
				t.Fatalf("n=%d: wrote past the end", n)
			}
		}
	})
}

// TestChannelNormRows checks the two row kernels of RMSNormChannels against
// their Go versions for every tail length: the sums of squares may differ
// by the fused multiply-add's rounding (an ulp), the scaling not at all.
func TestChannelNormRows(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for n := 0; n <= 40; n++ {
			x, r := make([]float32, n+1), make([]float32, n+1)
			for i := range x {
				x[i], r[i] = float32(rng.NormFloat64()), float32(rng.Float64()+0.5)
			}
			acc, ref := make([]float32, n+1), make([]float32, n+1)
			for i := range acc {
				acc[i] = float32(i)
				ref[i] = acc[i]
			}
			sqAcc(acc[:n], x)
			sqAccGo(ref[:n], x)
			d, want := make([]float32, n+1), make([]float32, n+1)
			d[n], want[n] = 7, 7
			mulScale(d[:n], x, r, 1.5)
			mulScaleGo(want[:n], x, r, 1.5)
			for i := range n + 1 {
				if ulps(acc[i], ref[i]) > 1 {
					t.Fatalf("n=%d: sum of squares %d = %g, want %g", n, i, acc[i], ref[i])
				}
				if d[i] != want[i] {
					t.Fatalf("n=%d: scaled element %d = %g, want %g", n, i, d[i], want[i])
				}
			}
		}
	})
}

// TestVectorUnaryAccuracy compares each elementwise function at each level
// (the AVX2 and AVX-512 versions where the CPU has them) with its float64
// evaluation over a dense sweep, in ulps (results above 2^-100). The GELU's error grows
// with |u| (its argument is rounded in float32, as in PyTorch); it is held
// to 1e-6 relative or 4u·|x| absolute, as the conformance suite does.
func TestVectorUnaryAccuracy(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		cases := []struct {
			op     tensor.UnaryOp
			ref    func(d, x []float32)
			lo, hi float32
			ulps   int64
		}{
			{tensor.Exp, expRow, -104, 89, 1},
			{tensor.Sigmoid, sigmoidRow, -104, 89, 3},
			{tensor.SiLU, siluRow, -104, 89, 3},
			{tensor.GELUTanh, geluTanhRow, -12, 12, -1},
			// The erfc fit is within 1.2e-7 relative; its polynomial sums to
			// 0 at x = 0, so float32 evaluation adds a few ulps there.
			{tensor.GELUErf, geluErfRow, -14, 12, 6},
			{tensor.ReLU, reluRow, -10, 10, 0},
		}
		const n = 1<<20 + 3
		for _, c := range cases {
			x := make([]float32, n)
			for i := range x {
				x[i] = c.lo + (c.hi-c.lo)*float32(i)/float32(n-1)
			}
			x[1], x[2] = float32(math.NaN()), float32(math.Inf(1))
			want, got := make([]float32, n), make([]float32, n)
			c.ref(want, x)
			unaryRows[c.op](got, x)
			worst, worstTol := int64(0), 0.0
			for i := range x {
				w, g := want[i], got[i]
				if w != w {
					if g == g {
						t.Fatalf("%v(%g) = %g, want NaN", c.op, x[i], g)
					}
					continue
				}
				if math.IsInf(float64(w), 0) {
					if g != w {
						t.Fatalf("%v(%g) = %g, want %g", c.op, x[i], g, w)
					}
					continue
				}
				if c.ulps < 0 {
					tol := 1e-6*math.Abs(float64(w)) + 4*0x1p-24*math.Abs(float64(x[i]))
					e := math.Abs(float64(g) - float64(w))
					if e > tol {
						t.Fatalf("%v(%g) = %g, want %g", c.op, x[i], g, w)
					}
					if tol > 0 {
						worstTol = max(worstTol, e/tol)
					}
					continue
				}
				// Results near the subnormal range come out of subnormal
				// intermediates (exp(-|t|) below 2^-126): there they are held
				// to an absolute 2^-126 rather than to ulps.
				if math.Abs(float64(w)) < 0x1p-100 {
					if g == w || math.Abs(float64(g)-float64(w)) <= 0x1p-126 {
						continue
					}
				}
				if d := ulps(g, w); d > c.ulps {
					t.Fatalf("%v(%g) = %g, want %g (%d ulps)", c.op, x[i], g, w, d)
				} else if d > worst {
					worst = d
				}
			}
			if c.ulps < 0 {
				t.Logf("%v: worst error %.2g of the tolerance over [%g, %g]", c.op, worstTol, c.lo, c.hi)
			} else {
				t.Logf("%v: worst %d ulps over [%g, %g]", c.op, worst, c.lo, c.hi)
			}
		}
	})
}

// TestColumnKernels checks colMax and expCols against their Go versions
// for every column tail and a few row counts, and that they leave the
// element past the tile alone.
func TestColumnKernels(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, rows := range []int{1, 2, 3, 17} {
			for cols := 1; cols <= 50; cols++ {
				s := make([]float32, rows*cols+1)
				for i := range s {
					s[i] = float32(rng.NormFloat64() * 5)
				}
				sentinel := s[rows*cols]
				mx, want := make([]float32, cols), make([]float32, cols)
				for c := range mx {
					mx[c] = float32(rng.NormFloat64() * 5)
				}
				copy(want, mx)
				colMax(mx, s[:rows*cols])
				colMaxGo(want, s[:rows*cols])
				for c := range mx {
					if mx[c] != want[c] {
						t.Fatalf("rows=%d cols=%d: max of column %d = %g, want %g", rows, cols, c, mx[c], want[c])
					}
				}
				ref := append([]float32(nil), s[:rows*cols]...)
				sum, refSum := make([]float32, cols), make([]float32, cols)
				for c := range sum {
					sum[c] = float32(c)
					refSum[c] = float32(c)
				}
				expCols(s[:rows*cols], mx, sum)
				expColsGo(ref, want, refSum)
				for i := range ref {
					if ulps(s[i], ref[i]) > 1 {
						t.Fatalf("rows=%d cols=%d: element %d = %g, want %g", rows, cols, i, s[i], ref[i])
					}
				}
				for c := range sum {
					if math.Abs(float64(sum[c]-refSum[c])) > 1e-6*float64(refSum[c]) {
						t.Fatalf("rows=%d cols=%d: sum of column %d = %g, want %g", rows, cols, c, sum[c], refSum[c])
					}
				}
				if s[rows*cols] != sentinel {
					t.Fatalf("rows=%d cols=%d: wrote past the tile", rows, cols)
				}
			}
		}
	})
}

// BenchmarkSoftmaxColumns times the column kernels of the transposed
// online softmax (attention_transposed.go) on one score tile, attnTileK
// keys × attnTileQ queries in column panels of nr queries (the GEMM's
// panel width: 16 for the AVX2 kernel, 32 for AVX-512's), under each
// kernel level this CPU runs, in nanoseconds per score.
func BenchmarkSoftmaxColumns(b *testing.B) {
	rows, cols := attnTileK, attnTileQ
	s := make([]float32, rows*cols)
	for i := range s {
		s[i] = float32(i%97) / 97
	}
	mx, sum := make([]float32, cols), make([]float32, cols)
	defer installKernels(installedISA)
	for l := isaGeneric; l <= detectedISA(); l++ {
		installKernels(l)
		for _, nr := range []int{16, 32} {
			panels := func(fn func(p, mx, sum []float32)) {
				for j := 0; j < cols; j += nr {
					fn(s[j*rows:(j+nr)*rows], mx[j:j+nr], sum[j:j+nr])
				}
			}
			perScore := func(b *testing.B) {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows*cols), "ns/score")
			}
			b.Run(fmt.Sprintf("%s/colMax/nr=%d", l, nr), func(b *testing.B) {
				for range b.N {
					panels(func(p, mx, _ []float32) { colMax(mx, p) })
				}
				perScore(b)
			})
			b.Run(fmt.Sprintf("%s/expCols/nr=%d", l, nr), func(b *testing.B) {
				for range b.N {
					clear(sum)
					// Each pass leaves s in [1/e, 1]: exp(s - 1) stays there.
					for i := range mx {
						mx[i] = 1
					}
					panels(func(p, mx, sum []float32) { expCols(p, mx, sum) })
				}
				perScore(b)
			})
		}
	}
}
