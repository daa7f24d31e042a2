package backendtest

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// The patterns the Wan transformer's backward builds from forward ops and
// SumTo, checked through Ops against finite differences of the composite
// forward.

// backModulation: adaLN's y = x·(1+scale) + shift with scale, shift
// [B, 1, dim] against x [B, L, dim], and the gate y = a·gate, whose
// gradients are dx = g·(1+scale) (Affine then a broadcasting Mul: within
// 3u·|dx|, two roundings), dscale = SumTo(g·x) (a float32 dot product over
// L) and dshift = SumTo(g) (a sum over L); and the modulation table
// mods = table [1, 6, dim] + temb [B, 6, dim], whose dtable = SumTo(g)
// sums over B.
func backModulation(h *harness) {
	for _, s := range [][]int{{2, 5, 6}, {1, 7, 3}, {3, 1, 4}} {
		backAdaLN(h, s[0], s[1], s[2])
	}
	for _, b := range []int{1, 2, 3} {
		backTable(h, b, 5)
	}
}

func backAdaLN(h *harness, b, l, dim int) {
	xs, ms := []int{b, l, dim}, []int{b, 1, dim}
	x, g := h.randn(b*l*dim, 1), h.randn(b*l*dim, 1)
	scale, shift := h.randn(b*dim, 0.5), h.randn(b*dim, 1)
	p, at := concat64(x, scale, shift)
	grad, bound := fdGrad(p, widen(g), func() []float64 {
		one := make([]float64, at[2]-at[1])
		for i, v := range p[at[1]:at[2]] {
			one[i] = 1 + v
		}
		y := binary64(p[at[0]:at[1]], xs, one, ms, xs, true)
		return binary64(y, xs, p[at[2]:at[3]], ms, xs, false)
	})
	tdx, tds, tdh := make([]float64, len(x)), make([]float64, len(scale)), make([]float64, len(shift))
	each(xs, func(idx []int) {
		i, j := offset(xs, idx), sourceIndex(ms, idx)
		gv := math.Abs(float64(g[i]))
		tdx[i] = 3 * u * gv * math.Abs(1+float64(scale[j]))
		tds[j] += gv * math.Abs(float64(x[i]))
		tdh[j] += gv
	})
	for j := range tds {
		tds[j], tdh[j] = dotTol(l, tds[j], 0), dotTol(l, tdh[j], 0)
	}
	name := fmt.Sprintf("adaLN backward x %v", xs)
	tx, tg := h.input(x, xs...), h.input(g, xs...)
	tscale := h.input(scale, ms...)
	onePlus := h.own(h.ops.Affine(tscale, 1, 1))
	dx := h.own(h.ops.Mul(tg, onePlus))
	gx := h.own(h.ops.Mul(tg, tx))
	dscale := h.own(h.ops.SumTo(gx, ms...))
	dshift := h.own(h.ops.SumTo(tg, ms...))
	if !h.ok(name) {
		return
	}
	for _, c := range []struct {
		what string
		t    *tensor.Tensor
		part int
		tol  []float64
	}{{"dx", dx, 0, tdx}, {"dscale (also a gate's gradient)", dscale, 1, tds}, {"dshift", dshift, 2, tdh}} {
		want, tols := withFD(grad[at[c.part]:at[c.part+1]], bound[at[c.part]:at[c.part+1]], nil, c.tol)
		h.near(name+" "+c.what, h.download(c.t), want, tols)
	}
}

// backTable: mods = table [1, 6, dim] + temb [B, 6, dim]; dtable sums g
// over the batch.
func backTable(h *harness, b, dim int) {
	ts, es := []int{1, 6, dim}, []int{b, 6, dim}
	table, temb, g := h.randn(6*dim, 1), h.randn(b*6*dim, 1), h.randn(b*6*dim, 1)
	p, at := concat64(table, temb)
	grad, bound := fdGrad(p, widen(g), func() []float64 {
		return binary64(p[at[0]:at[1]], ts, p[at[1]:at[2]], es, es, false)
	})
	tol := make([]float64, len(table))
	for j := range table {
		var mag float64
		for bi := range b {
			mag += math.Abs(float64(g[bi*6*dim+j]))
		}
		tol[j] = dotTol(b, mag, 0)
	}
	want, tols := withFD(grad[at[0]:at[1]], bound[at[0]:at[1]], nil, tol)
	name := fmt.Sprintf("modulation table backward, batch %d", b)
	r := h.own(h.ops.SumTo(h.input(g, es...), ts...))
	if h.ok(name) {
		h.near(name, h.download(r), want, tols)
	}
	// temb's gradient is g itself: the finite differences must say so.
	wantE, tolsE := withFD(grad[at[1]:at[2]], bound[at[1]:at[2]], nil, make([]float64, len(temb)))
	h.near(name+" (temb)", g, wantE, tolsE)
}

// backPermute: the gradient of Permute is Permute by the inverse
// permutation, checked on patchify's and unpatchify's 8-d permutes (see
// model/wan/forward.go) and attention's head swap. Elements only move, so
// the result must equal the finite differences to their own error.
func backPermute(h *harness) {
	cases := []struct{ shape, perm []int }{
		{[]int{1, 3, 2, 1, 2, 2, 3, 2}, []int{0, 2, 4, 6, 1, 3, 5, 7}}, // patchify [B, C, F, pt, H, ph, W, pw]
		{[]int{2, 1, 2, 3, 1, 2, 2, 3}, []int{0, 7, 1, 4, 2, 5, 3, 6}}, // unpatchify [B, f, h, w, pt, ph, pw, C]
		{[]int{2, 5, 3, 4}, []int{0, 2, 1, 3}},                         // [B, L, H, D] -> [B, H, L, D]
	}
	for _, c := range cases {
		out := make([]int, len(c.perm))
		inv := make([]int, len(c.perm))
		for i, ax := range c.perm {
			out[i] = c.shape[ax]
			inv[ax] = i
		}
		x, g := h.randn(numElems(c.shape), 1), h.randn(numElems(out), 1)
		p := widen(x)
		grad, bound := fdGrad(p, widen(g), func() []float64 { return permute64(p, c.shape, c.perm) })
		want, tols := withFD(grad, bound, nil, make([]float64, len(x)))
		name := fmt.Sprintf("permute %v by %v backward", c.shape, c.perm)
		tg := h.input(g, out...)
		for _, got := range h.both(name, dtype.F32, c.shape,
			func() *tensor.Tensor { return h.ops.Permute(tg, inv...) },
			func(dst *tensor.Tensor) error { return h.be.Permute(dst, tg, inv) }) {
			h.near(name, got, want, tols)
		}
	}
}

// backBadShapes hands the backward kernels mismatched operands directly:
// each must return an error, not panic, and write nothing.
func backBadShapes(h *harness) {
	x := h.input(h.randn(12, 1), 3, 4)  // [3, 4]
	dy := h.input(h.randn(15, 1), 3, 5) // [3, 5]
	w := h.input(h.randn(20, 1), 5, 4)  // [5, 4]
	v4 := h.input(h.randn(4, 1), 4)
	q := h.input(h.randn(2*3*2*4, 1), 2, 3, 2, 4)
	cs := h.f64Input(make([]float64, 4), 2, 2) // q has 3 positions
	wrong := h.guarded(dtype.F32, 5, 5)
	wv := h.guarded(dtype.F32, 7)
	bf := h.guarded(dtype.BF16, 3, 4)
	checks := []struct {
		name string
		fn   func() error
	}{
		{"linear backward into wrong dx", func() error { return h.be.LinearBackward(wrong.dst, nil, nil, dy, x, w) }},
		{"linear backward into wrong dw", func() error { return h.be.LinearBackward(nil, wrong.dst, nil, dy, x, w) }},
		{"linear backward into wrong db", func() error { return h.be.LinearBackward(nil, nil, wv.dst, dy, x, w) }},
		{"linear backward with dy of x's shape", func() error { return h.be.LinearBackward(wrong.dst, nil, nil, x, x, w) }},
		{"linear backward with wrong rows", func() error { return h.be.LinearBackward(nil, wrong.dst, nil, dy, q, w) }},
		{"linear backward into BF16 dx", func() error { return h.be.LinearBackward(bf.dst, nil, nil, dy, x, w) }},
		{"linear backward with nil weight", func() error { return h.be.LinearBackward(wrong.dst, nil, nil, dy, x, nil) }},
		{"layernorm backward with wrong weight", func() error { return h.be.LayerNormBackward(x, nil, nil, x, x, w, 1e-5) }},
		{"layernorm backward into wrong dw", func() error { return h.be.LayerNormBackward(nil, wv.dst, nil, x, x, v4, 1e-5) }},
		{"layernorm backward into wrong dx", func() error { return h.be.LayerNormBackward(wrong.dst, nil, nil, x, x, nil, 1e-5) }},
		{"layernorm backward with dy of another shape", func() error { return h.be.LayerNormBackward(x, nil, nil, dy, x, nil, 1e-5) }},
		{"rmsnorm backward into wrong dw", func() error { return h.be.RMSNormBackward(x, wv.dst, x, x, nil, 1e-5) }},
		{"rmsnorm backward into BF16 dx", func() error { return h.be.RMSNormBackward(bf.dst, nil, x, x, nil, 1e-5) }},
		{"unary backward into wrong shape", func() error { return h.be.UnaryBackward(wrong.dst, x, x, tensor.SiLU) }},
		{"unary backward with x of another shape", func() error { return h.be.UnaryBackward(x, x, dy, tensor.SiLU) }},
		{"unary backward of an unknown op", func() error { return h.be.UnaryBackward(x, x, x, tensor.UnaryOp(200)) }},
		{"rope backward with wrong tables", func() error { return h.be.RopeBackward(q, q, cs, cs) }},
		{"rope backward into wrong shape", func() error { return h.be.RopeBackward(wrong.dst, q, cs, cs) }},
		{"sum to a shape that does not broadcast", func() error { return h.be.SumTo(wrong.dst, x) }},
		{"sum to more dimensions", func() error { return h.be.SumTo(x, v4) }},
		{"sum into BF16", func() error { return h.be.SumTo(bf.dst, x) }},
	}
	for _, c := range checks {
		if err := call(c.fn); err == nil {
			h.t.Errorf("%s: no error", c.name)
		} else if len(err.Error()) > 6 && err.Error()[:6] == "panic:" {
			h.t.Errorf("%s: %v", c.name, err)
		}
	}
	h.intact("backward bad shapes", wrong)
	h.intact("backward bad shapes (vector)", wv)
	h.intact("backward bad shapes (BF16)", bf)
}
