package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestGatherPanel gathers the row panels of tiles of several convolutions
// (padding in every dimension, strides along time and height, panels
// spanning one output row or many, K ranges starting inside a channel) and
// compares them with im2col's columns copied into the same layout, for the
// vector and the Go gather.
func TestGatherPanel(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, c := range []struct {
			c           int
			in, ker     [3]int
			stride, pad [3]int
		}{
			{3, [3]int{4, 6, 33}, [3]int{3, 3, 3}, [3]int{1, 1, 1}, [3]int{0, 1, 1}},
			{2, [3]int{3, 5, 7}, [3]int{3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}},
			{4, [3]int{1, 9, 30}, [3]int{1, 3, 3}, [3]int{1, 2, 1}, [3]int{0, 1, 2}},
			{2, [3]int{5, 4, 3}, [3]int{3, 1, 1}, [3]int{2, 1, 1}, [3]int{1, 0, 0}},
			{1, [3]int{1, 2, 40}, [3]int{1, 1, 5}, [3]int{1, 1, 1}, [3]int{0, 0, 4}},
		} {
			p := convProblem{n: 1, c: c.c, in: c.in, ker: c.ker, stride: c.stride, pad: c.pad}
			for i := range 3 {
				p.outDim[i] = (p.in[i]+2*p.pad[i]-p.ker[i])/p.stride[i] + 1
			}
			kvol := p.ker[0] * p.ker[1] * p.ker[2]
			p.k, p.pos = p.c*kvol, p.outDim[0]*p.outDim[1]*p.outDim[2]
			p.x = make([]float32, p.c*p.in[0]*p.in[1]*p.in[2])
			for i := range p.x {
				p.x[i] = float32(rng.NormFloat64())
			}
			for _, mr := range []int{14, 16, 5, 6, 8, 9} {
				for _, tile := range []struct{ p0, np, r0, steps int }{
					{0, p.pos, 0, p.k}, {3, min(40, p.pos-3), kvol/2 + 1, p.k - kvol/2 - 1}, {p.pos - 1, 1, 1, min(kvol, p.k-1)},
				} {
					name := fmt.Sprintf("c=%d in=%v ker=%v mr=%d tile=%v", c.c, c.in, c.ker, mr, tile)
					col := make([]float32, tile.steps*tile.np)
					p.im2col(col, 0, tile.p0, tile.np, tile.r0)
					var tt tileTaps
					tt.describe(&p, tile.p0, tile.np, mr)
					for _, g := range []struct {
						name string
						fn   func(dst, x []float32, tab []tapRun, runs, plane, r0, steps, kvol, rows int)
					}{{"vector", gatherPanel}, {"go", gatherPanelGo}} {
						saved := gatherPanel
						gatherPanel = g.fn
						a := make([]float32, tile.steps*tile.np)
						for i := range a {
							a[i] = float32(i) // every element must be written
						}
						p.gatherA(a, &tt, 0, 0, tile.np, tile.r0, tile.steps, mr)
						gatherPanel = saved
						for q := 0; q*mr < tile.np; q++ {
							rows := min(mr, tile.np-q*mr)
							for s := range tile.steps {
								for j := range rows {
									got, want := a[q*mr*tile.steps+s*rows+j], col[s*tile.np+q*mr+j]
									if got != want {
										t.Fatalf("%s %s: panel %d step %d lane %d = %g, want %g", name, g.name, q, s, j, got, want)
									}
								}
							}
						}
					}
				}
			}
		}
	})
}
