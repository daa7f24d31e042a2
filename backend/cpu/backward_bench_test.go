package cpu_test

import (
	"fmt"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// BenchmarkLinearBackward: a Wan-1.3B training step's projections, x
// [1280, 1536] (1280 tokens) through w [1536, 1536] (attention) and
// [8960, 1536] (feed-forward up), each with dx, dw and db, next to the
// forward Linear of the same shape. GFLOP/s counts 2·m·n·k per product:
// two products for the backward (dx = dy·w, dw += dyᵀ·x), one forward.
// Run briefly: go test ./backend/cpu -run X -bench LinearBackward -benchtime 3x
func BenchmarkLinearBackward(b *testing.B) {
	const m, k = 1280, 1536
	for _, g := range benchGEMMs()[1:] { // the real GEMMs, not "null"
		for _, n := range []int{1536, 8960} {
			flops := 2.0 * m * float64(n) * k
			b.Run(fmt.Sprintf("%s/n=%d/backward", g.Name(), n), func(b *testing.B) {
				x := newBench(b, g)
				xs, w, dy := x.rand(m, k), x.rand(n, k), x.rand(m, n)
				dx, dw, db := x.empty(m, k), x.empty(n, k), x.empty(n)
				x.run(func() error { return x.be.LinearBackward(dx, dw, db, dy, xs, w) })
				x.flopRate(2 * flops)
				tensor.Free(xs, w, dy, dx, dw, db)
			})
			b.Run(fmt.Sprintf("%s/n=%d/forward", g.Name(), n), func(b *testing.B) {
				x := newBench(b, g)
				xs, w, bias := x.rand(m, k), x.rand(n, k), x.rand(n)
				y := x.empty(m, n)
				x.run(func() error { return x.be.Linear(y, xs, w, bias) })
				x.flopRate(flops)
				tensor.Free(xs, w, bias, y)
			})
		}
	}
}

// BenchmarkBackwardRows: the memory-bound backward kernels at a Wan-1.3B
// layer's sizes (1280 tokens of 1536, the feed-forward's 8960), reporting
// GB/s of the bytes each reads and writes.
func BenchmarkBackwardRows(b *testing.B) {
	const m, dim, ffn = 1280, 1536, 8960
	cases := []struct {
		name  string
		bytes int64
		// setup makes the operands and returns the call and the tensors to free.
		setup func(x *bench) (func() error, []*tensor.Tensor)
	}{
		{"layernorm", 4 * 3 * m * dim, func(x *bench) (func() error, []*tensor.Tensor) {
			dx, dy, xs := x.empty(m, dim), x.rand(m, dim), x.rand(m, dim)
			w, dw, db := x.rand(dim), x.empty(dim), x.empty(dim)
			return func() error { return x.be.LayerNormBackward(dx, dw, db, dy, xs, w, 1e-6) },
				[]*tensor.Tensor{dx, dy, xs, w, dw, db}
		}},
		{"rmsnorm", 4 * 3 * m * dim, func(x *bench) (func() error, []*tensor.Tensor) {
			dx, dy, xs, w, dw := x.empty(m, dim), x.rand(m, dim), x.rand(m, dim), x.rand(dim), x.empty(dim)
			return func() error { return x.be.RMSNormBackward(dx, dw, dy, xs, w, 1e-6) },
				[]*tensor.Tensor{dx, dy, xs, w, dw}
		}},
		{"gelu_tanh", 4 * 3 * m * ffn, func(x *bench) (func() error, []*tensor.Tensor) {
			dx, dy, xs := x.empty(m, ffn), x.rand(m, ffn), x.rand(m, ffn)
			return func() error { return x.be.UnaryBackward(dx, dy, xs, tensor.GELUTanh) },
				[]*tensor.Tensor{dx, dy, xs}
		}},
		{"sumto", 4 * m * dim, func(x *bench) (func() error, []*tensor.Tensor) {
			dst, a := x.empty(1, 1, dim), x.rand(1, m, dim)
			return func() error { return x.be.SumTo(dst, a) }, []*tensor.Tensor{dst, a}
		}},
		{"bias", 4 * m * ffn, func(x *bench) (func() error, []*tensor.Tensor) {
			dy, xs, w, db := x.rand(m, ffn), x.rand(m, 1), x.rand(ffn, 1), x.empty(ffn)
			return func() error { return x.be.LinearBackward(nil, nil, db, dy, xs, w) },
				[]*tensor.Tensor{dy, xs, w, db}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			x := newBench(b, gemm.DefaultGo())
			fn, ts := c.setup(x)
			x.setBytes(c.bytes)
			x.run(fn)
			tensor.Free(ts...)
		})
	}
}
