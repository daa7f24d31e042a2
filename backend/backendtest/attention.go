package backendtest

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// attentionCases cover lengths that no power-of-two tile divides, Lq ≠ Lk
// both ways, head dims that are not multiples of 8, every bias broadcast,
// and masks (-Inf) that blank whole leading key blocks for some rows.
var attentionCases = []struct {
	attnCase
	mask string // "", "tail": last keys masked per batch, "head": first 300 keys of even rows
}{
	{attnCase: attnCase{b: 1, lq: 1, lk: 1, h: 1, d: 1, scale: 1}},
	{attnCase: attnCase{b: 1, lq: 5, lk: 7, h: 2, d: 3, scale: 0.3}},
	{attnCase: attnCase{b: 2, lq: 70, lk: 300, h: 3, d: 16, scale: 0.25, biasShape: []int{1, 1, 1, 300}}},
	{attnCase: attnCase{b: 1, lq: 131, lk: 517, h: 2, d: 72, scale: float32(1 / math.Sqrt(72)), biasShape: []int{1, 2, 131, 517}}},
	{attnCase: attnCase{b: 2, lq: 65, lk: 257, h: 2, d: 64, scale: 0.125, biasShape: []int{2, 1, 1, 257}}, mask: "tail"},
	{attnCase: attnCase{b: 1, lq: 40, lk: 600, h: 1, d: 8, scale: 0.35, biasShape: []int{1, 1, 40, 600}}, mask: "head"},
	{attnCase: attnCase{b: 1, lq: 200, lk: 33, h: 4, d: 5, scale: 0.5, biasShape: []int{1, 4, 1, 33}}},
	{attnCase: attnCase{b: 2, lq: 9, lk: 129, h: 3, d: 20, scale: 1, biasShape: []int{2, 3, 9, 129}}},
	{attnCase: attnCase{b: 1, lq: 300, lk: 300, h: 1, d: 128, scale: float32(1 / math.Sqrt(128))}},
	{attnCase: attnCase{b: 2, lq: 131, lk: 517, h: 3, d: 64, scale: 0.125}},
	{attnCase: attnCase{b: 1, lq: 70, lk: 260, h: 2, d: 72, scale: 0.2}},
}

// testAttention compares with refAttention, whose tolerance is derived
// there.
func testAttention(h *harness) {
	for _, c := range attentionCases {
		q := h.randn(c.b*c.lq*c.h*c.d, 1)
		k := h.randn(c.b*c.lk*c.h*c.d, 1)
		v := h.randn(c.b*c.lk*c.h*c.d, 1)
		var bias []float32
		var tbias *tensor.Tensor
		if c.biasShape != nil {
			bias = h.randn(numElems(c.biasShape), 2)
			maskBias(bias, c.attnCase, c.mask)
			tbias = h.input(bias, c.biasShape...)
		}
		want, tol := refAttention(c.attnCase, q, k, v, bias)
		shape := []int{c.b, c.lq, c.h, c.d}
		name := fmt.Sprintf("attention B%d Lq%d Lk%d H%d D%d bias %v %s", c.b, c.lq, c.lk, c.h, c.d, c.biasShape, c.mask)
		tq := h.input(q, shape...)
		tk, tv := h.input(k, c.b, c.lk, c.h, c.d), h.input(v, c.b, c.lk, c.h, c.d)
		for _, got := range h.both(name, dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.Attention(tq, tk, tv, tbias, c.scale) },
			func(dst *tensor.Tensor) error { return h.be.Attention(dst, tq, tk, tv, tbias, c.scale) }) {
			h.near(name, got, want, tol)
		}
	}
}

// maskBias writes -Inf into the bias: "tail" masks the last keys of each
// batch (padding of shorter prompts), "head" the first 300 keys of every
// even query row (blanking whole leading key blocks, which an online
// softmax must survive). No row is masked entirely.
func maskBias(bias []float32, c attnCase, mask string) {
	inf := float32(math.Inf(-1))
	s := c.biasShape
	switch mask {
	case "tail":
		for b := range s[0] {
			for j := c.lk - 10 - 37*b; j < c.lk; j++ {
				bias[biasIndex(c, b, 0, 0, j)] = inf
			}
		}
	case "head":
		for i := 0; i < s[2]; i += 2 {
			for j := range min(300, c.lk-1) {
				bias[biasIndex(c, 0, 0, i, j)] = inf
			}
		}
	}
}

// testRope: pairs rotated by float64 tables built like diffusers' Wan
// rotary embedding (position · inverse frequency).
func testRope(h *harness) {
	for _, shape := range [][]int{{1, 1, 1, 2}, {1, 5, 2, 8}, {2, 7, 3, 64}, {1, 33, 1, 6}} {
		l, d := shape[1], shape[3]
		cos, sin := make([]float64, l*d/2), make([]float64, l*d/2)
		for p := range l {
			for j := range d / 2 {
				theta := float64(p) / math.Pow(10000, float64(2*j)/float64(d))
				cos[p*d/2+j], sin[p*d/2+j] = math.Cos(theta), math.Sin(theta)
			}
		}
		x := h.randn(numElems(shape), 3)
		want, tol := refRope(x, shape, cos, sin)
		name := fmt.Sprintf("rope %v", shape)
		tx := h.input(x, shape...)
		tc, ts := h.f64Input(cos, l, d/2), h.f64Input(sin, l, d/2)
		for _, got := range h.both(name, dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.Rope(tx, tc, ts) },
			func(dst *tensor.Tensor) error { return h.be.Rope(dst, tx, tc, ts) }) {
			h.near(name, got, want, tol)
		}
	}
}

// testEmbedding: rows gathered exactly from F32 and BF16 tables, repeated
// and empty id lists included.
func testEmbedding(h *harness) {
	cases := []struct {
		dt   dtype.DType
		v, d int
		ids  []int32
	}{
		{dtype.F32, 11, 6, []int32{0, 10, 3, 3}},
		{dtype.F32, 5, 1, []int32{4}},
		{dtype.F32, 7, 9, nil},
		{dtype.BF16, 50, 33, []int32{49, 0, 17, 17, 2, 31, 8, 8, 8, 40, 1, 22, 9, 13, 5, 44, 3, 30, 29, 28}},
		{dtype.F32, 300, 517, []int32{299, 1, 150, 7, 7, 0, 42, 298, 100, 200, 5, 6, 77, 88, 99, 111, 222, 33}},
	}
	for _, c := range cases {
		tt, table := h.layoutInput(c.dt, c.v, c.d)
		want := make([]float32, 0, len(c.ids)*c.d)
		for _, id := range c.ids {
			want = append(want, table[int(id)*c.d:(int(id)+1)*c.d]...)
		}
		name := fmt.Sprintf("embedding %s[%d %d] ids %d", c.dt, c.v, c.d, len(c.ids))
		for _, got := range h.both(name, dtype.F32, []int{len(c.ids), c.d},
			func() *tensor.Tensor { return h.ops.Embedding(tt, c.ids) },
			func(dst *tensor.Tensor) error { return h.be.Embedding(dst, tt, c.ids) }) {
			h.exact(name, got, want)
		}
	}
}

// convCases are the Wan VAE's shapes in miniature: 3×3×3 with [0,1,1]
// padding (causal time padding done by the caller), 1×1×1, 3×1×1, 2-d
// 3×3 with stride 2, plus strides and paddings in every dim, and sizes
// large enough that a tiled implementation needs several tiles (a tile
// boundary falling inside an output row).
var convCases = []convCase{
	{x: []int{1, 3, 5, 7}, w: []int{4, 3, 3, 3}, stride: []int{1, 1}, pad: []int{1, 1}, bias: true},
	{x: []int{2, 5, 9, 8}, w: []int{6, 5, 3, 3}, stride: []int{2, 2}, pad: []int{0, 0}, bias: true},
	{x: []int{2, 7, 5, 6}, w: []int{3, 7, 1, 1}, stride: []int{1, 1}, pad: []int{0, 0}},
	{x: []int{1, 2, 6, 5}, w: []int{3, 2, 2, 3}, stride: []int{3, 1}, pad: []int{2, 3}, bias: true},
	{x: []int{1, 4, 3, 6, 7}, w: []int{5, 4, 3, 3, 3}, stride: []int{1, 1, 1}, pad: []int{0, 1, 1}, bias: true},
	{x: []int{1, 6, 5, 4, 3}, w: []int{4, 6, 3, 1, 1}, stride: []int{1, 1, 1}, pad: []int{0, 0, 0}, bias: true},
	{x: []int{2, 8, 2, 3, 5}, w: []int{9, 8, 1, 1, 1}, stride: []int{1, 1, 1}, pad: []int{0, 0, 0}},
	{x: []int{1, 3, 5, 6, 7}, w: []int{2, 3, 3, 2, 3}, stride: []int{2, 1, 2}, pad: []int{1, 2, 0}, bias: true},
	{x: []int{1, 64, 4, 12, 13}, w: []int{8, 64, 3, 3, 3}, stride: []int{1, 1, 1}, pad: []int{1, 1, 1}, bias: true},
	{x: []int{1, 5, 3, 20, 11}, w: []int{6, 5, 1, 1, 1}, stride: []int{1, 1, 1}, pad: []int{0, 0, 0}, bias: true},
	{x: []int{1, 1, 1, 1}, w: []int{1, 1, 1, 1}, stride: []int{1, 1}, pad: []int{0, 0}},
	{x: []int{1, 3, 2, 6, 33}, w: []int{5, 3, 3, 3, 3}, stride: []int{1, 1, 1}, pad: []int{1, 1, 1}, bias: true},
	{x: []int{2, 4, 9, 30}, w: []int{3, 4, 3, 3}, stride: []int{2, 1}, pad: []int{1, 2}},
}

// testConv compares with refConv (tolerance of a float32 dot product of
// C·kernel-volume terms).
func testConv(h *harness) {
	for _, c := range convCases {
		x, w := h.randn(numElems(c.x), 1), h.randn(numElems(c.w), 0.5)
		var b []float32
		var tb *tensor.Tensor
		if c.bias {
			b = h.randn(c.w[0], 1)
			tb = h.input(b, c.w[0])
		}
		want, tol := refConv(c, x, w, b)
		name := fmt.Sprintf("conv %v * %v stride %v pad %v bias %v", c.x, c.w, c.stride, c.pad, c.bias)
		tx, tw := h.input(x, c.x...), h.input(w, c.w...)
		for _, got := range h.both(name, dtype.F32, c.outShape(),
			func() *tensor.Tensor { return h.ops.Conv(tx, tw, tb, c.stride, c.pad) },
			func(dst *tensor.Tensor) error { return h.be.Conv(dst, tx, tw, tb, c.stride, c.pad) }) {
			h.near(name, got, want, tol)
		}
	}
}

// testBadShapes hands kernels a dst of the wrong shape (or wrong dtype)
// directly, bypassing Ops' checks: each must return an error, not panic and
// not write out of bounds.
func testBadShapes(h *harness) {
	a := h.input(h.randn(12, 1), 3, 4)
	b := h.input(h.randn(4, 1), 4)
	w := h.input(h.randn(20, 1), 5, 4)
	q := h.input(h.randn(2*3*2*4, 1), 2, 3, 2, 4)
	cs := h.f64Input(make([]float64, 4), 2, 2) // q has 3 positions
	wrong := h.guarded(dtype.F32, 5, 5)
	bf := h.guarded(dtype.BF16, 3, 4)
	checks := []struct {
		name string
		fn   func() error
	}{
		{"add into wrong shape", func() error { return h.be.Add(wrong.dst, a, b) }},
		{"add of non-broadcasting shapes", func() error { return h.be.Add(a, a, w) }},
		{"mul into BF16", func() error { return h.be.Mul(bf.dst, a, b) }},
		{"unary into wrong shape", func() error { return h.be.Unary(wrong.dst, a, tensor.SiLU) }},
		{"affine into wrong shape", func() error { return h.be.Affine(wrong.dst, a, 1, 0) }},
		{"clamp into wrong shape", func() error { return h.be.Clamp(wrong.dst, a, 0, 1) }},
		{"softmax into wrong shape", func() error { return h.be.Softmax(wrong.dst, a) }},
		{"layernorm with wrong weight", func() error { return h.be.LayerNorm(a, a, w, nil, 1e-5) }},
		{"rmsnorm into wrong shape", func() error { return h.be.RMSNorm(wrong.dst, a, nil, 1e-5) }},
		{"rmsnorm over channels into wrong shape", func() error { return h.be.RMSNormChannels(wrong.dst, a, nil, 1e-5) }},
		{"rmsnorm over channels with wrong weight", func() error { return h.be.RMSNormChannels(a, a, w, 1e-5) }},
		{"groupnorm with groups not dividing C", func() error { return h.be.GroupNorm(a, a, nil, nil, 5, 1e-5) }},
		{"linear into wrong shape", func() error { return h.be.Linear(wrong.dst, a, w, nil) }},
		{"linear with wrong inner dim", func() error { return h.be.Linear(wrong.dst, w, a, nil) }},
		{"matmul with wrong inner dim", func() error { return h.be.MatMul(wrong.dst, a, a, false) }},
		{"permute with a repeated axis", func() error { return h.be.Permute(a, a, []int{0, 0}) }},
		{"permute into wrong shape", func() error { return h.be.Permute(wrong.dst, a, []int{1, 0}) }},
		{"concat into wrong shape", func() error { return h.be.Concat(wrong.dst, []*tensor.Tensor{a, a}, 0) }},
		{"narrow past the end", func() error { return h.be.Narrow(wrong.dst, a, 0, 1) }},
		{"pad that does not fit", func() error { return h.be.Pad(a, wrong.dst, []int{0, 0}) }},
		{"upsample into wrong shape", func() error { return h.be.Upsample(wrong.dst, a, []int{2}) }},
		{"attention into wrong shape", func() error { return h.be.Attention(wrong.dst, q, q, q, nil, 1) }},
		{"attention with a bad bias", func() error { return h.be.Attention(q, q, q, q, a, 1) }},
		{"rope with wrong tables", func() error { return h.be.Rope(q, q, cs, cs) }},
		{"embedding with an id past the table", func() error { return h.be.Embedding(wrong.dst, w, []int32{0, 5, 1, 1, 1}) }},
		{"conv into wrong shape", func() error { return h.be.Conv(wrong.dst, q, q, nil, []int{1, 1}, []int{0, 0}) }},
		{"cast with different counts", func() error { return h.be.Cast(wrong.dst, a) }},
	}
	for _, c := range checks {
		if err := call(c.fn); err == nil {
			h.t.Errorf("%s: no error", c.name)
		} else if len(err.Error()) > 6 && err.Error()[:6] == "panic:" {
			h.t.Errorf("%s: %v", c.name, err)
		}
	}
	h.intact("bad shapes", wrong)
	h.intact("bad shapes (BF16)", bf)
}
