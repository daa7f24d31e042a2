package backendtest

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// testSoftmax: rows of widths 1 to 1000, wide ranges, masked (-Inf)
// entries. Tolerance, relative: the subtraction of the max is exact to
// u·|x - max| in the exponent, exp adds a few u, the sum over n terms
// n·u, the division one more.
func testSoftmax(h *harness) {
	for _, shape := range [][]int{{1}, {5}, {3, 17}, {2, 3, 300}, {4, 1000}, {1, 1, 1, 7}} {
		x := h.uniform(numElems(shape), -15, 15)
		n := shape[len(shape)-1]
		if n > 4 {
			for i := 0; i < len(x); i += 3 * n / 2 {
				x[i] = float32(math.Inf(-1)) // masked; never a whole row
			}
		}
		want := refSoftmax(x, n)
		tol := make([]float64, len(want))
		for i, w := range want {
			tol[i] = float64(n+8+2*30)*u*w + minNormal
		}
		name := fmt.Sprintf("softmax %v", shape)
		tx := h.input(x, shape...)
		for _, got := range h.both(name, dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.Softmax(tx) },
			func(dst *tensor.Tensor) error { return h.be.Softmax(dst, tx) }) {
			h.near(name, got, want, tol)
		}
	}
}

type normCase struct {
	shape   []int
	eps     float32
	weights bool
	bias    bool
	offset  float64 // added to every input: a large mean stresses the variance
}

// testLayerNorm: with and without weight and bias; eps large enough to
// matter; rows with a mean far from zero (one-pass E[x²]-E[x]² fails
// there); tolerances from refLayerNorm.
func testLayerNorm(h *harness) {
	cases := []normCase{
		{shape: []int{1, 8}, eps: 0.5, weights: true, bias: true},
		{shape: []int{3, 7}, eps: 1e-6},
		{shape: []int{5, 64}, eps: 1e-5, weights: true},
		{shape: []int{2, 3, 333}, eps: 1e-6, bias: true},
		{shape: []int{4, 1000}, eps: 1e-6, weights: true, bias: true},
		{shape: []int{6, 96}, eps: 1e-6, weights: true, bias: true, offset: 100},
		{shape: []int{1}, eps: 1e-5, weights: true, bias: true},
	}
	for _, c := range cases {
		n := c.shape[len(c.shape)-1]
		x := h.randn(numElems(c.shape), 1)
		if c.offset != 0 {
			for i := range x {
				x[i] = float32(c.offset + 0.1*float64(x[i]))
			}
		}
		var w, b []float32
		var tw, tb *tensor.Tensor
		if c.weights {
			w = h.randn(n, 1)
			tw = h.input(w, n)
		}
		if c.bias {
			b = h.randn(n, 1)
			tb = h.input(b, n)
		}
		want, tol := refLayerNorm(x, w, b, n, float64(c.eps))
		name := fmt.Sprintf("layernorm %v eps %g w %v b %v offset %g", c.shape, c.eps, c.weights, c.bias, c.offset)
		tx := h.input(x, c.shape...)
		for _, got := range h.both(name, dtype.F32, c.shape,
			func() *tensor.Tensor { return h.ops.LayerNorm(tx, tw, tb, c.eps) },
			func(dst *tensor.Tensor) error { return h.be.LayerNorm(dst, tx, tw, tb, c.eps) }) {
			h.near(name, got, want, tol)
		}
	}
}

func testRMSNorm(h *harness) {
	cases := []normCase{
		{shape: []int{1, 8}, eps: 0.5, weights: true},
		{shape: []int{3, 7}, eps: 1e-6},
		{shape: []int{2, 5, 128}, eps: 1e-6, weights: true},
		{shape: []int{4, 1000}, eps: 1e-5, weights: true},
		{shape: []int{2, 3}, eps: 1e-6, weights: true, offset: 50},
	}
	for _, c := range cases {
		n := c.shape[len(c.shape)-1]
		x, w, tw := rmsInputs(h, c, n)
		want, tol := refRMSNorm(x, w, n, float64(c.eps))
		name := fmt.Sprintf("rmsnorm %v eps %g w %v", c.shape, c.eps, c.weights)
		tx := h.input(x, c.shape...)
		for _, got := range h.both(name, dtype.F32, c.shape,
			func() *tensor.Tensor { return h.ops.RMSNorm(tx, tw, c.eps) },
			func(dst *tensor.Tensor) error { return h.be.RMSNorm(dst, tx, tw, c.eps) }) {
			h.near(name, got, want, tol)
		}
	}
}

// rmsInputs draws an RMSNorm case's input (shifted by its offset) and,
// when it has them, its n weights, also as a tensor.
func rmsInputs(h *harness, c normCase, n int) (x, w []float32, tw *tensor.Tensor) {
	x = h.randn(numElems(c.shape), 1)
	for i := range x {
		x[i] += float32(c.offset)
	}
	if c.weights {
		w = h.randn(n, 1)
		tw = h.input(w, n)
	}
	return x, w, tw
}

// testRMSNormChannels: the channels-first norm of the VAE, checked against
// refRMSNorm on the channels-last copy; position counts around the CPU
// backend's chunk of 512, channel counts from 1 to the VAE's 384.
func testRMSNormChannels(h *harness) {
	cases := []normCase{
		{shape: []int{1, 4, 5}, eps: 0.5, weights: true},
		{shape: []int{2, 3, 7}, eps: 1e-6},
		{shape: []int{1, 1, 9}, eps: 1e-6, weights: true},
		{shape: []int{2, 96, 2, 16, 17}, eps: 1e-12, weights: true},
		{shape: []int{1, 384, 1, 8, 8}, eps: 1e-6, weights: true, offset: 20},
		{shape: []int{3, 5}, eps: 1e-6, weights: true},
	}
	for _, c := range cases {
		nb, ch := c.shape[0], c.shape[1]
		pos := numElems(c.shape) / (nb * ch)
		x, w, tw := rmsInputs(h, c, ch)
		// [N, C, P] -> [N, P, C], the reference over rows, and back.
		xl := make([]float32, len(x))
		for b := range nb {
			for k := range ch {
				for p := range pos {
					xl[(b*pos+p)*ch+k] = x[(b*ch+k)*pos+p]
				}
			}
		}
		wl, tl := refRMSNorm(xl, w, ch, float64(c.eps))
		want, tol := make([]float64, len(x)), make([]float64, len(x))
		for b := range nb {
			for k := range ch {
				for p := range pos {
					want[(b*ch+k)*pos+p], tol[(b*ch+k)*pos+p] = wl[(b*pos+p)*ch+k], tl[(b*pos+p)*ch+k]
				}
			}
		}
		name := fmt.Sprintf("rmsnorm channels %v eps %g w %v", c.shape, c.eps, c.weights)
		tx := h.input(x, c.shape...)
		for _, got := range h.both(name, dtype.F32, c.shape,
			func() *tensor.Tensor { return h.ops.RMSNormChannels(tx, tw, c.eps) },
			func(dst *tensor.Tensor) error { return h.be.RMSNormChannels(dst, tx, tw, c.eps) }) {
			h.near(name, got, want, tol)
		}
	}
}

func testGroupNorm(h *harness) {
	cases := []struct {
		normCase
		groups int
	}{
		{normCase{shape: []int{1, 4, 5}, eps: 1e-5, weights: true, bias: true}, 2},
		{normCase{shape: []int{2, 6, 3, 4}, eps: 1e-6}, 3},
		{normCase{shape: []int{1, 32, 4, 6, 5}, eps: 1e-6, weights: true, bias: true}, 32},
		{normCase{shape: []int{2, 8, 7}, eps: 0.5, weights: true}, 1},
		{normCase{shape: []int{1, 12, 3, 5}, eps: 1e-6, bias: true, offset: 30}, 4},
		{normCase{shape: []int{3, 6}, eps: 1e-6, weights: true, bias: true}, 2},
	}
	for _, c := range cases {
		ch := c.shape[1]
		x := h.randn(numElems(c.shape), 1)
		for i := range x {
			x[i] += float32(c.offset)
		}
		var w, b []float32
		var tw, tb *tensor.Tensor
		if c.weights {
			w = h.randn(ch, 1)
			tw = h.input(w, ch)
		}
		if c.bias {
			b = h.randn(ch, 1)
			tb = h.input(b, ch)
		}
		want, tol := refGroupNorm(x, w, b, c.shape, c.groups, float64(c.eps))
		name := fmt.Sprintf("groupnorm %v groups %d eps %g", c.shape, c.groups, c.eps)
		tx := h.input(x, c.shape...)
		for _, got := range h.both(name, dtype.F32, c.shape,
			func() *tensor.Tensor { return h.ops.GroupNorm(tx, tw, tb, c.groups, c.eps) },
			func(dst *tensor.Tensor) error { return h.be.GroupNorm(dst, tx, tw, tb, c.groups, c.eps) }) {
			h.near(name, got, want, tol)
		}
	}
}
