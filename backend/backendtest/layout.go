package backendtest

import (
	"fmt"

	"ferry/dtype"
	"ferry/tensor"
)

// Layout kernels move elements: results must match bit for bit, for every
// element size (F32, BF16 and F64 are tried).

// layoutInput makes a tensor of dt and shape with random contents and
// returns the contents as exact float32 values.
func (h *harness) layoutInput(dt dtype.DType, shape ...int) (*tensor.Tensor, []float32) {
	e := h.encode(dt, numElems(shape))
	return h.inputBytes(e.raw, dt, shape...), e.want
}

func testPermute(h *harness) {
	cases := []struct {
		dt    dtype.DType
		shape []int
		perm  []int
	}{
		{dtype.F32, []int{3, 5}, []int{1, 0}},
		{dtype.F32, []int{37, 41}, []int{1, 0}},
		{dtype.F32, []int{70, 33}, []int{1, 0}},
		{dtype.F32, []int{2, 7, 3, 5}, []int{0, 2, 1, 3}},
		{dtype.F32, []int{2, 3, 7, 5}, []int{0, 2, 1, 3}},
		{dtype.F32, []int{2, 3, 4, 5}, []int{0, 2, 3, 1}},
		{dtype.F32, []int{1, 5, 1, 3}, []int{3, 2, 1, 0}},
		{dtype.F32, []int{2, 3, 4}, []int{2, 0, 1}},
		{dtype.F32, []int{2, 3, 1, 4, 5}, []int{4, 1, 3, 0, 2}},
		{dtype.F32, []int{4, 6, 5}, []int{0, 1, 2}},
		{dtype.F32, []int{1, 40, 3, 33}, []int{0, 2, 3, 1}},
		{dtype.F32, []int{5, 0, 3}, []int{2, 1, 0}},
		{dtype.F32, []int{}, []int{}},
		{dtype.BF16, []int{6, 35}, []int{1, 0}},
		{dtype.BF16, []int{2, 9, 3, 4}, []int{0, 2, 1, 3}},
		{dtype.F64, []int{3, 4, 5}, []int{2, 1, 0}},
	}
	for _, c := range cases {
		ta, a := h.layoutInput(c.dt, c.shape...)
		want, shape := refPermute(a, c.shape, c.perm)
		name := fmt.Sprintf("permute %s%v by %v", c.dt, c.shape, c.perm)
		for _, got := range h.both(name, c.dt, shape,
			func() *tensor.Tensor { return h.ops.Permute(ta, c.perm...) },
			func(dst *tensor.Tensor) error { return h.be.Permute(dst, ta, c.perm) }) {
			h.exact(name, got, want)
		}
	}
}

func testConcat(h *harness) {
	cases := []struct {
		dt     dtype.DType
		shapes [][]int
		axis   int
	}{
		{dtype.F32, [][]int{{3}, {5}}, 0},
		{dtype.F32, [][]int{{2, 3}, {4, 3}, {1, 3}}, 0},
		{dtype.F32, [][]int{{2, 3, 4}, {2, 5, 4}}, 1},
		{dtype.F32, [][]int{{2, 3, 4}, {2, 3, 1}, {2, 3, 0}, {2, 3, 7}}, 2},
		{dtype.F32, [][]int{{1, 16, 2, 5, 6}, {1, 16, 3, 5, 6}}, 2},
		{dtype.F32, [][]int{{300, 77}, {300, 1}}, 1},
		{dtype.BF16, [][]int{{3, 5}, {3, 2}}, 1},
		{dtype.F64, [][]int{{2, 2}, {1, 2}}, 0},
	}
	for _, c := range cases {
		var ts []*tensor.Tensor
		var parts [][]float32
		for _, s := range c.shapes {
			t, v := h.layoutInput(c.dt, s...)
			ts, parts = append(ts, t), append(parts, v)
		}
		want, shape := refConcat(parts, c.shapes, c.axis)
		name := fmt.Sprintf("concat %s%v along %d", c.dt, c.shapes, c.axis)
		for _, got := range h.both(name, c.dt, shape,
			func() *tensor.Tensor { return h.ops.Concat(c.axis, ts...) },
			func(dst *tensor.Tensor) error { return h.be.Concat(dst, ts, c.axis) }) {
			h.exact(name, got, want)
		}
	}
}

func testNarrow(h *harness) {
	cases := []struct {
		dt                dtype.DType
		shape             []int
		axis, start, size int
	}{
		{dtype.F32, []int{10}, 0, 3, 4},
		{dtype.F32, []int{5, 7}, 0, 4, 1},
		{dtype.F32, []int{5, 7}, 1, 0, 7},
		{dtype.F32, []int{2, 9, 4}, 1, 2, 5},
		{dtype.F32, []int{2, 9, 4}, 2, 1, 2},
		{dtype.F32, []int{2, 9, 4}, 2, 4, 0},
		{dtype.F32, []int{1, 8, 6, 5, 3}, 2, 5, 1},
		{dtype.F32, []int{3, 100003}, 1, 17, 60000},
		{dtype.BF16, []int{3, 8}, 1, 3, 3},
		{dtype.F64, []int{6, 2}, 0, 1, 4},
	}
	for _, c := range cases {
		ta, a := h.layoutInput(c.dt, c.shape...)
		want, shape := refNarrow(a, c.shape, c.axis, c.start, c.size)
		name := fmt.Sprintf("narrow %s%v axis %d [%d:+%d]", c.dt, c.shape, c.axis, c.start, c.size)
		for _, got := range h.both(name, c.dt, shape,
			func() *tensor.Tensor { return h.ops.Narrow(ta, c.axis, c.start, c.size) },
			func(dst *tensor.Tensor) error { return h.be.Narrow(dst, ta, c.axis, c.start) }) {
			h.exact(name, got, want)
		}
	}
}

func testPad(h *harness) {
	cases := []struct {
		dt            dtype.DType
		shape         []int
		before, after []int
	}{
		{dtype.F32, []int{3, 4}, []int{1, 2}, []int{0, 3}},
		{dtype.F32, []int{5}, []int{0}, []int{0}},
		{dtype.F32, []int{1, 2, 3, 4, 5}, []int{0, 0, 2, 0, 0}, []int{0, 0, 0, 0, 0}},
		{dtype.F32, []int{1, 3, 2, 6, 7}, []int{0, 0, 0, 1, 1}, []int{0, 0, 0, 1, 1}},
		{dtype.F32, []int{2, 3, 5, 5}, []int{0, 0, 0, 0}, []int{0, 0, 1, 1}},
		{dtype.F32, []int{2, 0, 3}, []int{1, 1, 1}, []int{0, 0, 2}},
		{dtype.BF16, []int{2, 3}, []int{1, 0}, []int{2, 1}},
		{dtype.F64, []int{2, 2}, []int{1, 1}, []int{1, 1}},
	}
	for _, c := range cases {
		ta, a := h.layoutInput(c.dt, c.shape...)
		want, shape := refPad(a, c.shape, c.before, c.after)
		name := fmt.Sprintf("pad %s%v by %v/%v", c.dt, c.shape, c.before, c.after)
		for _, got := range h.both(name, c.dt, shape,
			func() *tensor.Tensor { return h.ops.Pad(ta, c.before, c.after) },
			func(dst *tensor.Tensor) error { return h.be.Pad(dst, ta, c.before) }) {
			h.exact(name, got, want)
		}
	}
}

func testUpsample(h *harness) {
	cases := []struct {
		dt    dtype.DType
		shape []int
		scale []int
	}{
		{dtype.F32, []int{2, 3, 4}, []int{2, 2}},
		{dtype.F32, []int{1, 2, 3, 4, 5}, []int{1, 2, 2}},
		{dtype.F32, []int{2, 3, 4, 5}, []int{2, 1, 3}},
		{dtype.F32, []int{7}, []int{3}},
		{dtype.F32, []int{3, 4}, []int{}},
		{dtype.F32, []int{1, 1, 1}, []int{2, 2, 2}},
		{dtype.BF16, []int{2, 3, 3}, []int{2, 2}},
		{dtype.F64, []int{2, 2}, []int{2}},
	}
	for _, c := range cases {
		ta, a := h.layoutInput(c.dt, c.shape...)
		want, shape := refUpsample(a, c.shape, c.scale)
		name := fmt.Sprintf("upsample %s%v by %v", c.dt, c.shape, c.scale)
		for _, got := range h.both(name, c.dt, shape,
			func() *tensor.Tensor { return h.ops.Upsample(ta, c.scale...) },
			func(dst *tensor.Tensor) error { return h.be.Upsample(dst, ta, c.scale) }) {
			h.exact(name, got, want)
		}
	}
}
