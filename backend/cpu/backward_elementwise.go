package cpu

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// UnaryBackward sets dx = dy · f′(x) for op's f; dx may alias dy.
//
// SiLU, GELUTanh, Sigmoid, Tanh and Exp (the transcendentals a transformer
// runs on whole activations) are built from the forward's sigmoid and exp
// rows, the AVX2 or AVX-512 kernels where the CPU has them, a chunk at a
// time: see logisticGrads. The others are evaluated in float64 and rounded
// once, like the forwards.
func (be *Backend) UnaryBackward(dx, dy, x *tensor.Tensor, op tensor.UnaryOp) error {
	d, g, err := be.unaryArgs(dx, dy)
	if err != nil {
		return err
	}
	xs, err := f32("x", x)
	if err != nil {
		return err
	}
	if err := sameShape(dx, x); err != nil {
		return err
	}
	if int(op) < len(logisticGrads) && logisticGrads[op] != nil {
		combine := logisticGrads[op]
		be.pool.For(len(d), grainStream, func(lo, hi int) {
			logisticGradRows(d[lo:hi], g[lo:hi], xs[lo:hi], op, combine)
		})
		return nil
	}
	if int(op) >= len(unaryGrads) || unaryGrads[op] == nil {
		return fmt.Errorf("cpu: unary op %v has no backward", op)
	}
	f := unaryGrads[op]
	grain := grainMath
	if op == tensor.ReLU || op == tensor.Neg || op == tensor.Square {
		grain = grainStream
	}
	be.pool.For(len(d), grain, func(lo, hi int) {
		dd, gg, xx := d[lo:hi], g[lo:hi], xs[lo:hi]
		for i, v := range xx {
			dd[i] = float32(float64(gg[i]) * f(float64(v)))
		}
	})
	return nil
}

// gradChunk is how many elements logisticGradRows takes at a time: its
// scratch rows live on the stack.
const gradChunk = 256

// A logisticGrad combines dx[i] = dy[i]·f′(x[i]) from s = σ(z) and
// t = σ(-z) = 1 - σ(z) at the op's z (logisticArg), or from s = e^x for Exp.
// Taking σ(-z) from the sigmoid kernel rather than 1 - s keeps the slope
// σ(z)(1-σ(z)) = s·t accurate to a few ulps where σ saturates (1 - s
// would cancel to 0 there). In float32: a few roundings per term, well
// within the 1e-6 relative that transcendental kernels are held to.
type logisticGrad func(d, g, x, s, t []float32)

var logisticGrads = [...]logisticGrad{
	tensor.SiLU: func(d, g, x, s, t []float32) { // σ(x) + x·σ(x)(1-σ(x))
		for i, v := range x {
			d[i] = g[i] * (s[i] + v*s[i]*t[i])
		}
	},
	tensor.GELUTanh: func(d, g, x, s, t []float32) {
		// d/dx ½x(1+tanh u) with u = √(2/π)(x + 0.044715x³): ½(1+tanh u) = σ(2u)
		// as in the forward, and ½x·sech²(u)·u′ with sech²(u) = 4σ(2u)σ(-2u).
		// Where σ saturates the second term is 0, even when 1 + 3·0.044715x²
		// overflows (|x| > 1e19), which would make it 0·Inf.
		const c = 0.7978845608028654
		for i, v := range x {
			st := s[i] * t[i]
			if st == 0 {
				d[i] = g[i] * s[i]
				continue
			}
			d[i] = g[i] * (s[i] + 2*c*v*st*(1+3*0.044715*v*v))
		}
	},
	tensor.Sigmoid: func(d, g, _, s, t []float32) {
		for i := range d {
			d[i] = g[i] * s[i] * t[i]
		}
	},
	tensor.Tanh: func(d, g, _, s, t []float32) { // sech²(x) = 4σ(2x)σ(-2x)
		for i := range d {
			d[i] = g[i] * 4 * s[i] * t[i]
		}
	},
	tensor.Exp: func(d, g, _, s, _ []float32) {
		for i := range d {
			d[i] = g[i] * s[i]
		}
	},
}

// logisticArg sets z to the argument of σ for op: x (SiLU, Sigmoid), 2x
// (Tanh), 2u with u = √(2/π)(x + 0.044715x³) (GELUTanh), or x for Exp.
func logisticArg(z, x []float32, op tensor.UnaryOp) {
	const c = 0.7978845608028654
	z = z[:len(x)]
	switch op {
	case tensor.Tanh:
		for i, v := range x {
			z[i] = 2 * v
		}
	case tensor.GELUTanh:
		for i, v := range x {
			z[i] = 2 * c * (v + 0.044715*v*v*v)
		}
	default:
		copy(z, x)
	}
}

// logisticGradRows runs combine over chunks of the rows.
func logisticGradRows(d, g, x []float32, op tensor.UnaryOp, combine logisticGrad) {
	var z, s, t [gradChunk]float32
	for i0 := 0; i0 < len(d); i0 += gradChunk {
		n := min(gradChunk, len(d)-i0)
		xx := x[i0 : i0+n]
		logisticArg(z[:n], xx, op)
		if op == tensor.Exp {
			unaryRows[tensor.Exp](s[:n], z[:n])
		} else {
			unaryRows[tensor.Sigmoid](s[:n], z[:n])
			for i := range n {
				z[i] = -z[i]
			}
			unaryRows[tensor.Sigmoid](t[:n], z[:n])
		}
		combine(d[i0:i0+n], g[i0:i0+n], xx, s[:n], t[:n])
	}
}

// unaryGrads holds the other ops' derivatives, evaluated in float64.
var unaryGrads = [...]func(x float64) float64{
	tensor.GELUErf: geluErfGrad,
	tensor.ReLU:    reluGrad,
	tensor.Neg:     func(float64) float64 { return -1 },
	tensor.Sqrt:    func(x float64) float64 { return 0.5 / math.Sqrt(x) },
	tensor.Square:  func(x float64) float64 { return 2 * x },
}

// reluGrad is 0 at 0, as PyTorch's is.
func reluGrad(x float64) float64 {
	if x > 0 {
		return 1
	}
	return 0
}

// geluErfGrad: d/dx x·Φ(x) = Φ(x) + x·φ(x), with Φ from erfc (accurate in
// the far negative tail, as in the forward).
func geluErfGrad(x float64) float64 {
	const invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
	return 0.5*math.Erfc(-x*math.Sqrt2/2) + x*invSqrt2Pi*math.Exp(-0.5*x*x)
}

// RopeBackward sets dx to dy rotated back by each pair's angle (the
// transpose of Rope's rotation), with the forward's F64 tables; dx may
// alias dy.
func (be *Backend) RopeBackward(dx, dy, cos, sin *tensor.Tensor) error {
	d, g, err := be.unaryArgs(dx, dy)
	if err != nil {
		return err
	}
	if err := checkRopeTables(dy, cos, sin); err != nil || len(d) == 0 {
		return err
	}
	be.ropeRows(d, g, dy, cos, sin, ropeBackRow)
	return nil
}

// checkRopeTables checks Rope's operand shapes: x [B, L, H, D] with D even
// and F64 tables [L, D/2] on this device.
func checkRopeTables(x, cos, sin *tensor.Tensor) error {
	if cos == nil || sin == nil || cos.DType() != dtype.F64 || sin.DType() != dtype.F64 {
		return fmt.Errorf("cpu: rope tables %v, %v: want F64", cos, sin)
	}
	if _, err := hostData("cos", cos); err != nil {
		return err
	}
	if _, err := hostData("sin", sin); err != nil {
		return err
	}
	if x.Rank() != 4 || x.Dim(3)%2 != 0 || !tensor.SameShape(cos.Shape(), []int{x.Dim(1), x.Dim(3) / 2}) ||
		!tensor.SameShape(sin.Shape(), cos.Shape()) {
		return fmt.Errorf("cpu: rope %v does not match tables %v, %v ([B, L, H, D], [L, D/2])", x, cos, sin)
	}
	return nil
}

// ropeBackRow rotates every head's pairs by minus the angle; d may alias g.
func ropeBackRow(d, g []float32, c, s []float64) {
	half := len(c)
	for h := 0; h < len(d); h += 2 * half {
		dd, gg := d[h:h+2*half], g[h:h+2*half]
		for j := range half {
			g0, g1 := float64(gg[2*j]), float64(gg[2*j+1])
			dd[2*j] = float32(g0*c[j] + g1*s[j])
			dd[2*j+1] = float32(g1*c[j] - g0*s[j])
		}
	}
}
