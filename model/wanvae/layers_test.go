package wanvae

import (
	"testing"

	"ferry/model/modeltest"
	"ferry/tensor"
)

// TestConvLastTapMatchesPaddedConv checks the first-chunk shortcut against
// the convolution it replaces: one frame behind two zero frames.
func TestConvLastTapMatchesPaddedConv(t *testing.T) {
	r := newRig(t, nil, nil)
	ops := r.ex.Ops("none")
	p := &pass{ops: ops}
	for _, tc := range []struct {
		name  string
		wt    []int
		padHW int
	}{{"3x3x3", []int{5, 4, 3, 3, 3}, 1}, {"time_conv 3x1x1", []int{8, 4, 3, 1, 1}, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			w := conv{W: ops.Upload(modeltest.Randn(1, tensor.NumElems(tc.wt)), tc.wt...), B: ops.Upload(modeltest.Randn(2, tc.wt[0]), tc.wt[0])}
			shape := []int{2, 4, 1, 6, 7}
			x := ops.Upload(modeltest.Randn(3, tensor.NumElems(shape)), shape...)
			padded := ops.Pad(x, []int{0, 0, 2, 0, 0}, []int{0, 0, 0, 0, 0})
			want := ops.Conv(padded, w.W, w.B, []int{1, 1, 1}, []int{0, tc.padHW, tc.padHW})
			got := p.convFrames(x, nil, w, 1, tc.padHW, []int{1, 1, 1}) // consumes x
			if err := ops.Err(); err != nil {
				t.Fatal(err)
			}
			if !tensor.SameShape(got.Shape(), want.Shape()) {
				t.Fatalf("shape %v, want %v", got.Shape(), want.Shape())
			}
			modeltest.Compare(t, "conv", ops.Download(got), ops.Download(want), 1e-6, 1e-6)
			tensor.Free(w.W, w.B, padded, want, got)
			if a := r.dev.Stats().Allocated; a != 0 {
				t.Errorf("%d bytes left allocated", a)
			}
		})
	}
}
