package backendtest

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// unaryBackSpec is one elementwise function's backward case: where its
// inputs are drawn and how far a float32 evaluation of f′(x) may be off,
// per unit of |dy| (the product dy·f′ adds u·|dx|, and a result below
// float32's normal range may be flushed to zero).
type unaryBackSpec struct {
	op     tensor.UnaryOp
	lo, hi float64
	extra  []float32
	tol    func(x float64) float64
}

// Transcendentals get 1e-6 relative, as in the forward tests; formulas
// with a cancellation in float32 (1 - σ, 1 + tanh, 1 - tanh²) get the
// absolute error of that cancellation, 2u times whatever multiplies it.
var unaryBackSpecs = []unaryBackSpec{
	{op: tensor.SiLU, lo: -20, hi: 20, extra: []float32{0, -30, 30, 1e-6, -88}, tol: func(x float64) float64 {
		s := 1 / (1 + math.Exp(-x))
		return 1e-6*(s+math.Abs(x)*s*(1-s)) + 2*u*(1+math.Abs(x))
	}},
	{op: tensor.GELUTanh, lo: -8, hi: 8, extra: []float32{0, -20, 20, 1e-7}, tol: func(x float64) float64 {
		const c = 0.7978845608028654
		t := math.Tanh(c * (x + 0.044715*x*x*x))
		k := 0.5 * math.Abs(x) * c * (1 + 3*0.044715*x*x)
		return 1e-6*(0.5*(1+t)+k*(1-t*t)) + 2*u*(1+k)
	}},
	{op: tensor.GELUErf, lo: -8, hi: 8, extra: []float32{0, -20, 20, 1e-7}, tol: func(x float64) float64 {
		phi := math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
		return 1e-6*(0.5*math.Erfc(-x/math.Sqrt2)+math.Abs(x)*phi) + 2*u
	}},
	{op: tensor.Sigmoid, lo: -30, hi: 30, extra: []float32{0, -80, 80}, tol: func(x float64) float64 {
		s := 1 / (1 + math.Exp(-x))
		return 1e-6*s*(1-s) + 2*u
	}},
	{op: tensor.Tanh, lo: -10, hi: 10, extra: []float32{0, 1e-8, -1e-5, 50}, tol: func(x float64) float64 {
		c := math.Cosh(x)
		return 1e-6/(c*c) + 2*u
	}},
	{op: tensor.ReLU, lo: -5, hi: 5, tol: func(float64) float64 { return 0 }},
	{op: tensor.Exp, lo: -80, hi: 80, extra: []float32{0, 88, -87}, tol: func(x float64) float64 { return 1e-6 * math.Exp(x) }},
	{op: tensor.Neg, lo: -5, hi: 5, tol: func(float64) float64 { return 0 }},
	// 0.5/√x: two correctly rounded operations. (Inputs stay away from 0,
	// where finite differences of √x need steps far below the default.)
	{op: tensor.Sqrt, lo: 0.5, hi: 1e4, extra: []float32{0.5, 1e4}, tol: func(x float64) float64 { return u / math.Sqrt(x) }},
	// 2x is exact.
	{op: tensor.Square, lo: -1e3, hi: 1e3, extra: []float32{1e-20}, tol: func(float64) float64 { return 0 }},
}

// forwardOf is the float64 definition of op (from the forward tests).
func forwardOf(op tensor.UnaryOp) func(float64) float64 {
	for _, s := range unarySpecs {
		if s.op == op {
			return s.f
		}
	}
	return nil
}

// backUnary: every op on a few shapes, through Ops, directly, and in
// place (dx aliasing dy); then ReLU's slope at 0, which is PyTorch's 0.
func backUnary(h *harness) {
	for _, s := range unaryBackSpecs {
		f := forwardOf(s.op)
		if f == nil {
			h.t.Errorf("%v: no forward definition", s.op)
			continue
		}
		for _, shape := range [][]int{{1}, {3, 7}, {2, 1, 9}} {
			n := numElems(shape)
			x, dy := h.uniform(n, s.lo, s.hi), h.randn(n, 1)
			copy(x, s.extra[:min(len(s.extra), n)])
			p := widen(x)
			grad, bound := fdGrad(p, widen(dy), func() []float64 {
				y := make([]float64, len(p))
				for i, v := range p {
					y[i] = f(v)
				}
				return y
			})
			tol := make([]float64, n)
			for i, v := range x {
				tol[i] = math.Abs(float64(dy[i]))*s.tol(float64(v)) + u*math.Abs(grad[i]) + minNormal
			}
			want, tols := withFD(grad, bound, nil, tol)
			name := fmt.Sprintf("%v backward %v", s.op, shape)
			tx, tdy := h.input(x, shape...), h.input(dy, shape...)
			for _, got := range h.both(name, dtype.F32, shape,
				func() *tensor.Tensor { return h.ops.UnaryBackward(tdy, tx, s.op) },
				func(dst *tensor.Tensor) error { return h.be.UnaryBackward(dst, tdy, tx, s.op) }) {
				h.near(name, got, want, tols)
			}
			h.ops.UnaryBackwardInPlace(tdy, tx, s.op)
			if h.ok(name + " in place") {
				h.near(name+" in place", h.download(tdy), want, tols)
			}
		}
	}
	// Where finite differences cannot go: ReLU at ±0, and arguments that
	// saturate σ, tanh or exp (or overflow x³), whose slopes are exactly 1
	// or 0 in float32, never NaN.
	big := float32(1e20)
	for _, c := range []struct {
		op      tensor.UnaryOp
		x, want []float32
	}{
		{tensor.ReLU, []float32{0, float32(math.Copysign(0, -1)), 1, -1}, []float32{0, 0, 1, 0}},
		{tensor.SiLU, []float32{big, -big, 200, -200}, []float32{1, 0, 1, 0}},
		{tensor.GELUTanh, []float32{big, -big, 200, -200}, []float32{1, 0, 1, 0}},
		{tensor.Sigmoid, []float32{big, -big, 200, -200}, []float32{0, 0, 0, 0}},
		{tensor.Tanh, []float32{big, -big, 200, -200}, []float32{0, 0, 0, 0}},
		{tensor.Exp, []float32{-big, -200, 0, 1}, []float32{0, 0, 1, float32(math.E)}},
	} {
		dy := []float32{2, 3, 4, 5}
		want := make([]float32, 4)
		for i := range want {
			want[i] = dy[i] * c.want[i]
		}
		name := fmt.Sprintf("%v backward at %v", c.op, c.x)
		r := h.own(h.ops.UnaryBackward(h.input(dy, 4), h.input(c.x, 4), c.op))
		if h.ok(name) {
			got := h.download(r)
			if c.op == tensor.Exp { // e·5 is one rounding of a transcendental
				h.near(name, got, widen(want), relTol(widen(want), 1e-6, 0))
			} else {
				h.exact(name, got, want)
			}
		}
	}
}

// backRope: the gradient of Rope with the tables testRope uses, through
// Ops, directly and in place. Like the forward's, the result is one float64
// evaluation rounded to float32: within u·|result| (plus the float64
// rounding of the products).
func backRope(h *harness) {
	for _, shape := range [][]int{{1, 1, 1, 2}, {2, 5, 3, 8}, {1, 7, 2, 6}} {
		l, d := shape[1], shape[3]
		cos, sin := ropeTables(l, d)
		x, dy := h.randn(numElems(shape), 3), h.randn(numElems(shape), 1)
		p := widen(x)
		grad, bound := fdGrad(p, widen(dy), func() []float64 { return rope64(p, shape, cos, sin) })
		tol := make([]float64, len(x))
		for i := range tol {
			pair := i &^ 1
			tol[i] = u*math.Abs(grad[i]) + math.Ldexp(math.Abs(float64(dy[pair]))+math.Abs(float64(dy[pair+1])), -50)
		}
		want, tols := withFD(grad, bound, nil, tol)
		name := fmt.Sprintf("rope backward %v", shape)
		tdy := h.input(dy, shape...)
		tc, ts := h.f64Input(cos, l, d/2), h.f64Input(sin, l, d/2)
		for _, got := range h.both(name, dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.RopeBackward(tdy, tc, ts) },
			func(dst *tensor.Tensor) error { return h.be.RopeBackward(dst, tdy, tc, ts) }) {
			h.near(name, got, want, tols)
		}
		if err := call(func() error { return h.be.RopeBackward(tdy, tdy, tc, ts) }); err != nil {
			h.t.Errorf("%s in place: %v", name, err)
			continue
		}
		h.near(name+" in place", h.download(tdy), want, tols)
	}
}

// backSumTo: SumTo(g) is the gradient of broadcasting p to g's shape
// (L = Σ g·expand(p)). Each element sums cnt values of g: within
// dotTol(cnt, Σ|g|, 0) in float32.
func backSumTo(h *harness) {
	cases := []struct{ dst, a []int }{
		{[]int{2, 1, 5}, []int{2, 7, 5}},       // adaLN [B, 1, C] over [B, L, C]
		{[]int{1, 6, 4}, []int{3, 6, 4}},       // a [1, 6, dim] table over the batch
		{[]int{5}, []int{3, 4, 5}},             // a bias over leading dims
		{[]int{3, 1}, []int{3, 8}},             // sums along the rows
		{[]int{1}, []int{4, 3}},                // everything
		{[]int{}, []int{2, 3}},                 // everything, into a scalar
		{[]int{2, 3}, []int{2, 3}},             // nothing
		{[]int{1, 1, 300}, []int{2, 3, 300}},   // rows wider than one column block
		{[]int{2, 1, 3, 1}, []int{2, 4, 3, 5}}, // kept and summed dims alternate
		{[]int{4, 1, 1}, []int{4, 5, 6}},
		{[]int{3, 1}, []int{3, 0}}, // sums of nothing: zeros
	}
	for _, c := range cases {
		g := h.randn(numElems(c.a), 1)
		p := widen(h.randn(numElems(c.dst), 1))
		grad, bound := fdGrad(p, widen(g), func() []float64 { return expand64(p, c.dst, c.a) })
		mag, cnt := make([]float64, len(p)), make([]int, len(p))
		each(c.a, func(idx []int) {
			o := sourceIndex(c.dst, idx)
			mag[o] += math.Abs(float64(g[offset(c.a, idx)]))
			cnt[o]++
		})
		tol := make([]float64, len(p))
		for i := range tol {
			tol[i] = dotTol(cnt[i], mag[i], 0)
		}
		want, tols := withFD(grad, bound, nil, tol)
		name := fmt.Sprintf("sum %v to %v", c.a, c.dst)
		ta := h.input(g, c.a...)
		for _, got := range h.both(name, dtype.F32, c.dst,
			func() *tensor.Tensor { return h.ops.SumTo(ta, c.dst...) },
			func(dst *tensor.Tensor) error { return h.be.SumTo(dst, ta) }) {
			h.near(name, got, want, tols)
		}
	}
}
