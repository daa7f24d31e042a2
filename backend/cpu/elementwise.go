package cpu

import (
	"fmt"
	"math"

	"ferry/tensor"
)

// broadcast is dst = f(a, b) described over merged dimensions: adjacent
// dimensions that are contiguous in dst, a and b alike are folded into one,
// and size-1 dimensions are dropped. What is left is usually one dimension
// (same shapes), two (a bias over leading dims: strides [0, 1]), or three (an
// adaLN modulation [B, 1, C] over [B, L, C]: b strides [C, 0, 1]).
type broadcast struct {
	dims   []int // merged dst dimensions, outermost first; never empty
	sa, sb []int // a's and b's element strides per merged dimension (0: repeated)
}

// planBroadcast checks that dst is the numpy broadcast of a and b and merges
// the dimensions.
func planBroadcast(dst, a, b []int) (broadcast, error) {
	want, err := tensor.BroadcastShape(a, b)
	if err != nil {
		return broadcast{}, fmt.Errorf("cpu: %w", err)
	}
	if !tensor.SameShape(want, dst) {
		return broadcast{}, fmt.Errorf("cpu: dst %v is not the broadcast %v of %v and %v", dst, want, a, b)
	}
	sa, sb := broadcastStrides(dst, a), broadcastStrides(dst, b)
	var p broadcast
	for i, d := range dst {
		if d == 1 {
			continue
		}
		if last := len(p.dims) - 1; last >= 0 && p.sa[last] == sa[i]*d && p.sb[last] == sb[i]*d {
			p.dims[last] *= d
			p.sa[last], p.sb[last] = sa[i], sb[i]
			continue
		}
		p.dims = append(p.dims, d)
		p.sa = append(p.sa, sa[i])
		p.sb = append(p.sb, sb[i])
	}
	if len(p.dims) == 0 {
		p.dims, p.sa, p.sb = []int{1}, []int{0}, []int{0}
	}
	return p, nil
}

// broadcastStrides gives x's element strides along dst's dimensions (x is
// right-aligned against dst; a repeated dimension has stride 0).
func broadcastStrides(dst, x []int) []int {
	s := make([]int, len(dst))
	stride := 1
	for i := len(dst) - 1; i >= 0; i-- {
		j := i - (len(dst) - len(x))
		if j < 0 || x[j] == 1 {
			continue
		}
		s[i] = stride
		stride *= x[j]
	}
	return s
}

type binaryOp uint8

const (
	opAdd binaryOp = iota
	opMul
)

// Add sets dst = a + b with numpy broadcasting; dst may alias a.
func (be *Backend) Add(dst, a, b *tensor.Tensor) error { return be.binary(dst, a, b, opAdd) }

// Mul sets dst = a * b with numpy broadcasting; dst may alias a.
func (be *Backend) Mul(dst, a, b *tensor.Tensor) error { return be.binary(dst, a, b, opMul) }

func (be *Backend) binary(dst, a, b *tensor.Tensor, op binaryOp) error {
	d, err := f32("dst", dst)
	if err != nil {
		return err
	}
	x, err := f32("a", a)
	if err != nil {
		return err
	}
	y, err := f32("b", b)
	if err != nil {
		return err
	}
	p, err := planBroadcast(dst.Shape(), a.Shape(), b.Shape())
	if err != nil || len(d) == 0 {
		return err
	}
	inner := p.dims[len(p.dims)-1]
	be.pool.For(len(d), grainStream, func(lo, hi int) {
		p.run(d, x, y, lo, hi, inner, op)
	})
	return nil
}

// run computes dst elements [lo, hi), which may start and end inside rows.
func (p *broadcast) run(d, x, y []float32, lo, hi, inner int, op binaryOp) {
	n := len(p.dims)
	var idx [16]int // odometer over the outer dims; ranks beyond 16 are not expected
	if n-1 > len(idx) {
		p.runSlow(d, x, y, lo, hi, op)
		return
	}
	row, col := lo/inner, lo%inner
	oa, ob := 0, 0
	for k, r := n-2, row; k >= 0; k-- {
		idx[k] = r % p.dims[k]
		r /= p.dims[k]
		oa += idx[k] * p.sa[k]
		ob += idx[k] * p.sb[k]
	}
	ia, ib := p.sa[n-1], p.sb[n-1]
	for pos := lo; pos < hi; {
		m := min(inner-col, hi-pos)
		binaryRow(op, d[pos:pos+m], x[oa+col*ia:], y[ob+col*ib:], ia, ib)
		pos += m
		col = 0
		for k := n - 2; k >= 0; k-- { // advance the odometer by one row
			idx[k]++
			oa += p.sa[k]
			ob += p.sb[k]
			if idx[k] < p.dims[k] {
				break
			}
			oa -= idx[k] * p.sa[k]
			ob -= idx[k] * p.sb[k]
			idx[k] = 0
		}
	}
}

// runSlow handles (absurdly) high ranks one element at a time.
func (p *broadcast) runSlow(d, x, y []float32, lo, hi int, op binaryOp) {
	for i := lo; i < hi; i++ {
		oa, ob, r := 0, 0, i
		for k := len(p.dims) - 1; k >= 0; k-- {
			c := r % p.dims[k]
			r /= p.dims[k]
			oa += c * p.sa[k]
			ob += c * p.sb[k]
		}
		binaryRow(op, d[i:i+1], x[oa:], y[ob:], 1, 1)
	}
}

// binaryRow computes d[i] = x[i*ia] op y[i*ib] for strides 0 or 1.
func binaryRow(op binaryOp, d, x, y []float32, ia, ib int) {
	switch {
	case ia == 1 && ib == 1:
		x, y = x[:len(d)], y[:len(d)]
		if op == opAdd {
			for i := range d {
				d[i] = x[i] + y[i]
			}
		} else {
			for i := range d {
				d[i] = x[i] * y[i]
			}
		}
	case ia == 1: // y repeated
		x = x[:len(d)]
		s := y[0]
		if op == opAdd {
			for i := range d {
				d[i] = x[i] + s
			}
		} else {
			for i := range d {
				d[i] = x[i] * s
			}
		}
	case ib == 1: // x repeated
		y = y[:len(d)]
		s := x[0]
		if op == opAdd {
			for i := range d {
				d[i] = s + y[i]
			}
		} else {
			for i := range d {
				d[i] = s * y[i]
			}
		}
	default:
		v := x[0] + y[0]
		if op == opMul {
			v = x[0] * y[0]
		}
		for i := range d {
			d[i] = v
		}
	}
}

// Affine sets dst = a*scale + shift; dst may alias a.
func (be *Backend) Affine(dst, a *tensor.Tensor, scale, shift float32) error {
	d, x, err := be.unaryArgs(dst, a)
	if err != nil || len(d) == 0 {
		return err
	}
	be.pool.For(len(d), grainStream, func(lo, hi int) {
		dd, xx := d[lo:hi], x[lo:hi]
		for i := range dd {
			dd[i] = xx[i]*scale + shift
		}
	})
	return nil
}

// Clamp limits every element to [lo, hi] (NaN stays NaN); dst may alias a.
func (be *Backend) Clamp(dst, a *tensor.Tensor, lo, hi float32) error {
	d, x, err := be.unaryArgs(dst, a)
	if err != nil || len(d) == 0 {
		return err
	}
	be.pool.For(len(d), grainStream, func(s, e int) {
		dd, xx := d[s:e], x[s:e]
		for i, v := range xx {
			if v < lo {
				v = lo
			} else if v > hi {
				v = hi
			}
			dd[i] = v
		}
	})
	return nil
}

func (be *Backend) unaryArgs(dst, a *tensor.Tensor) ([]float32, []float32, error) {
	d, err := f32("dst", dst)
	if err != nil {
		return nil, nil, err
	}
	x, err := f32("input", a)
	if err != nil {
		return nil, nil, err
	}
	if err := sameShape(dst, a); err != nil {
		return nil, nil, err
	}
	return d, x, nil
}

// Unary applies op elementwise; dst may alias a.
func (be *Backend) Unary(dst, a *tensor.Tensor, op tensor.UnaryOp) error {
	d, x, err := be.unaryArgs(dst, a)
	if err != nil {
		return err
	}
	if int(op) >= len(unaryRows) || unaryRows[op] == nil {
		return fmt.Errorf("cpu: unary op %v not implemented", op)
	}
	f := unaryRows[op]
	grain := grainMath
	if op == tensor.ReLU || op == tensor.Neg || op == tensor.Square {
		grain = grainStream
	}
	be.pool.For(len(d), grain, func(lo, hi int) { f(d[lo:hi], x[lo:hi]) })
	return nil
}

// unaryRows holds one row function per op. Transcendentals are evaluated in
// float64 and rounded once, which keeps them within half an ulp of the exact
// value (PyTorch's own float32 kernels are within a couple of ulps of it).
var unaryRows = [...]func(d, x []float32){
	tensor.SiLU:     siluRow,
	tensor.GELUTanh: geluTanhRow,
	tensor.GELUErf:  geluErfRow,
	tensor.Sigmoid:  sigmoidRow,
	tensor.Tanh:     tanhRow,
	tensor.ReLU:     reluRow,
	tensor.Exp:      expRow,
	tensor.Neg:      negRow,
	tensor.Sqrt:     sqrtRow,
	tensor.Square:   squareRow,
}

// siluRow: x·sigmoid(x) written as x / (1 + e^-x), exact in float64 for
// every float32 x (e^-x overflows to +Inf only where the result is -0).
func siluRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		f := float64(v)
		d[i] = float32(f / (1 + math.Exp(-f)))
	}
}

// geluTanhRow uses 0.5(1 + tanh(u)) = 1 / (1 + e^(-2u)), which avoids the
// cancellation of 1 + tanh(u) for very negative u.
func geluTanhRow(d, x []float32) {
	const c = 0.7978845608028654 // √(2/π)
	x = x[:len(d)]
	for i, v := range x {
		f := float64(v)
		u := c * (f + 0.044715*f*f*f)
		d[i] = float32(f / (1 + math.Exp(-2*u)))
	}
}

// geluErfRow uses 0.5(1 + erf(x/√2)) = 0.5·erfc(-x/√2), accurate in the far
// negative tail too.
func geluErfRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		f := float64(v)
		d[i] = float32(0.5 * f * math.Erfc(-f*math.Sqrt2/2))
	}
}

func sigmoidRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		d[i] = float32(1 / (1 + math.Exp(-float64(v))))
	}
}

func tanhRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		d[i] = float32(math.Tanh(float64(v)))
	}
}

func reluRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		d[i] = v
	}
}

func expRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		d[i] = float32(math.Exp(float64(v)))
	}
}

func negRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		d[i] = -v
	}
}

// sqrtRow: float64 sqrt rounded to float32 is the correctly rounded float32
// sqrt.
func sqrtRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		d[i] = float32(math.Sqrt(float64(v)))
	}
}

func squareRow(d, x []float32) {
	x = x[:len(d)]
	for i, v := range x {
		d[i] = v * v
	}
}
