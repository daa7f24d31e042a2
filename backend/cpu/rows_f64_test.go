package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNormRowMatchesGo: the float64 scaling of the norms gives the Go
// version's results bit for bit, with and without weight, bias and shift,
// for every tail length, and writes nothing past the row.
func TestNormRowMatchesGo(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for n := 0; n <= 21; n++ {
			x, w, b := make([]float32, n+1), make([]float32, n+1), make([]float32, n+1)
			for i := range x {
				x[i], w[i], b[i] = float32(rng.NormFloat64()*3), float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			x[0] = float32(math.Copysign(0, -1)) // -0 stays -0 without a bias
			mean, scale := rng.NormFloat64(), 1/(rng.Float64()+0.1)
			for _, c := range []struct {
				name     string
				w, b     []float32
				shift    bool
				meanZero bool
			}{{"w+b", w, b, false, false}, {"w", w, nil, false, false}, {"b", nil, b, false, false},
				{"shift", nil, nil, true, false}, {"plain", nil, nil, false, false}, {"rms", w, nil, false, true}} {
				m := mean
				if c.meanZero {
					m = 0
				}
				got, want := make([]float32, n+1), make([]float32, n+1)
				got[n], want[n] = 9, 9
				normRow(got[:n], x, c.w, c.b, m, scale, 0.25, c.shift)
				normRowGo(want[:n], x, c.w, c.b, m, scale, 0.25, c.shift)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s n=%d: element %d = %g, want %g", c.name, n, i, got[i], want[i])
					}
				}
			}
		}
	})
}

// TestSumsF64: the float64 sums agree with the Go ones to float64
// rounding, for every tail length.
func TestSumsF64(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for n := 0; n <= 40; n++ {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64()*10 + 3)
			}
			s, want := sumF64(x), sumF64Go(x)
			if math.Abs(s-want) > 1e-12*(math.Abs(want)+1) {
				t.Fatalf("n=%d: sum %g, want %g", n, s, want)
			}
			q, wantQ := sqDevF64(x, 2.5), sqDevF64Go(x, 2.5)
			if math.Abs(q-wantQ) > 1e-12*(wantQ+1) {
				t.Fatalf("n=%d: squared deviations %g, want %g", n, q, wantQ)
			}
		}
	})
}

// TestRopeRowMatchesGo: the rotation gives the Go version's results bit
// for bit at even and odd pair counts, in place and not.
func TestRopeRowMatchesGo(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, half := range []int{1, 2, 3, 5, 8, 64} {
			const heads = 3
			x := make([]float32, heads*2*half)
			c, s := make([]float64, half), make([]float64, half)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for j := range c {
				a := rng.Float64() * 100
				c[j], s[j] = math.Cos(a), math.Sin(a)
			}
			want := make([]float32, len(x))
			ropeRowGo(want, x, c, s)
			got := make([]float32, len(x))
			ropeRow(got, x, c, s)
			inPlace := append([]float32(nil), x...)
			ropeRow(inPlace, inPlace, c, s)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(inPlace[i]) != math.Float32bits(want[i]) {
					t.Fatalf("half=%d: element %d = %g (in place %g), want %g", half, i, got[i], inPlace[i], want[i])
				}
			}
		}
	})
}
