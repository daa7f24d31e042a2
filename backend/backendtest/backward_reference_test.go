package backendtest

import (
	"math"
	"testing"
)

// The float64 forwards of the backward tests must agree with the forward
// references (on float32 inputs, to float64 rounding), and finite
// differences with derivatives known in closed form.

func TestBackwardReferencesMatchForwards(t *testing.T) {
	x := []float32{1.5, -2, 0.25, 3, -0.5, 2, 1, -1, 0.75, -3, 2.5, 0.5}
	w := []float32{0.5, -1, 2, 0.25}
	b := []float32{1, -2, 0.5, 3}
	check := func(name string, got, want []float64) {
		t.Helper()
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12*(1+math.Abs(want[i])) {
				t.Errorf("%s: element %d = %.17g, forward reference %.17g", name, i, got[i], want[i])
				return
			}
		}
	}
	lw, _ := refLinear(x, w, b[:1], 3, 1, 4)
	check("linear64", linear64(widen(x), widen(w), widen(b[:1]), 3, 1, 4), lw)
	ln, _ := refLayerNorm(x, w, b, 4, 1e-5)
	check("layerNorm64", layerNorm64(widen(x), widen(w), widen(b), 4, 1e-5), ln)
	rn, _ := refRMSNorm(x, w, 4, 1e-6)
	check("rmsNorm64", rmsNorm64(widen(x), widen(w), 4, 1e-6), rn)
	cos, sin := ropeTables(3, 4)
	rp, _ := refRope(x, []int{1, 3, 1, 4}, cos, sin)
	check("rope64", rope64(widen(x), []int{1, 3, 1, 4}, cos, sin), rp)
	pm, _ := refPermute(x, []int{2, 3, 2}, []int{2, 0, 1})
	check("permute64", permute64(widen(x), []int{2, 3, 2}, []int{2, 0, 1}), widen(pm))
	bm, _ := refBinary(x, []int{3, 4}, w, []int{4}, true)
	check("binary64", binary64(widen(x), []int{3, 4}, widen(w), []int{4}, []int{3, 4}, true), bm)
	check("expand64", expand64([]float64{1, 2}, []int{2, 1}, []int{2, 3}), []float64{1, 1, 1, 2, 2, 2})
}

func TestFDGrad(t *testing.T) {
	// L = Σ g·(x0², x0·x1, e^x1): ∂L/∂x0 = 2x0·g0 + x1·g1, ∂L/∂x1 = x0·g1 + e^x1·g2.
	p, g := []float64{1.25, -0.75}, []float64{0.5, -2, 3}
	grad, bound := fdGrad(p, g, func() []float64 { return []float64{p[0] * p[0], p[0] * p[1], math.Exp(p[1])} })
	want := []float64{2*1.25*0.5 + -0.75*-2, 1.25*-2 + math.Exp(-0.75)*3}
	for i := range want {
		if e := math.Abs(grad[i] - want[i]); e > bound[i] || bound[i] > 1e-9 {
			t.Errorf("∂L/∂p%d = %.15g, want %.15g (bound %g, error %g)", i, grad[i], want[i], bound[i], e)
		}
	}
	if p[0] != 1.25 || p[1] != -0.75 {
		t.Errorf("parameters not restored: %v", p)
	}
}

// TestNormGradients: the closed-form norm gradients agree with finite
// differences of the forwards (to 1e-8 relative: the differences' own
// error), with and without a weight, including a row of mean 100.
func TestNormGradients(t *testing.T) {
	x := []float32{1.5, -2, 0.25, 3, -0.5, 100.1, 99.8, 100.05, 99.9, 100.2, 0.5, -1, 0.75, 2, 0.1}
	dy := []float32{0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5, -2, 0.75, 1, 1, -1, 0.5, 2}
	w := []float32{0.5, -1.5, 2, 1, -0.25}
	const n, eps = 5, 1e-5
	close := func(name string, got, want []float64) {
		t.Helper()
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-8*(1+math.Abs(want[i])) {
				t.Errorf("%s: element %d = %.12g, finite differences %.12g", name, i, got[i], want[i])
				return
			}
		}
	}
	for _, weight := range [][]float32{w, nil} {
		wv := weight
		if wv == nil {
			wv = []float32{1, 1, 1, 1, 1}
		}
		b := []float32{0.1, 0.2, 0.3, 0.4, 0.5}
		p, at := concat64(x, wv, b)
		fd, _ := fdGrad(p, widen(dy), func() []float64 {
			return layerNorm64(p[at[0]:at[1]], p[at[1]:at[2]], p[at[2]:at[3]], n, eps)
		})
		close("layerNormGrad64", layerNormGrad64(x, weight, dy, n, eps), fd)
		q, qa := concat64(x, wv)
		fd, _ = fdGrad(q, widen(dy), func() []float64 { return rmsNorm64(q[qa[0]:qa[1]], q[qa[1]:qa[2]], n, eps) })
		close("rmsNormGrad64", rmsNormGrad64(x, weight, dy, n, eps), fd)
	}
}
