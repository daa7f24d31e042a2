package backendtest

import "math"

// attnGrad is the float64 reference for attention's forward with lse and
// its backward, with the tolerance of every element.
type attnGrad struct {
	out, outTol   []float64    // [B, Lq, H, D]
	lse, lseTol   []float64    // [B, H, Lq]
	grad, gradTol [3][]float64 // dq, dk, dv
}

// refAttentionGrad computes attention (refAttention), the log-sum-exp of
// every query row's scaled scores and the gradients of L = Σ g·attention
// with respect to q, k and v, from the definitions in float64:
// P = softmax(S), dP = g·vᵀ, dS = P ∘ (dP − Σⱼ P·dP), dq = scale·dS·k,
// dk = scale·dSᵀ·q, dv = Pᵀ·g.
//
// Tolerances bound a float32 evaluation in any order (a sum of n terms is
// off by at most (n+4)·u·Σ|terms|, as in dotTol), given the output and lse
// rounded to float32:
//   - a score S carries ΔS = (D+4)·u·|scale|·Σ|q·k| + 2u·|S|;
//   - lse = max + log Σ exp(S − max) moves by at most max ΔS (its
//     derivative in each score is that score's probability), plus
//     (3·Lk+16)·u for the sum, the online rescaling and exp (as in
//     refAttention), plus the roundings of the max, the log and of the
//     exponents, u·(|max| + |lse| + Σ P·|S − lse|);
//   - P = exp(S − lse) is off by a relative ΔS + u·|lse| (lse rounded) +
//     u·|S − lse| (the exponent rounded) + 4u (exp);
//   - dP = g·v by (D+4)·u·Σ|g·v|; D = g·o by (D+5)·u·Σ|g·o| (o rounded);
//   - dS = P·(dP − D) by ΔP·|dP − D| + P·(ΔdP + ΔD + u·|dP − D|) + u·|dS|;
//   - each gradient is a sum over the other sequence: Σ of its terms'
//     errors (ΔP·|g| for dv, |scale|·ΔdS·|k| or |q| for dq, dk) plus
//     (n+4)·u·Σ|terms| and u·|result| for the scaling.
func refAttentionGrad(c attnCase, q, k, v, g []float32) attnGrad {
	var r attnGrad
	r.out, r.outTol = refAttention(c, q, k, v, nil)
	rows := c.b * c.h * c.lq
	r.lse, r.lseTol = make([]float64, rows), make([]float64, rows)
	for i, n := range []int{len(q), len(k), len(v)} {
		r.grad[i], r.gradTol[i] = make([]float64, n), make([]float64, n)
	}
	for b := range c.b {
		for hh := range c.h {
			r.head(c, b, hh, q, k, v, g)
		}
	}
	for i := range r.grad {
		for j, x := range r.grad[i] {
			r.gradTol[i][j] += u * math.Abs(x)
		}
	}
	return r
}

// head adds head hh of batch b to r.
func (r *attnGrad) head(c attnCase, b, hh int, q, k, v, g []float32) {
	qi := func(i, x int) int { return ((b*c.lq+i)*c.h+hh)*c.d + x }
	kj := func(j, x int) int { return ((b*c.lk+j)*c.h+hh)*c.d + x }
	scale := float64(c.scale)
	dq, dk, dv := r.grad[0], r.grad[1], r.grad[2]
	tq, tk, tv := r.gradTol[0], r.gradTol[1], r.gradTol[2]
	s, es := make([]float64, c.lk), make([]float64, c.lk)
	for i := range c.lq {
		m, maxErr := math.Inf(-1), 0.0
		for j := range c.lk {
			var dotp, mag float64
			for x := range c.d {
				t := float64(q[qi(i, x)]) * float64(k[kj(j, x)])
				dotp += t
				mag += math.Abs(t)
			}
			s[j] = scale * dotp
			es[j] = float64(c.d+4)*u*math.Abs(scale)*mag + 2*u*math.Abs(s[j])
			m, maxErr = math.Max(m, s[j]), math.Max(maxErr, es[j])
		}
		var sum float64
		for j := range c.lk {
			sum += math.Exp(s[j] - m)
		}
		lse := m + math.Log(sum)
		row := (b*c.h+hh)*c.lq + i
		r.lse[row] = lse
		var spread, dd, ddMag float64
		for x := range c.d {
			t := float64(g[qi(i, x)]) * r.out[qi(i, x)]
			dd += t
			ddMag += math.Abs(t)
		}
		edd := float64(c.d+5) * u * ddMag
		for j := range c.lk {
			p := math.Exp(s[j] - lse)
			spread += p * math.Abs(s[j]-lse)
			ep := p * (es[j] + u*math.Abs(lse) + u*math.Abs(s[j]-lse) + 4*u)
			var dp, dpMag float64
			for x := range c.d {
				gx := float64(g[qi(i, x)])
				t := gx * float64(v[kj(j, x)])
				dp += t
				dpMag += math.Abs(t)
				dv[kj(j, x)] += p * gx
				tv[kj(j, x)] += math.Abs(gx)*ep + float64(c.lq+4)*u*p*math.Abs(gx)
			}
			diff := dp - dd
			ds := p * diff
			eds := ep*math.Abs(diff) + p*(float64(c.d+4)*u*dpMag+edd+u*math.Abs(diff)) + u*math.Abs(ds)
			for x := range c.d {
				kx, qx := float64(k[kj(j, x)]), float64(q[qi(i, x)])
				dq[qi(i, x)] += scale * ds * kx
				tq[qi(i, x)] += math.Abs(scale) * (eds*math.Abs(kx) + float64(c.lk+4)*u*math.Abs(ds*kx))
				dk[kj(j, x)] += scale * ds * qx
				tk[kj(j, x)] += math.Abs(scale) * (eds*math.Abs(qx) + float64(c.lq+4)*u*math.Abs(ds*qx))
			}
		}
		r.lseTol[row] = maxErr + float64(3*c.lk+16)*u + u*(math.Abs(m)+math.Abs(lse)+spread)
	}
}

// fdStep is the finite-difference step (a power of two, so x ± step is
// exact for the float32 inputs' magnitudes).
const fdStep = 1.0 / 256

// fdAttentionGrad estimates the gradients of L = Σ g·attention(q, k, v)
// by central differences of the float64 reference attention: the
// five-point stencil F(e) = (8·(L(x+e) − L(x−e)) − (L(x+2e) − L(x−2e)))/(12e),
// whose error is O(e⁴). It checks every coordinate, or samples of them
// per tensor (the last one always: it sits in the last, ragged tile);
// the others are NaN. It returns the estimates and their tolerances: the
// kernel's, tol, plus the estimate's own error, bounded by
// |F(2e) − F(e)| (15 times the O(e⁴) term's estimate) plus float64
// roundoff, (Lk+D+20)·ε·Σ|g·o| per evaluation, weighted 18/(12e).
func fdAttentionGrad(h *harness, c attnCase, samples int, q, k, v, g []float32, tol [3][]float64) (fd, fdTol [3][]float64) {
	xs := [3][]float64{widen(q), widen(k), widen(v)}
	for t := range xs {
		n := len(xs[t])
		fd[t], fdTol[t] = make([]float64, n), make([]float64, n)
		for i := range fd[t] {
			fd[t][i] = math.NaN()
		}
		coords := make([]int, 0, n)
		if samples == 0 {
			for i := range n {
				coords = append(coords, i)
			}
		} else {
			for range samples {
				coords = append(coords, h.rng.IntN(n))
			}
			coords = append(coords, n-1)
		}
		l := c.lk
		if t == 0 {
			l = c.lq
		}
		for _, at := range coords {
			hh, pos, b := at/c.d%c.h, at/(c.d*c.h)%l, at/(c.d*c.h*l)
			loss := func() (float64, float64) { // L of the rows that coordinate moves, Σ|g·o|
				if t == 0 {
					return rowLoss(c, xs, g, b, hh, pos)
				}
				var sum, mag float64
				for i := range c.lq {
					s, m := rowLoss(c, xs, g, b, hh, i)
					sum, mag = sum+s, mag+m
				}
				return sum, mag
			}
			x0 := xs[t][at]
			var vals [3][2]float64 // L(x ± e), L(x ± 2e), L(x ± 4e)
			mag := 0.0
			for i, steps := range []float64{1, 2, 4} {
				for s, sign := range []float64{1, -1} {
					xs[t][at] = x0 + sign*steps*fdStep
					var m float64
					vals[i][s], m = loss()
					mag = math.Max(mag, m)
				}
			}
			xs[t][at] = x0
			d1, d2, d4 := vals[0][0]-vals[0][1], vals[1][0]-vals[1][1], vals[2][0]-vals[2][1]
			fe := (8*d1 - d2) / (12 * fdStep)
			f2e := (8*d2 - d4) / (24 * fdStep)
			roundoff := 18 * float64(c.lk+c.d+20) * 0x1p-52 * mag / (12 * fdStep)
			fd[t][at] = fe
			fdTol[t][at] = tol[t][at] + math.Abs(f2e-fe) + roundoff
		}
	}
	return fd, fdTol
}

// rowLoss evaluates Σₓ g·o for query row i of head hh, batch b, in
// float64 from the inputs xs (q, k, v), and Σₓ |g·o|.
func rowLoss(c attnCase, xs [3][]float64, g []float32, b, hh, i int) (loss, mag float64) {
	q, k, v := xs[0], xs[1], xs[2]
	qOff := ((b*c.lq+i)*c.h + hh) * c.d
	s := make([]float64, c.lk)
	m := math.Inf(-1)
	for j := range s {
		kOff := ((b*c.lk+j)*c.h + hh) * c.d
		var dotp float64
		for x := range c.d {
			dotp += q[qOff+x] * k[kOff+x]
		}
		s[j] = float64(c.scale) * dotp
		m = math.Max(m, s[j])
	}
	var z float64
	for j := range s {
		s[j] = math.Exp(s[j] - m)
		z += s[j]
	}
	for x := range c.d {
		var o float64
		for j, w := range s {
			o += w * v[((b*c.lk+j)*c.h+hh)*c.d+x]
		}
		t := float64(g[qOff+x]) * o / z
		loss += t
		mag += math.Abs(t)
	}
	return loss, mag
}
