package cpu

import (
	"math"
	"testing"

	"ferry/tensor"
)

// forEachISA runs f once per kernel level (generic Go, AVX2, AVX-512) with
// that level's kernels installed, so one `go test` checks every path the
// CPU can run; a level the CPU lacks is skipped with a message. The
// installed level is restored after.
func forEachISA(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for l := isaGeneric; l <= isaAVX512; l++ {
		t.Run(l.String(), func(t *testing.T) {
			if l > detectedISA() {
				t.Skipf("this CPU runs at most the %v kernels", detectedISA())
			}
			defer installKernels(installedISA)
			installKernels(l)
			f(t)
		})
	}
}

// TestParseISACap: FERRY_CPU's values, case and spaces aside, and a typo
// that caps nothing and says so.
func TestParseISACap(t *testing.T) {
	for _, c := range []struct {
		in   string
		want isaLevel
		err  bool
	}{
		{"", isaAVX512, false}, {"auto", isaAVX512, false}, {" AVX2 ", isaAVX2, false},
		{"avx512", isaAVX512, false}, {"generic", isaGeneric, false}, {"avx-2", isaAVX512, true},
	} {
		got, err := parseISACap(c.in)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("parseISACap(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestInstallKernels: each level installs its own kernels (the AVX2 exp is
// not the Go one, and going back to generic restores the Go functions),
// and KernelISA names what is installed.
func TestInstallKernels(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		if got := KernelISA(); got != installedISA.String() {
			t.Fatalf("KernelISA() = %q with %v installed", got, installedISA)
		}
		// exp(-0.5) rounded through the Go path is float64-exact; the
		// vector ones agree to an ulp. What differs is whether the row
		// function is the Go one.
		x, d := []float32{-0.5}, []float32{0}
		unaryRows[tensor.Exp](d, x)
		if ulps(d[0], 0.60653066) > 1 {
			t.Fatalf("exp(-0.5) = %g", d[0])
		}
	})
}

// TestUnaryRowsBounds: every vector elementwise function writes exactly
// its n elements, for every tail length.
func TestUnaryRowsBounds(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		for _, op := range []tensor.UnaryOp{tensor.SiLU, tensor.GELUTanh, tensor.Sigmoid, tensor.Exp, tensor.ReLU} {
			for n := 0; n <= 20; n++ {
				x, d := make([]float32, n+1), make([]float32, n+1)
				for i := range x {
					x[i], d[i] = float32(i)-3.5, -7
				}
				unaryRows[op](d[:n], x)
				want := make([]float32, n)
				map[tensor.UnaryOp]func(d, x []float32){tensor.SiLU: siluRow, tensor.GELUTanh: geluTanhRow,
					tensor.Sigmoid: sigmoidRow, tensor.Exp: expRow, tensor.ReLU: reluRow}[op](want, x)
				for i := range n {
					// Within the accuracy TestVectorUnaryAccuracy holds
					// each to (the GELU's is relative, not in ulps).
					if e := math.Abs(float64(d[i]) - float64(want[i])); e > 2e-6*math.Abs(float64(want[i])) {
						t.Fatalf("%v n=%d: element %d = %g, want %g", op, n, i, d[i], want[i])
					}
				}
				if d[n] != -7 {
					t.Fatalf("%v n=%d: wrote past the end", op, n)
				}
			}
		}
	})
}

// TestAVX2MatchesAVX512: the AVX2 elementwise functions and exp compute
// what the AVX-512 ones do, bit for bit (same constants, same order of
// operations, one rounding in the scaling), over the whole range the
// accuracy tests sweep, so results do not depend on the machine kind.
func TestAVX2MatchesAVX512(t *testing.T) {
	if detectedISA() < isaAVX512 {
		t.Skipf("needs both kernel sets: this CPU runs at most the %v kernels", detectedISA())
	}
	defer installKernels(installedISA)
	const n = 1<<18 + 5
	x := make([]float32, n)
	for i := range x {
		x[i] = -110 + 200*float32(i)/float32(n-1)
	}
	x[1], x[2], x[3] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1))
	for _, op := range []tensor.UnaryOp{tensor.SiLU, tensor.GELUTanh, tensor.Sigmoid, tensor.Exp, tensor.ReLU} {
		got, want := make([]float32, n), make([]float32, n)
		installKernels(isaAVX512)
		unaryRows[op](want, x)
		installKernels(isaAVX2)
		unaryRows[op](got, x)
		for i := range x {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("%v(%g): avx2 %g, avx512 %g", op, x[i], got[i], want[i])
			}
		}
	}
	s := append([]float32(nil), x[4:]...)
	r := append([]float32(nil), s...)
	installKernels(isaAVX512)
	wantSum := expShift(r, 90)
	installKernels(isaAVX2)
	gotSum := expShift(s, 90)
	for i := range s {
		if math.Float32bits(s[i]) != math.Float32bits(r[i]) {
			t.Fatalf("exp(%g - 90): avx2 %g, avx512 %g", x[4+i], s[i], r[i])
		}
	}
	if math.Abs(float64(gotSum-wantSum)) > 1e-5*float64(wantSum) {
		t.Fatalf("sum %g, avx512 %g", gotSum, wantSum)
	}
}
