package cpu

import "ferry/tensor"

// avx2Kernels are the AVX2 + FMA versions (simd_avx2_amd64.s), for CPUs
// without AVX-512 and under FERRY_CPU=avx2. They compute what the AVX-512
// ones do, with the same exp, so both give the same results to an ulp.
var avx2Kernels = asmKernels{
	rowMax: rowMaxAVX2, expShift: expShiftAVX2, colMax: colMaxAVX2, expCols: expColsAVX2,
	scaleRow: scaleRowAVX2, addRow: addRowAVX2, sqAcc: sqAccAVX2, mulScale: mulScaleAVX2,
	unary: map[tensor.UnaryOp]func(d, x *float32, n int){
		tensor.SiLU:     siluAVX2,
		tensor.GELUTanh: geluTanhAVX2,
		tensor.GELUErf:  geluErfAVX2,
		tensor.Sigmoid:  sigmoidAVX2,
		tensor.Exp:      expAVX2,
		tensor.ReLU:     reluAVX2,
	},
	gatherPanel: gatherPanelAVX2, scoreGrads: scoreGradsAVX2, dot: dotAVX2,
}

//go:noescape
func rowMaxAVX2(s *float32, n int, init float32) float32

//go:noescape
func expShiftAVX2(s *float32, n int, m float32) float32

//go:noescape
func colMaxAVX2(mx, s *float32, rows, cols int)

//go:noescape
func expColsAVX2(s, mx, sum *float32, rows, cols int)

//go:noescape
func scaleRowAVX2(s *float32, n int, c float32)

//go:noescape
func addRowAVX2(dst, src *float32, n int)

//go:noescape
func sqAccAVX2(acc, x *float32, n int)

//go:noescape
func mulScaleAVX2(d, x, r *float32, n int, c float32)

//go:noescape
func siluAVX2(d, x *float32, n int)

//go:noescape
func sigmoidAVX2(d, x *float32, n int)

//go:noescape
func geluTanhAVX2(d, x *float32, n int)

//go:noescape
func geluErfAVX2(d, x *float32, n int)

//go:noescape
func expAVX2(d, x *float32, n int)

//go:noescape
func reluAVX2(d, x *float32, n int)

// gatherPanelAVX2 is gatherPanelAVX512 for AVX2 (see conv_panels_amd64.go:
// its loads trust tab's masks likewise).
//
//go:noescape
func gatherPanelAVX2(dst, x *float32, tab *tapRun, runs, plane, ch, tap, steps, kvol, rows int)

//go:noescape
func scoreGradsAVX2(dp, pt, dd *float32, rows, cols int)

//go:noescape
func dotAVX2(a, b *float32, n int) float32
