package cpu

import (
	"math"

	"ferry/tensor"
)

// Row kernels of the online softmax. Each has a portable Go version here;
// on amd64 with AVX2 or AVX-512 the package variables below are replaced
// by assembly (installArchKernels, simd_amd64.go).
var (
	// rowMax returns the largest of init and the elements of s.
	rowMax = rowMaxGo
	// expShift replaces every s[i] by exp(s[i] - m) and returns their sum.
	// m is at least every s[i], so no term overflows.
	expShift = expShiftGo
	// scaleRow multiplies every element of s by c.
	scaleRow = scaleRowGo
	// addRow adds src to dst elementwise (len(src) >= len(dst)).
	addRow = addRowGo
	// sqAcc adds the squares of x to acc elementwise (len(x) >= len(acc)).
	sqAcc = sqAccGo
	// mulScale sets d[i] = (r[i]·c)·x[i] (x and r at least as long as d).
	mulScale = mulScaleGo

	// Column kernels of the transposed online softmax: s holds rows of
	// len(mx) columns (the scores of query c in column c).

	// colMax sets mx[c] to the largest of mx[c] and every s[r·cols + c].
	colMax = colMaxGo
	// expCols replaces every s[r·cols + c] by exp(s[r·cols + c] - mx[c])
	// and adds it to sum[c] (mx and sum have cols elements).
	expCols = expColsGo
)

func colMaxGo(mx, s []float32) {
	cols := len(mx)
	for r := 0; r+cols <= len(s); r += cols {
		for c, x := range s[r : r+cols] {
			if x > mx[c] {
				mx[c] = x
			}
		}
	}
}

// expColsGo rounds x - mx[c] to float32 first, as the vector version does.
func expColsGo(s, mx, sum []float32) {
	cols := len(mx)
	sum = sum[:cols]
	for r := 0; r+cols <= len(s); r += cols {
		row := s[r : r+cols]
		for c, x := range row {
			e := float32(math.Exp(float64(x - mx[c])))
			row[c] = e
			sum[c] += e
		}
	}
}

func sqAccGo(acc, x []float32) {
	x = x[:len(acc)]
	for i, v := range x {
		acc[i] += v * v
	}
}

func mulScaleGo(d, x, r []float32, c float32) {
	x, r = x[:len(d)], r[:len(d)]
	for i, v := range x {
		d[i] = r[i] * c * v
	}
}

func rowMaxGo(s []float32, init float32) float32 {
	m := init
	for _, x := range s {
		if x > m {
			m = x
		}
	}
	return m
}

// expShiftGo rounds x - m to float32 first, as the vector version does, so
// that both give the same results to an ulp.
func expShiftGo(s []float32, m float32) float32 {
	var sum float64
	for i, x := range s {
		e := math.Exp(float64(x - m))
		s[i] = float32(e)
		sum += e
	}
	return float32(sum)
}

func scaleRowGo(s []float32, c float32) {
	for i := range s {
		s[i] *= c
	}
}

func addRowGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] += x
	}
}

// installGoKernels points every kernel variable at its portable Go
// version, the state installArchKernels starts from.
func installGoKernels() {
	rowMax, expShift, scaleRow, addRow = rowMaxGo, expShiftGo, scaleRowGo, addRowGo
	sqAcc, mulScale, colMax, expCols = sqAccGo, mulScaleGo, colMaxGo, expColsGo
	gatherPanel, scoreGrads, dot = gatherPanelGo, scoreGradsGo, dotGo
	sumF64, sqDevF64, normRow, ropeRow = sumF64Go, sqDevF64Go, normRowGo, ropeRowGo
	unaryRows[tensor.SiLU] = siluRow
	unaryRows[tensor.GELUTanh] = geluTanhRow
	unaryRows[tensor.GELUErf] = geluErfRow
	unaryRows[tensor.Sigmoid] = sigmoidRow
	unaryRows[tensor.Exp] = expRow
	unaryRows[tensor.ReLU] = reluRow
}
