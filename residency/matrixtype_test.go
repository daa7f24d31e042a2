package residency

import (
	"testing"

	"ferry/dtype"
)

// TestMatrixDeviceType checks the one rule the executor lays GEMM weights
// out by and the planner counts their bytes by.
func TestMatrixDeviceType(t *testing.T) {
	narrow := func(d dtype.DType) bool {
		return d == dtype.BF16 || d == dtype.F16 || d == dtype.F8E4M3 || d == dtype.F8E5M2
	}
	cases := []struct {
		stored, matrix dtype.DType
		keep           func(dtype.DType) bool
		want           dtype.DType
	}{
		{dtype.BF16, dtype.F32, nil, dtype.F32}, // no expanding GEMM: widened on the device
		{dtype.BF16, dtype.F32, narrow, dtype.BF16},
		{dtype.F16, dtype.F32, narrow, dtype.F16},
		{dtype.F8E4M3, dtype.F32, narrow, dtype.F8E4M3},
		{dtype.F8E5M2, dtype.Invalid, narrow, dtype.F8E5M2}, // zero matrix dtype is F32
		{dtype.F32, dtype.F32, narrow, dtype.F32},
		{dtype.F32, dtype.BF16, narrow, dtype.BF16},
		{dtype.F16, dtype.BF16, narrow, dtype.BF16}, // compute bf16: the bf16 GEMM's operand
		{dtype.F8E4M3, dtype.BF16, narrow, dtype.F8E4M3},
		{dtype.F8E4M3, dtype.BF16, nil, dtype.BF16},
		{dtype.I64, dtype.BF16, narrow, dtype.I64},
	}
	for _, c := range cases {
		if got := MatrixDeviceType(c.stored, c.matrix, c.keep); got != c.want {
			t.Errorf("MatrixDeviceType(%s, %s, keep %v) = %s, want %s", c.stored, c.matrix, c.keep != nil, got, c.want)
		}
	}
}
