package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry/tensor"
)

// TestScoreGrads checks the score-gradient kernel at each level (assembly
// with AVX2 and AVX-512) against the Go one, bit for bit, on rows that are
// and are not multiples of the vector width.
func TestScoreGrads(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, c := range []struct{ rows, cols int }{{1, 1}, {3, 15}, {2, 16}, {4, 17}, {5, 128}, {3, 131}, {0, 7}} {
			n := c.rows * c.cols
			dp, pt, dd := make([]float32, n), make([]float32, n), make([]float32, c.cols)
			for i := range dp {
				dp[i], pt[i] = float32(rng.NormFloat64()), float32(rng.Float64())
			}
			for i := range dd {
				dd[i] = float32(rng.NormFloat64())
			}
			want := append([]float32(nil), dp...)
			scoreGradsGo(want, pt, dd)
			scoreGrads(dp, pt, dd)
			for i := range want {
				if math.Float32bits(dp[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d×%d: element %d = %g, want %g", c.rows, c.cols, i, dp[i], want[i])
				}
			}
		}
	})
}

// TestDot checks the dot product at each level (assembly with AVX2 and
// AVX-512) against float64 within the bound of a float32 sum of n products
// in any order, (n+2)·u·Σ|a·b|, on lengths around the vector widths.
func TestDot(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		const u = 1.0 / (1 << 24)
		for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 47, 128, 131} {
			a, b := make([]float32, n), make([]float32, n+3) // b may be longer
			for i := range b {
				b[i] = float32(rng.NormFloat64())
			}
			var want, mag float64
			for i := range a {
				a[i] = float32(rng.NormFloat64())
				want += float64(a[i]) * float64(b[i])
				mag += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if got := dot(a, b); math.Abs(float64(got)-want) > float64(n+2)*u*mag {
				t.Errorf("n=%d: dot = %g, want %g", n, got, want)
			}
			if n > 0 && dot(a, b) == 0 && want != 0 {
				t.Errorf("n=%d: dot is 0", n)
			}
		}
	})
}

// TestAttentionBackwardPaths runs one backward (small tiles, so a head
// has many query tiles) on every path: one group per head, as many groups
// as query tiles (partial dK and dV summed afterwards) and the plain
// products of a tile GEMM that packs nothing. dQ must not depend on the
// grouping at all (each row sums its key tiles in the same order); dK and
// dV only through the order of their sums over query groups, and the
// plain path through its GEMM's rounding: a few float32 ulps of their
// magnitudes.
func TestAttentionBackwardPaths(t *testing.T) {
	savedQ, savedK, savedItems := attnTileQ, attnTileK, attnBwdItemsPerWorker
	t.Cleanup(func() { attnTileQ, attnTileK, attnBwdItemsPerWorker = savedQ, savedK, savedItems })
	attnTileQ, attnTileK = 5, 24
	const b, lq, lk, h, d = 1, 37, 53, 2, 12
	rng := rand.New(rand.NewPCG(7, 8))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	q, k, v, dout := randn(b*lq*h*d), randn(b*lk*h*d), randn(b*lk*h*d), randn(b*lq*h*d)
	run := func(items int, plain bool) [3][]float32 {
		t.Helper()
		attnBwdItemsPerWorker = items
		be := New(NewDevice(1<<26), exactGEMM{})
		if plain {
			be.SetTileGEMM(exactGEMM{})
		}
		ops := tensor.NewOps(be)
		tq, tk, tv, tg := ops.Upload(q, b, lq, h, d), ops.Upload(k, b, lk, h, d), ops.Upload(v, b, lk, h, d), ops.Upload(dout, b, lq, h, d)
		out, lse := ops.AttentionLSE(tq, tk, tv, 0.3)
		dq, dk, dv := ops.AttentionBackward(tg, tq, tk, tv, out, lse, 0.3)
		res := [3][]float32{ops.Download(dq), ops.Download(dk), ops.Download(dv)}
		if err := ops.Err(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	one := run(0, false)
	for _, c := range []struct {
		name  string
		items int
		plain bool
	}{{"groups of one query tile", 1 << 20, false}, {"plain products", 0, true}, {"plain products in groups", 1 << 20, true}} {
		got := run(c.items, c.plain)
		for i, name := range []string{"dq", "dk", "dv"} {
			var mag float64
			for _, x := range one[i] {
				mag = math.Max(mag, math.Abs(float64(x)))
			}
			for j, x := range got[i] {
				w := one[i][j]
				if i == 0 && !c.plain && x != w || math.Abs(float64(x-w)) > 1e-5*mag {
					t.Fatalf("%s: %s element %d = %g, with one group per head %g", c.name, name, j, x, w)
				}
			}
		}
	}
}
