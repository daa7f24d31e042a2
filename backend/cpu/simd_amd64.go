package cpu

import (
	"golang.org/x/sys/cpu"

	"ferry/tensor"
)

// hasAVX512 selects the assembly kernels in simd_amd64.s (AVX-512 F is all
// they use).
var hasAVX512 = cpu.X86.HasAVX512F

func init() {
	if !hasAVX512 {
		return
	}
	rowMax = func(s []float32, init float32) float32 {
		if len(s) == 0 {
			return init
		}
		return rowMaxAVX512(&s[0], len(s), init)
	}
	expShift = func(s []float32, m float32) float32 {
		if len(s) == 0 {
			return 0
		}
		return expShiftAVX512(&s[0], len(s), m)
	}
	scaleRow = func(s []float32, c float32) {
		if len(s) > 0 {
			scaleRowAVX512(&s[0], len(s), c)
		}
	}
	addRow = func(dst, src []float32) {
		if len(dst) > 0 {
			_ = src[len(dst)-1]
			addRowAVX512(&dst[0], &src[0], len(dst))
		}
	}
	sqAcc = func(acc, x []float32) {
		if len(acc) > 0 {
			_ = x[len(acc)-1]
			sqAccAVX512(&acc[0], &x[0], len(acc))
		}
	}
	mulScale = func(d, x, r []float32, c float32) {
		if len(d) > 0 {
			_, _ = x[len(d)-1], r[len(d)-1]
			mulScaleAVX512(&d[0], &x[0], &r[0], len(d), c)
		}
	}
	colMax = func(mx, s []float32) {
		if rows := len(s) / max(len(mx), 1); rows > 0 && len(mx) > 0 {
			colMaxAVX512(&mx[0], &s[0], rows, len(mx))
		}
	}
	expCols = func(s, mx, sum []float32) {
		if rows := len(s) / max(len(mx), 1); rows > 0 && len(mx) > 0 {
			_ = sum[len(mx)-1]
			expColsAVX512(&s[0], &mx[0], &sum[0], rows, len(mx))
		}
	}
	// The float32 vector versions of these are within a few ulps of the
	// exact values (simd_test.go measures them), as PyTorch's are.
	for op, f := range map[tensor.UnaryOp]func(d, x *float32, n int){
		tensor.SiLU:     siluAVX512,
		tensor.GELUTanh: geluTanhAVX512,
		tensor.Sigmoid:  sigmoidAVX512,
		tensor.Exp:      expAVX512,
		tensor.ReLU:     reluAVX512,
	} {
		unaryRows[op] = vectorRow(f)
	}
}

// vectorRow adapts an assembly kernel to a row function.
func vectorRow(f func(d, x *float32, n int)) func(d, x []float32) {
	return func(d, x []float32) {
		if len(d) > 0 {
			_ = x[len(d)-1]
			f(&d[0], &x[0], len(d))
		}
	}
}

//go:noescape
func rowMaxAVX512(s *float32, n int, init float32) float32

//go:noescape
func expShiftAVX512(s *float32, n int, m float32) float32

//go:noescape
func colMaxAVX512(mx, s *float32, rows, cols int)

//go:noescape
func expColsAVX512(s, mx, sum *float32, rows, cols int)

//go:noescape
func scaleRowAVX512(s *float32, n int, c float32)

//go:noescape
func addRowAVX512(dst, src *float32, n int)

//go:noescape
func sqAccAVX512(acc, x *float32, n int)

//go:noescape
func mulScaleAVX512(d, x, r *float32, n int, c float32)

//go:noescape
func siluAVX512(d, x *float32, n int)

//go:noescape
func sigmoidAVX512(d, x *float32, n int)

//go:noescape
func geluTanhAVX512(d, x *float32, n int)

//go:noescape
func expAVX512(d, x *float32, n int)

//go:noescape
func reluAVX512(d, x *float32, n int)
