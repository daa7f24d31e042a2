package backendtest

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// attnBwdCases: small odd shapes whose every input coordinate is checked
// by finite differences (Lq ≠ Lk both ways, B > 1, H > 1, D = 1, 3, 8,
// 24), and longer ones that span several attention tiles in both
// directions (the CPU backend's default tiles are 128 queries × 252 keys,
// so 200 × 300 and 131 × 517 cross query and key tile edges inside a
// row, and 300 × 77 splits one head's query tiles into groups), checked
// in full against the analytic gradient and at sampled coordinates by
// finite differences.
var attnBwdCases = []struct {
	attnCase
	fdSamples int // input coordinates per tensor checked by finite differences; 0: all
}{
	{attnCase: attnCase{b: 1, lq: 1, lk: 1, h: 1, d: 1, scale: 1}},
	{attnCase: attnCase{b: 2, lq: 5, lk: 7, h: 2, d: 8, scale: 0.35}},
	{attnCase: attnCase{b: 1, lq: 9, lk: 4, h: 3, d: 24, scale: 0.2}},
	{attnCase: attnCase{b: 2, lq: 13, lk: 11, h: 1, d: 3, scale: 0.6}},
	{attnCase: attnCase{b: 1, lq: 200, lk: 300, h: 2, d: 16, scale: 0.25}, fdSamples: 3},
	{attnCase: attnCase{b: 1, lq: 131, lk: 517, h: 1, d: 8, scale: 0.35}, fdSamples: 3},
	{attnCase: attnCase{b: 2, lq: 70, lk: 40, h: 3, d: 72, scale: float32(1 / math.Sqrt(72))}, fdSamples: 3},
	{attnCase: attnCase{b: 1, lq: 300, lk: 77, h: 1, d: 32, scale: float32(1 / math.Sqrt(32))}, fdSamples: 3},
}

// testAttentionBackward checks AttentionLSE against the float64 reference
// attention and log-sum-exp, and AttentionBackward against the analytic
// float64 gradient of L = Σ g·attention(q, k, v) (every element, within
// the error bound of a float32 evaluation derived in refAttentionGrad) and
// against central finite differences of the float64 reference attention.
// The backward is fed the reference's output and log-sum-exp rounded to
// float32, so that its tolerance is its own; AttentionLSE's own errors are
// bounded by its check.
func testAttentionBackward(h *harness) {
	for _, c := range attnBwdCases {
		q := h.randn(c.b*c.lq*c.h*c.d, 1)
		k := h.randn(c.b*c.lk*c.h*c.d, 1)
		v := h.randn(c.b*c.lk*c.h*c.d, 1)
		g := h.randn(c.b*c.lq*c.h*c.d, 1)
		name := fmt.Sprintf("B%d Lq%d Lk%d H%d D%d", c.b, c.lq, c.lk, c.h, c.d)
		ref := refAttentionGrad(c.attnCase, q, k, v, g)
		tq := h.input(q, c.b, c.lq, c.h, c.d)
		tk, tv := h.input(k, c.b, c.lk, c.h, c.d), h.input(v, c.b, c.lk, c.h, c.d)
		h.checkAttentionLSE(name, c.attnCase, tq, tk, tv, ref)

		tg := h.input(g, c.b, c.lq, c.h, c.d)
		tout := h.input(rounded(ref.out), c.b, c.lq, c.h, c.d)
		tlse := h.input(rounded(ref.lse), c.b, c.h, c.lq)
		qShape, kShape := []int{c.b, c.lq, c.h, c.d}, []int{c.b, c.lk, c.h, c.d}
		results := h.bothN("attention backward "+name, [][]int{qShape, kShape, kShape},
			func() []*tensor.Tensor {
				dq, dk, dv := h.ops.AttentionBackward(tg, tq, tk, tv, tout, tlse, c.scale)
				return []*tensor.Tensor{dq, dk, dv}
			},
			func(dst []*tensor.Tensor) error {
				return h.be.AttentionBackward(dst[0], dst[1], dst[2], tg, tq, tk, tv, tout, tlse, c.scale)
			})
		fd, fdTol := fdAttentionGrad(h, c.attnCase, c.fdSamples, q, k, v, g, ref.gradTol)
		for _, got := range results {
			for i, grad := range []string{"dq", "dk", "dv"} {
				h.near(fmt.Sprintf("attention backward %s %s", name, grad), got[i], ref.grad[i], ref.gradTol[i])
				h.nearAt(fmt.Sprintf("attention backward %s %s (finite differences)", name, grad), got[i], fd[i], fdTol[i])
			}
		}
	}
	h.attentionEmpty()
	h.attentionBackwardBadShapes()
}

// attentionEmpty checks the sequences of length 0: with no keys the output
// is NaN (as Attention's, and PyTorch's) and the lse -Inf (the log of an
// empty sum), and the gradients are empty sums, 0: dq with no keys, dk and
// dv with no queries.
func (h *harness) attentionEmpty() {
	q := h.input(h.randn(2*3*2*4, 1), 2, 3, 2, 4)
	noKeys := h.input(nil, 2, 0, 2, 4)
	noQueries := h.input(nil, 2, 0, 2, 4)
	k := h.input(h.randn(2*5*2*4, 1), 2, 5, 2, 4)
	out, lse := h.guarded(dtype.F32, 2, 3, 2, 4), h.guarded(dtype.F32, 2, 2, 3)
	if err := call(func() error { return h.be.AttentionLSE(out.dst, lse.dst, q, noKeys, noKeys, 1) }); err != nil {
		h.t.Errorf("attention lse with no keys: %v", err)
	} else {
		h.exact("attention lse with no keys: output", h.download(out.dst), fill32(2*3*2*4, float32(math.NaN())))
		h.exact("attention lse with no keys: lse", h.download(lse.dst), fill32(2*2*3, float32(math.Inf(-1))))
	}
	dq := h.guarded(dtype.F32, 2, 3, 2, 4)
	empty, empty2 := h.guarded(dtype.F32, 2, 0, 2, 4), h.guarded(dtype.F32, 2, 0, 2, 4)
	if err := call(func() error {
		return h.be.AttentionBackward(dq.dst, empty.dst, empty2.dst, q, q, noKeys, noKeys, q, h.input(h.randn(12, 1), 2, 2, 3), 1)
	}); err != nil {
		h.t.Errorf("attention backward with no keys: %v", err)
	} else {
		h.exact("attention backward with no keys: dq", h.download(dq.dst), fill32(2*3*2*4, 0))
	}
	dk, dv := h.guarded(dtype.F32, 2, 5, 2, 4), h.guarded(dtype.F32, 2, 5, 2, 4)
	noLSE := h.input(nil, 2, 2, 0)
	if err := call(func() error {
		return h.be.AttentionBackward(empty.dst, dk.dst, dv.dst, noQueries, noQueries, k, k, noQueries, noLSE, 1)
	}); err != nil {
		h.t.Errorf("attention backward with no queries: %v", err)
	} else {
		h.exact("attention backward with no queries: dk", h.download(dk.dst), fill32(2*5*2*4, 0))
		h.exact("attention backward with no queries: dv", h.download(dv.dst), fill32(2*5*2*4, 0))
	}
	for _, g := range []*guarded{out, lse, dq, empty, empty2, dk, dv} {
		h.intact("attention with an empty sequence", g)
	}
}

func fill32(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// checkAttentionLSE runs AttentionLSE both ways and compares its output
// with the reference attention and with Attention's (the same tiles: bit
// for bit), and its lse with the reference log-sum-exp.
func (h *harness) checkAttentionLSE(name string, c attnCase, tq, tk, tv *tensor.Tensor, ref attnGrad) {
	h.t.Helper()
	plain := h.own(h.ops.Attention(tq, tk, tv, nil, c.scale))
	if !h.ok("attention " + name) {
		return
	}
	want := h.download(plain)
	results := h.bothN("attention lse "+name, [][]int{{c.b, c.lq, c.h, c.d}, {c.b, c.h, c.lq}},
		func() []*tensor.Tensor {
			out, lse := h.ops.AttentionLSE(tq, tk, tv, c.scale)
			return []*tensor.Tensor{out, lse}
		},
		func(dst []*tensor.Tensor) error { return h.be.AttentionLSE(dst[0], dst[1], tq, tk, tv, c.scale) })
	for _, got := range results {
		h.near("attention lse "+name+" output", got[0], ref.out, ref.outTol)
		h.exact("attention lse "+name+" output against Attention's", got[0], want)
		h.near("attention lse "+name+" lse", got[1], ref.lse, ref.lseTol)
	}
}

// bothN is both for kernels with several results: it runs the front end
// (which returns them) and the kernel directly into guarded destinations
// of shapes, and returns each run's results.
func (h *harness) bothN(name string, shapes [][]int, viaOps func() []*tensor.Tensor, direct func(dst []*tensor.Tensor) error) [][][]float32 {
	h.t.Helper()
	var results [][][]float32
	var rs []*tensor.Tensor
	if err := call(func() error { rs = viaOps(); return nil }); err != nil {
		h.t.Errorf("%s via Ops: %v", name, err)
	} else if h.ok(name + " via Ops") {
		var got [][]float32
		for i, r := range rs {
			h.own(r)
			if !sameShape(r.Shape(), shapes[i]) {
				h.t.Errorf("%s via Ops: result %d has shape %v, want %v", name, i, r.Shape(), shapes[i])
				return nil
			}
			got = append(got, h.download(r))
		}
		results = append(results, got)
	}
	gs := make([]*guarded, len(shapes))
	dsts := make([]*tensor.Tensor, len(shapes))
	for i, s := range shapes {
		gs[i] = h.guarded(dtype.F32, s...)
		dsts[i] = gs[i].dst
	}
	if err := call(func() error { return direct(dsts) }); err != nil {
		h.t.Errorf("%s direct: %v", name, err)
		return results
	}
	var got [][]float32
	for i, g := range gs {
		got = append(got, h.download(g.dst))
		h.intact(fmt.Sprintf("%s result %d", name, i), g)
	}
	return append(results, got)
}

// nearAt is near for the elements where want is not NaN (the coordinates
// the finite differences did not sample are NaN).
func (h *harness) nearAt(name string, got []float32, want, tol []float64) {
	h.t.Helper()
	var g []float32
	var w, t []float64
	for i, x := range want {
		if !math.IsNaN(x) {
			g, w, t = append(g, got[i]), append(w, x), append(t, tol[i])
		}
	}
	if len(got) != len(want) {
		h.t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	h.near(name, g, w, t)
}

// attentionBackwardBadShapes hands AttentionLSE and AttentionBackward
// mismatched operands directly: each must return an error, not panic, and
// write nothing.
func (h *harness) attentionBackwardBadShapes() {
	q := h.input(h.randn(2*3*2*4, 1), 2, 3, 2, 4) // [B, Lq, H, D]
	k := h.input(h.randn(2*5*2*4, 1), 2, 5, 2, 4) // [B, Lk, H, D]
	k3 := h.input(h.randn(2*5*3*4, 1), 2, 5, 3, 4)
	lse := h.input(h.randn(2*2*3, 1), 2, 2, 3) // [B, H, Lq]
	lseT := h.input(h.randn(2*3*2, 1), 2, 3, 2)
	out := h.guarded(dtype.F32, 2, 3, 2, 4)
	wrong := h.guarded(dtype.F32, 2, 5, 2, 4) // a k-shaped dq
	dk, dv := h.guarded(dtype.F32, 2, 5, 2, 4), h.guarded(dtype.F32, 2, 5, 2, 4)
	lseDst := h.guarded(dtype.F32, 2, 2, 3)
	bf := h.guarded(dtype.BF16, 2, 3, 2, 4)
	checks := []struct {
		name string
		fn   func() error
	}{
		{"attention lse with lse [B, Lq, H]", func() error { return h.be.AttentionLSE(out.dst, lseT, q, k, k, 1) }},
		{"attention lse into wrong shape", func() error { return h.be.AttentionLSE(wrong.dst, lseDst.dst, q, k, k, 1) }},
		{"attention lse into BF16", func() error { return h.be.AttentionLSE(bf.dst, lseDst.dst, q, k, k, 1) }},
		{"attention lse with heads not matching", func() error { return h.be.AttentionLSE(out.dst, lseDst.dst, q, k3, k3, 1) }},
		{"attention backward with lse [B, Lq, H]", func() error {
			return h.be.AttentionBackward(out.dst, dk.dst, dv.dst, q, q, k, k, q, lseT, 1)
		}},
		{"attention backward with dq shaped like k", func() error {
			return h.be.AttentionBackward(wrong.dst, dk.dst, dv.dst, q, q, k, k, q, lse, 1)
		}},
		{"attention backward with dk shaped like q", func() error {
			return h.be.AttentionBackward(wrong.dst, out.dst, dv.dst, q, q, k, k, q, lse, 1)
		}},
		{"attention backward with dout shaped like k", func() error {
			return h.be.AttentionBackward(out.dst, dk.dst, dv.dst, k, q, k, k, q, lse, 1)
		}},
		{"attention backward with out shaped like k", func() error {
			return h.be.AttentionBackward(out.dst, dk.dst, dv.dst, q, q, k, k, k, lse, 1)
		}},
		{"attention backward with k and v not matching", func() error {
			return h.be.AttentionBackward(out.dst, dk.dst, dv.dst, q, q, k, k3, q, lse, 1)
		}},
		{"attention backward with heads not matching", func() error {
			return h.be.AttentionBackward(out.dst, dk.dst, dv.dst, q, q, k3, k3, q, lse, 1)
		}},
		{"attention backward into BF16", func() error {
			return h.be.AttentionBackward(bf.dst, dk.dst, dv.dst, q, q, k, k, q, lse, 1)
		}},
		{"attention backward with a nil lse", func() error {
			return h.be.AttentionBackward(out.dst, dk.dst, dv.dst, q, q, k, k, q, nil, 1)
		}},
	}
	for _, c := range checks {
		if err := call(c.fn); err == nil {
			h.t.Errorf("%s: no error", c.name)
		} else if len(err.Error()) > 6 && err.Error()[:6] == "panic:" {
			h.t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, g := range []*guarded{out, wrong, dk, dv, lseDst, bf} {
		h.intact("attention backward bad shapes", g)
		all := h.download(g.whole)
		for i, x := range all {
			if x != sentinel {
				h.t.Errorf("attention backward bad shapes: wrote %g into a destination (element %d)", x, i)
				break
			}
		}
	}
}
