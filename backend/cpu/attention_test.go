package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestOnlineSoftmaxPanels folds three tiles of scores into the running
// softmax both ways, row-wise on S and down the columns of Sᵀ written as
// panels of nr queries (the last one padded with zero scores), and checks
// that the probabilities, accumulators, maxima and sums agree. Some
// queries see only -Inf scores in the first tiles (the state must stay
// zero, not NaN), and later tiles raise the maxima so that the
// accumulators are rescaled.
func TestOnlineSoftmaxPanels(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		const mq, nk, d, nr = 19, 7, 5, 8
		const cols = (mq + nr - 1) / nr * nr
		rng := rand.New(rand.NewPCG(5, 6))
		type state struct{ o, m, l, mx, cor, sum []float32 }
		fresh := func(n int) state {
			st := state{o: make([]float32, n*d), m: make([]float32, n), l: make([]float32, n),
				mx: make([]float32, n), cor: make([]float32, n), sum: make([]float32, n)}
			for i := range st.m {
				st.m[i] = float32(math.Inf(-1))
			}
			return st
		}
		rows, pan := fresh(mq), fresh(cols)                          // pan.o is Oᵀ, [d, cols]
		at := func(i, j int) int { return i/nr*nr*nk + j*nr + i%nr } // query i, key j in the panels
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
			st := make([]float32, nk*cols)
			for i := range mq {
				for j := range nk {
					st[at(i, j)] = s[i*nk+j]
				}
			}
			onlineSoftmax(s, rows.o, nk, d, rows.m, rows.l, rows.mx, rows.cor)
			onlineSoftmaxPanels(st, pan.o, nr, pan.m, pan.l, pan.mx, pan.cor, pan.sum)
			for i := range mq {
				for j := range nk {
					if !close32(st[at(i, j)], s[i*nk+j]) {
						t.Fatalf("tile %d: probability of query %d, key %d = %g, want %g", tile, i, j, st[at(i, j)], s[i*nk+j])
					}
				}
				if pan.m[i] != rows.m[i] && !(math.IsInf(float64(pan.m[i]), -1) && math.IsInf(float64(rows.m[i]), -1)) {
					t.Fatalf("tile %d: max of query %d = %g, want %g", tile, i, pan.m[i], rows.m[i])
				}
				if !close32(pan.l[i], rows.l[i]) {
					t.Fatalf("tile %d: sum of query %d = %g, want %g", tile, i, pan.l[i], rows.l[i])
				}
			}
			// Add the same fake products to both accumulators, so the next
			// tile's rescaling has something to scale.
			for i := range mq {
				for c := range d {
					v := float32(rng.NormFloat64())
					rows.o[i*d+c] += v
					pan.o[c*cols+i] += v
				}
			}
		}
		for i := range mq {
			for c := range d {
				if !close32(pan.o[c*cols+i], rows.o[i*d+c]) {
					t.Fatalf("accumulator of query %d, element %d = %g, want %g", i, c, pan.o[c*cols+i], rows.o[i*d+c])
				}
			}
		}
	})
}

// close32 says whether a and b agree to a few float32 ulps (relative
// 1e-6), NaN matching nothing.
func close32(a, b float32) bool {
	return math.Abs(float64(a-b)) <= 1e-6*math.Max(math.Abs(float64(a)), math.Abs(float64(b)))
}
