package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestOnlineSoftmaxColumns folds three tiles of scores into the running
// softmax both ways, row-wise on S and down the columns of Sᵀ, and checks
// that the probabilities, accumulators, maxima and sums agree. Some
// queries see only -Inf scores in the first tiles (the state must stay
// zero, not NaN), and later tiles raise the maxima so that the
// accumulators are rescaled.
func TestOnlineSoftmaxColumns(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		const mq, nk, d = 19, 7, 5
		rng := rand.New(rand.NewPCG(5, 6))
		type state struct{ o, m, l, mx, cor, sum []float32 }
		fresh := func() state {
			st := state{o: make([]float32, mq*d), m: make([]float32, mq), l: make([]float32, mq),
				mx: make([]float32, mq), cor: make([]float32, mq), sum: make([]float32, mq)}
			for i := range st.m {
				st.m[i] = float32(math.Inf(-1))
			}
			return st
		}
		rows, cols := fresh(), fresh()
		for tile := range 3 {
			s := make([]float32, mq*nk) // row-wise: query i, key j at i·nk + j
			for i := range mq {
				for j := range nk {
					s[i*nk+j] = float32(rng.NormFloat64()*3) + float32(tile)*2
					if i%4 == 0 && tile < 2 || i%4 == 1 && tile == 0 {
						s[i*nk+j] = float32(math.Inf(-1))
					}
				}
			}
			st := make([]float32, nk*mq) // Sᵀ
			for i := range mq {
				for j := range nk {
					st[j*mq+i] = s[i*nk+j]
				}
			}
			onlineSoftmax(s, rows.o, nk, d, rows.m, rows.l, rows.mx, rows.cor)
			onlineSoftmaxColumns(st, cols.o, d, cols.m, cols.l, cols.mx, cols.cor, cols.sum)
			for i := range mq {
				for j := range nk {
					if !close32(st[j*mq+i], s[i*nk+j]) {
						t.Fatalf("tile %d: probability of query %d, key %d = %g, want %g", tile, i, j, st[j*mq+i], s[i*nk+j])
					}
				}
				if cols.m[i] != rows.m[i] && !(math.IsInf(float64(cols.m[i]), -1) && math.IsInf(float64(rows.m[i]), -1)) {
					t.Fatalf("tile %d: max of query %d = %g, want %g", tile, i, cols.m[i], rows.m[i])
				}
				if !close32(cols.l[i], rows.l[i]) {
					t.Fatalf("tile %d: sum of query %d = %g, want %g", tile, i, cols.l[i], rows.l[i])
				}
			}
			// Add the same fake products to both accumulators, so the next
			// tile's rescaling has something to scale.
			for i := range rows.o {
				v := float32(rng.NormFloat64())
				rows.o[i] += v
				cols.o[i] += v
			}
		}
		for i := range rows.o {
			if !close32(cols.o[i], rows.o[i]) {
				t.Fatalf("accumulator element %d = %g, want %g", i, cols.o[i], rows.o[i])
			}
		}
	})
}

// close32 says whether a and b agree to a few float32 ulps (relative
// 1e-6), NaN matching nothing.
func close32(a, b float32) bool {
	return math.Abs(float64(a-b)) <= 1e-6*math.Max(math.Abs(float64(a)), math.Abs(float64(b)))
}
