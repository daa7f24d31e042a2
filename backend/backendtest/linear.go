package backendtest

import (
	"fmt"

	"ferry/dtype"
	"ferry/tensor"
)

// testLinear: ranks 1 to 3, odd sizes, K = 1, with and without bias.
// Tolerance: a float32 dot product of K terms in any order (refLinear).
// BF16 weights may be refused with an error; if accepted, the result must
// be that of the bf16 weights widened exactly.
func testLinear(h *harness) {
	cases := []struct {
		x    []int
		n    int
		bias bool
	}{
		{[]int{1, 1}, 1, false},
		{[]int{5}, 3, true},
		{[]int{7, 13}, 5, true},
		{[]int{2, 3, 33}, 17, false},
		{[]int{65, 64}, 130, true},
		{[]int{4, 1}, 9, true},
		{[]int{3, 2, 1, 70}, 31, true},
	}
	for _, c := range cases {
		k := c.x[len(c.x)-1]
		m := numElems(c.x) / k
		x, w := h.randn(numElems(c.x), 1), h.randn(c.n*k, 1)
		var b []float32
		var tb *tensor.Tensor
		if c.bias {
			b = h.randn(c.n, 1)
			tb = h.input(b, c.n)
		}
		want, tol := refLinear(x, w, b, m, c.n, k)
		shape := append(append([]int(nil), c.x[:len(c.x)-1]...), c.n)
		name := fmt.Sprintf("linear %v · [%d %d]ᵀ bias %v", c.x, c.n, k, c.bias)
		tx, tw := h.input(x, c.x...), h.input(w, c.n, k)
		for _, got := range h.both(name, dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.Linear(tx, tw, tb) },
			func(dst *tensor.Tensor) error { return h.be.Linear(dst, tx, tw, tb) }) {
			h.near(name, got, want, tol)
		}
	}
	linearBF16(h)
}

func linearBF16(h *harness) {
	m, n, k := 6, 5, 19
	x, w := h.randn(m*k, 1), h.randn(n*k, 1)
	wb := make([]float32, len(w))
	for i, v := range w {
		wb[i] = roundBF16(v)
	}
	tw := h.ops.Cast(h.input(w, n, k), dtype.BF16)
	h.own(tw)
	if !h.ok("cast weights to BF16") {
		return
	}
	tx := h.input(x, m, k)
	g := h.guarded(dtype.F32, m, n)
	if err := call(func() error { return h.be.Linear(g.dst, tx, tw, nil) }); err != nil {
		h.t.Logf("linear with BF16 weights refused: %v", err)
		return
	}
	want, tol := refLinear(x, wb, nil, m, n, k)
	h.near("linear with BF16 weights", h.download(g.dst), want, tol)
	h.intact("linear with BF16 weights", g)
	linearBF16Compute(h, x, wb, tx, tw, m, n, k)
}

// linearBF16Compute: a backend that can compute in bf16 rounds the
// activations to bf16 at the GEMM input. Products of two bf16 values are
// exact in float32, so the float32 dot-product bound applies against a
// reference computed on the rounded activations.
func linearBF16Compute(h *harness, x, wb []float32, tx, tw *tensor.Tensor, m, n, k int) {
	bc, ok := h.be.(interface{ SetComputeDType(dtype.DType) error })
	if !ok || bc.SetComputeDType(dtype.BF16) != nil {
		return
	}
	defer bc.SetComputeDType(dtype.F32)
	xb := make([]float32, len(x))
	for i, v := range x {
		xb[i] = roundBF16(v)
	}
	g := h.guarded(dtype.F32, m, n)
	if err := call(func() error { return h.be.Linear(g.dst, tx, tw, nil) }); err != nil {
		h.t.Errorf("linear with BF16 compute: %v", err)
		return
	}
	want, tol := refLinear(xb, wb, nil, m, n, k)
	h.near("linear with BF16 compute", h.download(g.dst), want, tol)
	h.intact("linear with BF16 compute", g)
}

// testMatMul: batched products with b per batch or shared, transposed or
// not, many tiny batches and one batch large enough to be split inside.
func testMatMul(h *harness) {
	cases := []struct {
		a, b   []int
		transB bool
	}{
		{[]int{1, 1}, []int{1, 1}, false},
		{[]int{2, 3, 4}, []int{2, 4, 5}, false},
		{[]int{2, 3, 4}, []int{2, 5, 4}, true},
		{[]int{3, 2, 7, 4}, []int{4, 5}, false},
		{[]int{3, 2, 7, 4}, []int{1, 6, 4}, true},
		{[]int{37, 5, 6}, []int{37, 6, 3}, false},
		{[]int{2, 130, 129}, []int{2, 129, 131}, false},
		{[]int{1, 70, 90}, []int{1, 50, 90}, true},
		{[]int{4, 3, 1}, []int{4, 1, 2}, false},
	}
	for _, c := range cases {
		m, k := c.a[len(c.a)-2], c.a[len(c.a)-1]
		n := c.b[len(c.b)-1]
		if c.transB {
			n = c.b[len(c.b)-2]
		}
		batch := numElems(c.a[:len(c.a)-2])
		bBatch := numElems(c.b[:len(c.b)-2])
		a, b := h.randn(numElems(c.a), 1), h.randn(numElems(c.b), 1)
		want, tol := refMatMul(a, b, batch, bBatch, m, n, k, c.transB)
		shape := append(append([]int(nil), c.a[:len(c.a)-2]...), m, n)
		name := fmt.Sprintf("matmul %v · %v transB %v", c.a, c.b, c.transB)
		ta, tb := h.input(a, c.a...), h.input(b, c.b...)
		for _, got := range h.both(name, dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.MatMul(ta, tb, c.transB) },
			func(dst *tensor.Tensor) error { return h.be.MatMul(dst, ta, tb, c.transB) }) {
			h.near(name, got, want, tol)
		}
	}
}
