package backendtest

import "math"

// The references below are deliberately naive: float64 arithmetic over
// explicit multi-indices, written from the definitions, sharing nothing with
// any backend.

// each calls fn with every multi-index of shape in row-major order. The
// slice is reused between calls.
func each(shape []int, fn func(idx []int)) {
	n := numElems(shape)
	idx := make([]int, len(shape))
	for i := 0; i < n; i++ {
		r := i
		for k := len(shape) - 1; k >= 0; k-- {
			idx[k] = r % shape[k]
			r /= shape[k]
		}
		fn(idx)
	}
}

// offset is the row-major position of idx in shape.
func offset(shape, idx []int) int {
	o := 0
	for k := range shape {
		o = o*shape[k] + idx[k]
	}
	return o
}

// broadcastShape is numpy's rule: right-align, sizes must match or be 1.
func broadcastShape(a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := range n {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		out[i] = da
		if da == 1 {
			out[i] = db
		}
	}
	return out
}

// sourceIndex maps an index of the broadcast shape to x's offset.
func sourceIndex(shape []int, idx []int) int {
	o := 0
	for k := range shape {
		c := idx[len(idx)-len(shape)+k]
		if shape[k] == 1 {
			c = 0
		}
		o = o*shape[k] + c
	}
	return o
}

// refBinary computes a op b with broadcasting; mul selects a·b over a+b.
func refBinary(a []float32, as []int, b []float32, bs []int, mul bool) ([]float64, []int) {
	shape := broadcastShape(as, bs)
	out := make([]float64, numElems(shape))
	each(shape, func(idx []int) {
		x, y := float64(a[sourceIndex(as, idx)]), float64(b[sourceIndex(bs, idx)])
		if mul {
			out[offset(shape, idx)] = x * y
		} else {
			out[offset(shape, idx)] = x + y
		}
	})
	return out, shape
}

// refSoftmax over rows of n.
func refSoftmax(x []float32, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		for j, v := range row {
			out[r*n+j] = math.Exp(float64(v)-m) / s
		}
	}
	return out
}

// rowStats are the mean and biased variance of a row.
func rowStats(x []float32) (mean, variance float64) {
	for _, v := range x {
		mean += float64(v)
	}
	mean /= float64(len(x))
	for _, v := range x {
		variance += (float64(v) - mean) * (float64(v) - mean)
	}
	return mean, variance / float64(len(x))
}

func param(p []float32, i int, def float64) float64 {
	if p == nil {
		return def
	}
	return float64(p[i])
}

// refLayerNorm also returns the tolerance of each element: a float32
// evaluation accumulates at most (n+8)·u relative error in the mean and the
// variance (recursive sums of n terms), which reaches the output through
// (x-μ)·rstd, scaled by |w|, plus the rounding of adding b.
func refLayerNorm(x, w, b []float32, n int, eps float64) (want, tol []float64) {
	want, tol = make([]float64, len(x)), make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		mean, variance := rowStats(row)
		rstd := 1 / math.Sqrt(variance+eps)
		sd := math.Sqrt(variance)
		for j, v := range row {
			y := (float64(v) - mean) * rstd * param(w, j, 1)
			want[r*n+j] = y + param(b, j, 0)
			scale := (math.Abs(float64(v)-mean) + math.Abs(mean) + sd) * rstd * math.Abs(param(w, j, 1))
			tol[r*n+j] = float64(n+8)*u*scale + 2*u*math.Abs(want[r*n+j])
		}
	}
	return want, tol
}

// refRMSNorm: x / sqrt(mean(x²) + eps) · w. The mean of squares carries
// at most (n+4)·u relative error in float32, halved by the square root.
func refRMSNorm(x, w []float32, n int, eps float64) (want, tol []float64) {
	want, tol = make([]float64, len(x)), make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		var ms float64
		for _, v := range row {
			ms += float64(v) * float64(v)
		}
		scale := 1 / math.Sqrt(ms/float64(n)+eps)
		for j, v := range row {
			want[r*n+j] = float64(v) * scale * param(w, j, 1)
			tol[r*n+j] = float64(n+8) * u * math.Abs(want[r*n+j])
		}
	}
	return want, tol
}

// refGroupNorm over x [N, C, spatial...] with groups; tolerance as for
// LayerNorm with n the number of elements in a group.
func refGroupNorm(x, w, b []float32, shape []int, groups int, eps float64) (want, tol []float64) {
	nb, c := shape[0], shape[1]
	spatial := numElems(shape[2:])
	per := c / groups
	want, tol = make([]float64, len(x)), make([]float64, len(x))
	for i := range nb {
		for g := range groups {
			var vals []float32
			for ch := g * per; ch < (g+1)*per; ch++ {
				base := (i*c + ch) * spatial
				vals = append(vals, x[base:base+spatial]...)
			}
			mean, variance := rowStats(vals)
			rstd := 1 / math.Sqrt(variance+eps)
			sd := math.Sqrt(variance)
			for ch := g * per; ch < (g+1)*per; ch++ {
				for s := range spatial {
					o := (i*c+ch)*spatial + s
					v := float64(x[o])
					want[o] = (v-mean)*rstd*param(w, ch, 1) + param(b, ch, 0)
					scale := (math.Abs(v-mean) + math.Abs(mean) + sd) * rstd * math.Abs(param(w, ch, 1))
					tol[o] = float64(len(vals)+8)*u*scale + 2*u*math.Abs(want[o])
				}
			}
		}
	}
	return want, tol
}

// dotTol is the worst-case error of a float32 dot product of k terms whose
// absolute products sum to mag, evaluated in any order (γ_k·mag with
// γ_k ≈ k·u, plus a margin of a few roundings for the scaling and the
// bias).
func dotTol(k int, mag, extra float64) float64 {
	return float64(k+4)*u*mag + 2*u*math.Abs(extra)
}

// refLinear: x [m, k] · w [n, k]ᵀ + b.
func refLinear(x, w, b []float32, m, n, k int) (want, tol []float64) {
	want, tol = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, mag float64
			for p := range k {
				t := float64(x[i*k+p]) * float64(w[j*k+p])
				s += t
				mag += math.Abs(t)
			}
			bias := param(b, j, 0)
			want[i*n+j] = s + bias
			tol[i*n+j] = dotTol(k, mag, bias) + 2*u*math.Abs(s+bias)
		}
	}
	return want, tol
}

// refMatMul: a [batch, m, k] · b [batch|1, k, n] (b [batch|1, n, k]ᵀ when
// transB).
func refMatMul(a, b []float32, batch, bBatch, m, n, k int, transB bool) (want, tol []float64) {
	want, tol = make([]float64, batch*m*n), make([]float64, batch*m*n)
	for z := range batch {
		zb := z
		if bBatch == 1 {
			zb = 0
		}
		for i := range m {
			for j := range n {
				var s, mag float64
				for p := range k {
					bv := b[zb*k*n+p*n+j]
					if transB {
						bv = b[zb*k*n+j*k+p]
					}
					t := float64(a[z*m*k+i*k+p]) * float64(bv)
					s += t
					mag += math.Abs(t)
				}
				want[z*m*n+i*n+j] = s
				tol[z*m*n+i*n+j] = dotTol(k, mag, 0)
			}
		}
	}
	return want, tol
}

// refPermute: out[idx] = a[idx permuted back].
func refPermute(a []float32, shape, perm []int) ([]float32, []int) {
	out := make([]int, len(shape))
	for i, p := range perm {
		out[i] = shape[p]
	}
	res := make([]float32, len(a))
	src := make([]int, len(shape))
	each(out, func(idx []int) {
		for i, p := range perm {
			src[p] = idx[i]
		}
		res[offset(out, idx)] = a[offset(shape, src)]
	})
	return res, out
}

// refConcat joins parts along axis.
func refConcat(parts [][]float32, shapes [][]int, axis int) ([]float32, []int) {
	out := append([]int(nil), shapes[0]...)
	out[axis] = 0
	for _, s := range shapes {
		out[axis] += s[axis]
	}
	res := make([]float32, numElems(out))
	src := make([]int, len(out))
	each(out, func(idx []int) {
		c := idx[axis]
		part := 0
		for c >= shapes[part][axis] {
			c -= shapes[part][axis]
			part++
		}
		copy(src, idx)
		src[axis] = c
		res[offset(out, idx)] = parts[part][offset(shapes[part], src)]
	})
	return res, out
}

// refNarrow takes a[..., start:start+n, ...] along axis.
func refNarrow(a []float32, shape []int, axis, start, n int) ([]float32, []int) {
	out := append([]int(nil), shape...)
	out[axis] = n
	res := make([]float32, numElems(out))
	src := make([]int, len(out))
	each(out, func(idx []int) {
		copy(src, idx)
		src[axis] += start
		res[offset(out, idx)] = a[offset(shape, src)]
	})
	return res, out
}

// refPad surrounds a with zeros.
func refPad(a []float32, shape, before, after []int) ([]float32, []int) {
	out := make([]int, len(shape))
	for i := range shape {
		out[i] = shape[i] + before[i] + after[i]
	}
	res := make([]float32, numElems(out))
	dst := make([]int, len(out))
	each(shape, func(idx []int) {
		for i := range idx {
			dst[i] = idx[i] + before[i]
		}
		res[offset(out, dst)] = a[offset(shape, idx)]
	})
	return res, out
}

// refUpsample repeats elements along the trailing len(scale) dims.
func refUpsample(a []float32, shape, scale []int) ([]float32, []int) {
	out := append([]int(nil), shape...)
	lead := len(shape) - len(scale)
	for i, s := range scale {
		out[lead+i] *= s
	}
	res := make([]float32, numElems(out))
	src := make([]int, len(out))
	each(out, func(idx []int) {
		copy(src, idx)
		for i, s := range scale {
			src[lead+i] /= s
		}
		res[offset(out, idx)] = a[offset(shape, src)]
	})
	return res, out
}

// attnCase describes one attention problem for the reference.
type attnCase struct {
	b, lq, lk, h, d int
	biasShape       []int // nil: no bias
	scale           float32
}

// refAttention computes softmax(q·kᵀ·scale + bias)·v per (batch, head)
// with the whole score row at once.
//
// Tolerance, per output element: the scores carry at most
// Δs = (D+4)·u·|scale|·Σ|q·k| + 2u·|s| error each (a float32 dot product,
// the scaling, the bias), which perturbs every probability by a relative
// 2Δs (the score and the row maximum both move); exp and the division add
// a few u, the normaliser's sum and the online rescaling (L_k·u each), and
// the weighted sum of v another L_k·u, all relative to Σ p·|v|.
func refAttention(c attnCase, q, k, v, bias []float32) (want, tol []float64) {
	n := c.b * c.lq * c.h * c.d
	want, tol = make([]float64, n), make([]float64, n)
	scores := make([]float64, c.lk)
	errs := make([]float64, c.lk)
	for bi := range c.b {
		for hi := range c.h {
			for i := range c.lq {
				m := math.Inf(-1)
				ds := 0.0
				for j := range c.lk {
					var s, mag float64
					for x := range c.d {
						t := float64(q[((bi*c.lq+i)*c.h+hi)*c.d+x]) * float64(k[((bi*c.lk+j)*c.h+hi)*c.d+x])
						s += t
						mag += math.Abs(t)
					}
					s *= float64(c.scale)
					if bias != nil {
						s += float64(bias[biasIndex(c, bi, hi, i, j)])
					}
					scores[j] = s
					errs[j] = float64(c.d+4)*u*math.Abs(float64(c.scale))*mag + 2*u*math.Abs(s)
					m = math.Max(m, s)
				}
				var sum float64
				for j := range c.lk {
					if !math.IsInf(scores[j], -1) {
						ds = math.Max(ds, errs[j])
					}
					scores[j] = math.Exp(scores[j] - m)
					sum += scores[j]
				}
				rel := 2*ds + float64(3*c.lk+16)*u
				for x := range c.d {
					var o, mag float64
					for j := range c.lk {
						vv := float64(v[((bi*c.lk+j)*c.h+hi)*c.d+x])
						o += scores[j] / sum * vv
						mag += scores[j] / sum * math.Abs(vv)
					}
					at := ((bi*c.lq+i)*c.h+hi)*c.d + x
					want[at] = o
					tol[at] = rel*mag + u*math.Abs(o)
				}
			}
		}
	}
	return want, tol
}

// biasIndex finds bias[b|0, h|0, i|0, j] in a bias of c.biasShape.
func biasIndex(c attnCase, b, h, i, j int) int {
	s := c.biasShape
	if s[0] == 1 {
		b = 0
	}
	if s[1] == 1 {
		h = 0
	}
	if s[2] == 1 {
		i = 0
	}
	return ((b*s[1]+h)*s[2]+i)*s[3] + j
}

// refRope rotates pairs of x [B, L, H, D] by the tables [L, D/2]. The
// result is one float64 evaluation rounded to float32: within u·|result|
// plus the float64 rounding of the two products.
func refRope(x []float32, shape []int, cos, sin []float64) (want, tol []float64) {
	b, l, h, d := shape[0], shape[1], shape[2], shape[3]
	want, tol = make([]float64, len(x)), make([]float64, len(x))
	for bi := range b {
		for li := range l {
			for hi := range h {
				base := ((bi*l+li)*h + hi) * d
				for j := range d / 2 {
					c, s := cos[li*d/2+j], sin[li*d/2+j]
					x0, x1 := float64(x[base+2*j]), float64(x[base+2*j+1])
					want[base+2*j] = x0*c - x1*s
					want[base+2*j+1] = x0*s + x1*c
					small := math.Ldexp(math.Abs(x0)+math.Abs(x1), -50)
					tol[base+2*j] = u*math.Abs(want[base+2*j]) + small
					tol[base+2*j+1] = u*math.Abs(want[base+2*j+1]) + small
				}
			}
		}
	}
	return want, tol
}

// convCase describes one convolution for the reference.
type convCase struct {
	x, w        []int // [N, C, spatial...], [O, C, kernel...]
	stride, pad []int
	bias        bool
}

// outShape is [N, O, out...] with out = (in + 2·pad - k)/stride + 1.
func (c convCase) outShape() []int {
	out := []int{c.x[0], c.w[0]}
	for i := range c.stride {
		out = append(out, (c.x[2+i]+2*c.pad[i]-c.w[2+i])/c.stride[i]+1)
	}
	return out
}

// refConv is the definition: every output sums C·kernel products over the
// taps that land inside the input; its tolerance is that of a float32 dot
// product of that length.
func refConv(c convCase, x, w, b []float32) (want, tol []float64) {
	out := c.outShape()
	sd := len(c.stride)
	want, tol = make([]float64, numElems(out)), make([]float64, numElems(out))
	kshape := c.w[2:]
	xi := make([]int, len(c.x))
	wi := make([]int, len(c.w))
	each(out, func(idx []int) {
		var s, mag float64
		for ch := range c.x[1] {
			each(kshape, func(kidx []int) {
				xi[0], xi[1] = idx[0], ch
				wi[0], wi[1] = idx[1], ch
				for i := range sd {
					xi[2+i] = idx[2+i]*c.stride[i] + kidx[i] - c.pad[i]
					wi[2+i] = kidx[i]
					if xi[2+i] < 0 || xi[2+i] >= c.x[2+i] {
						return
					}
				}
				t := float64(x[offset(c.x, xi)]) * float64(w[offset(c.w, wi)])
				s += t
				mag += math.Abs(t)
			})
		}
		bias := param(b, idx[1], 0)
		o := offset(out, idx)
		want[o] = s + bias
		k := c.x[1] * numElems(kshape)
		tol[o] = dotTol(k, mag, bias) + 2*u*math.Abs(s+bias)
	})
	return want, tol
}
