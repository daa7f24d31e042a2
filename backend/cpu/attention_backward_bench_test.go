package cpu_test

import (
	"fmt"
	"math"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// BenchmarkAttentionBackward: Wan-1.3B's attention for training, B=1,
// 12 heads of 128, 1280 tokens; self-attention and cross-attention over
// 512 text tokens. Runs the inference forward (Attention), the training
// forward (AttentionLSE) and the backward, each reporting GFLOP/s: the
// forward's two products are 4·H·Lq·Lk·D flops, the backward's five
// (the scores recomputed, dV, dP, dQ, dK) 10·H·Lq·Lk·D, so equal GFLOP/s
// mean a backward 2.5 times the forward's time.
func BenchmarkAttentionBackward(b *testing.B) {
	const heads, d = 12, 128
	for _, c := range []struct{ lq, lk int }{{1280, 1280}, {1280, 512}} {
		for _, op := range []string{"forward", "forward-lse", "backward"} {
			b.Run(fmt.Sprintf("%s/Lq=%d/Lk=%d", op, c.lq, c.lk), func(b *testing.B) {
				x := newBench(b, gemm.DefaultGo())
				q, k, v := x.rand(1, c.lq, heads, d), x.rand(1, c.lk, heads, d), x.rand(1, c.lk, heads, d)
				out, lse := x.empty(1, c.lq, heads, d), x.empty(1, heads, c.lq)
				scale := float32(1 / math.Sqrt(d))
				if err := x.be.AttentionLSE(out, lse, q, k, v, scale); err != nil {
					b.Fatal(err)
				}
				flops := 4.0 * heads * float64(c.lq) * float64(c.lk) * d
				var fn func() error
				switch op {
				case "forward":
					fn = func() error { return x.be.Attention(out, q, k, v, nil, scale) }
				case "forward-lse":
					fn = func() error { return x.be.AttentionLSE(out, lse, q, k, v, scale) }
				default:
					dout := x.rand(1, c.lq, heads, d)
					grads := []*tensor.Tensor{x.empty(1, c.lq, heads, d), x.empty(1, c.lk, heads, d), x.empty(1, c.lk, heads, d)}
					fn = func() error {
						return x.be.AttentionBackward(grads[0], grads[1], grads[2], dout, q, k, v, out, lse, scale)
					}
					flops *= 2.5
				}
				x.run(fn)
				x.flopRate(flops)
			})
		}
	}
}
