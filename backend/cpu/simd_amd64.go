package cpu

import (
	"golang.org/x/sys/cpu"

	"ferry/tensor"
)

// detectedISA is the best level whose kernels the CPU and OS run: AVX-512 F
// is all simd_amd64.s uses, AVX2 and FMA all simd_avx2_amd64.s does
// (x/sys/cpu reports AVX-512 only where the OS saves the zmm state).
func detectedISA() isaLevel {
	switch {
	case cpu.X86.HasAVX512F:
		return isaAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return isaAVX2
	}
	return isaGeneric
}

// installArchKernels installs level l's assembly kernels over the Go ones.
func installArchKernels(l isaLevel) {
	switch l {
	case isaAVX512:
		avx512Kernels.install()
	case isaAVX2:
		avx2Kernels.install()
	}
	// The float64 row kernels have only an AVX2 version, which AVX-512
	// CPUs run as well.
	if l >= isaAVX2 && cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		installRowsF64()
	}
}

// asmKernels is one level's set of assembly kernels, each the pointer
// form of the package variable of the same name (simd.go, conv_panels.go,
// attention_backward.go).
type asmKernels struct {
	rowMax      func(s *float32, n int, init float32) float32
	expShift    func(s *float32, n int, m float32) float32
	colMax      func(mx, s *float32, rows, cols int)
	expCols     func(s, mx, sum *float32, rows, cols int)
	scaleRow    func(s *float32, n int, c float32)
	addRow      func(dst, src *float32, n int)
	sqAcc       func(acc, x *float32, n int)
	mulScale    func(d, x, r *float32, n int, c float32)
	unary       map[tensor.UnaryOp]func(d, x *float32, n int)
	gatherPanel func(dst, x *float32, tab *tapRun, runs, plane, ch, tap, steps, kvol, rows int)
	scoreGrads  func(dp, pt, dd *float32, rows, cols int)
	dot         func(a, b *float32, n int) float32
}

var avx512Kernels = asmKernels{
	rowMax: rowMaxAVX512, expShift: expShiftAVX512, colMax: colMaxAVX512, expCols: expColsAVX512,
	scaleRow: scaleRowAVX512, addRow: addRowAVX512, sqAcc: sqAccAVX512, mulScale: mulScaleAVX512,
	// The float32 vector versions of these are within a few ulps of the
	// exact values (simd_test.go measures them), as PyTorch's are.
	unary: map[tensor.UnaryOp]func(d, x *float32, n int){
		tensor.SiLU:     siluAVX512,
		tensor.GELUTanh: geluTanhAVX512,
		tensor.GELUErf:  geluErfAVX512,
		tensor.Sigmoid:  sigmoidAVX512,
		tensor.Exp:      expAVX512,
		tensor.ReLU:     reluAVX512,
	},
	gatherPanel: gatherPanelAVX512, scoreGrads: scoreGradsAVX512, dot: dotAVX512,
}

// install points the package's kernel variables at k's kernels, checking
// the slice bounds the assembly cannot.
func (k *asmKernels) install() {
	rowMax = func(s []float32, init float32) float32 {
		if len(s) == 0 {
			return init
		}
		return k.rowMax(&s[0], len(s), init)
	}
	expShift = func(s []float32, m float32) float32 {
		if len(s) == 0 {
			return 0
		}
		return k.expShift(&s[0], len(s), m)
	}
	scaleRow = func(s []float32, c float32) {
		if len(s) > 0 {
			k.scaleRow(&s[0], len(s), c)
		}
	}
	addRow = func(dst, src []float32) {
		if len(dst) > 0 {
			_ = src[len(dst)-1]
			k.addRow(&dst[0], &src[0], len(dst))
		}
	}
	sqAcc = func(acc, x []float32) {
		if len(acc) > 0 {
			_ = x[len(acc)-1]
			k.sqAcc(&acc[0], &x[0], len(acc))
		}
	}
	mulScale = func(d, x, r []float32, c float32) {
		if len(d) > 0 {
			_, _ = x[len(d)-1], r[len(d)-1]
			k.mulScale(&d[0], &x[0], &r[0], len(d), c)
		}
	}
	colMax = func(mx, s []float32) {
		if rows := len(s) / max(len(mx), 1); rows > 0 && len(mx) > 0 {
			k.colMax(&mx[0], &s[0], rows, len(mx))
		}
	}
	expCols = func(s, mx, sum []float32) {
		if rows := len(s) / max(len(mx), 1); rows > 0 && len(mx) > 0 {
			_ = sum[len(mx)-1]
			k.expCols(&s[0], &mx[0], &sum[0], rows, len(mx))
		}
	}
	for op, f := range k.unary {
		unaryRows[op] = vectorRow(f)
	}
	k.installConv()
	k.installBackward()
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
func geluErfAVX512(d, x *float32, n int)

//go:noescape
func expAVX512(d, x *float32, n int)

//go:noescape
func reluAVX512(d, x *float32, n int)
