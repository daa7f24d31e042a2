package backendtest

import "math"

// Float64 forwards for the backward tests, written from the definitions
// like the references in reference.go, but over float64 inputs so that
// finite differences can perturb them by less than a float32 ulp.

// eps64 is the unit roundoff of float64.
const eps64 = 1.0 / (1 << 53)

// gradStep is the finite differences' step: about eps64^(1/3), where the
// truncation error of a central difference (h²/6·|f‴|) and its rounding
// (eps64·|f|/h) balance for functions that vary on a scale of 1. It is
// absolute, not relative to the parameter: the tests' large inputs (exp at
// 80, a LayerNorm row of mean 100 and spread 0.1) vary on a scale of 1 or
// less, not on the scale of their value.
const gradStep = 1.0 / (1 << 17)

// fdGrad estimates the gradient of L(p) = Σ g·forward(p) with respect to
// every element of p by central differences, perturbing p in place (and
// restoring it). The difference L(p+h) - L(p-h) is taken output by output,
// Σ g·(y₊ - y₋), so outputs the element does not reach cancel exactly and
// add no rounding noise.
//
// Each estimate comes with an error bound: |D(h) - D(2h)|, which exceeds the
// O(h²) truncation error of D(h) (it is about three times it) and shows
// the rounding noise, plus 2·eps64·Σ|g|·(|y₊|+|y₋|)/h over the outputs that
// moved (a few roundings of each output, divided by the 2h step). On the
// tests' inputs it stays near 1e-10 relative: far below the float32
// kernels' tolerances (≥ u ≈ 6e-8 relative), so the comparisons measure
// the kernel, not the reference.
func fdGrad(p []float64, g []float64, forward func() []float64) (grad, bound []float64) {
	grad, bound = make([]float64, len(p)), make([]float64, len(p))
	for i := range p {
		d1, m1 := fdDiff(p, i, gradStep, g, forward)
		d2, _ := fdDiff(p, i, 2*gradStep, g, forward)
		grad[i] = d1
		bound[i] = math.Abs(d1-d2) + 2*eps64*m1/gradStep
	}
	return grad, bound
}

// fdDiff is the central difference of L along p[i] with step h and the
// magnitude Σ|g|·(|y₊|+|y₋|) of the outputs that changed.
func fdDiff(p []float64, i int, h float64, g []float64, forward func() []float64) (d, mag float64) {
	v := p[i]
	p[i] = v + h
	hi := p[i]
	yp := forward()
	p[i] = v - h
	lo := p[i]
	ym := forward()
	p[i] = v
	var s float64
	for j := range yp {
		if yp[j] != ym[j] {
			s += g[j] * (yp[j] - ym[j])
			mag += math.Abs(g[j]) * (math.Abs(yp[j]) + math.Abs(ym[j]))
		}
	}
	// Divide by the step actually taken (v ± h rounds in float64).
	return s / (hi - lo), mag
}

// linear64: x [m, k] · w [n, k]ᵀ + b (b may be nil).
func linear64(x, w, b []float64, m, n, k int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += x[i*k+p] * w[j*k+p]
			}
			if b != nil {
				s += b[j]
			}
			out[i*n+j] = s
		}
	}
	return out
}

// opt64 is p[i], or def when p is nil.
func opt64(p []float64, i int, def float64) float64 {
	if p == nil {
		return def
	}
	return p[i]
}

// layerNorm64 over rows of n with the biased variance; w and b may be nil.
func layerNorm64(x, w, b []float64, n int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		var mean, variance float64
		for _, v := range row {
			mean += v
		}
		mean /= float64(n)
		for _, v := range row {
			variance += (v - mean) * (v - mean)
		}
		rstd := 1 / math.Sqrt(variance/float64(n)+eps)
		for j, v := range row {
			out[r*n+j] = (v-mean)*rstd*opt64(w, j, 1) + opt64(b, j, 0)
		}
	}
	return out
}

// rmsNorm64: x / sqrt(mean(x²) + eps) · w over rows of n.
func rmsNorm64(x, w []float64, n int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		var ms float64
		for _, v := range row {
			ms += v * v
		}
		scale := 1 / math.Sqrt(ms/float64(n)+eps)
		for j, v := range row {
			out[r*n+j] = v * scale * opt64(w, j, 1)
		}
	}
	return out
}

// rope64 rotates the pairs of x [B, L, H, D] by the tables [L, D/2].
func rope64(x []float64, shape []int, cos, sin []float64) []float64 {
	out := make([]float64, len(x))
	l, h, d := shape[1], shape[2], shape[3]
	for base := 0; base < len(x); base += d {
		pos := base / (h * d) % l
		for j := range d / 2 {
			c, s := cos[pos*d/2+j], sin[pos*d/2+j]
			x0, x1 := x[base+2*j], x[base+2*j+1]
			out[base+2*j] = x0*c - x1*s
			out[base+2*j+1] = x0*s + x1*c
		}
	}
	return out
}

// expand64 broadcasts p of shape ps to shape (numpy's rule).
func expand64(p []float64, ps, shape []int) []float64 {
	out := make([]float64, numElems(shape))
	each(shape, func(idx []int) {
		out[offset(shape, idx)] = p[sourceIndex(ps, idx)]
	})
	return out
}

// binary64 is a op b with broadcasting to shape (mul or add).
func binary64(a []float64, as []int, b []float64, bs []int, shape []int, mul bool) []float64 {
	ea, eb := expand64(a, as, shape), expand64(b, bs, shape)
	for i := range ea {
		if mul {
			ea[i] *= eb[i]
		} else {
			ea[i] += eb[i]
		}
	}
	return ea
}

// permute64: out[idx] = a[idx permuted back].
func permute64(a []float64, shape, perm []int) []float64 {
	out := make([]int, len(shape))
	for i, p := range perm {
		out[i] = shape[p]
	}
	res := make([]float64, len(a))
	src := make([]int, len(shape))
	each(out, func(idx []int) {
		for i, p := range perm {
			src[p] = idx[i]
		}
		res[offset(out, idx)] = a[offset(shape, src)]
	})
	return res
}

// ropeTables are the tables testRope builds (diffusers' Wan rotary
// embedding: position · inverse frequency), [l, d/2] each.
func ropeTables(l, d int) (cos, sin []float64) {
	cos, sin = make([]float64, l*d/2), make([]float64, l*d/2)
	for p := range l {
		for j := range d / 2 {
			theta := float64(p) / math.Pow(10000, float64(2*j)/float64(d))
			cos[p*d/2+j], sin[p*d/2+j] = math.Cos(theta), math.Sin(theta)
		}
	}
	return cos, sin
}

// layerNormGrad64 is LayerNorm's gradient in closed form, laid out as
// concat64(x, w, b) (w nil: a weight of ones), for shapes too large for
// finite differences: with g = dy·w and x̂ = (x-μ)·rstd per row,
// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)), dw = Σ dy·x̂, db = Σ dy.
// TestNormGradients checks it against finite differences.
func layerNormGrad64(x, w, dy []float32, n int, eps float64) []float64 {
	out := make([]float64, len(x)+2*n)
	dx, dw, db := out[:len(x)], out[len(x):len(x)+n], out[len(x)+n:]
	xh := make([]float64, n)
	for r := 0; r < len(x)/n; r++ {
		mean, variance := rowStats(x[r*n : (r+1)*n])
		rstd := 1 / math.Sqrt(variance+eps)
		var mg, mgx float64
		for j := range n {
			xh[j] = (float64(x[r*n+j]) - mean) * rstd
			g := float64(dy[r*n+j]) * param(w, j, 1)
			mg += g / float64(n)
			mgx += g * xh[j] / float64(n)
			dw[j] += float64(dy[r*n+j]) * xh[j]
			db[j] += float64(dy[r*n+j])
		}
		for j := range n {
			dx[r*n+j] = rstd * (float64(dy[r*n+j])*param(w, j, 1) - mg - xh[j]*mgx)
		}
	}
	return out
}

// rmsNormGrad64 is RMSNorm's gradient in closed form, laid out as
// concat64(x, w): with g = dy·w, r = 1/sqrt(mean(x²)+eps) and x̂ = x·r,
// dx = r·(g - x̂·mean(g·x̂)), dw = Σ dy·x̂.
func rmsNormGrad64(x, w, dy []float32, n int, eps float64) []float64 {
	out := make([]float64, len(x)+n)
	dx, dw := out[:len(x)], out[len(x):]
	for r := 0; r < len(x)/n; r++ {
		var ms float64
		for _, v := range x[r*n : (r+1)*n] {
			ms += float64(v) * float64(v)
		}
		scale := 1 / math.Sqrt(ms/float64(n)+eps)
		var mgx float64
		for j := range n {
			xh := float64(x[r*n+j]) * scale
			mgx += float64(dy[r*n+j]) * param(w, j, 1) * xh / float64(n)
			dw[j] += float64(dy[r*n+j]) * xh
		}
		for j := range n {
			xh := float64(x[r*n+j]) * scale
			dx[r*n+j] = scale * (float64(dy[r*n+j])*param(w, j, 1) - xh*mgx)
		}
	}
	return out
}
