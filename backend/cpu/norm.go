package cpu

import (
	"fmt"
	"math"

	"ferry/tensor"
)

// Normalisations keep their statistics (sums, means, variances) in float64:
// it costs little next to the memory traffic and keeps every result within
// an ulp or two of the exact value, closer than PyTorch's float32 kernels
// are to it.

// lastDim is the length of t's rows (its last dimension; 1 for a scalar).
func lastDim(t *tensor.Tensor) int {
	if t.Rank() == 0 {
		return 1
	}
	return t.Dim(-1)
}

// forRows runs fn over rows [lo, hi) of width n in parallel.
func (be *Backend) forRows(rows, n, grain int, fn func(lo, hi int)) {
	be.pool.For(rows, max(1, grain/max(n, 1)), fn)
}

// Softmax sets dst = softmax(a) over the last dimension.
func (be *Backend) Softmax(dst, a *tensor.Tensor) error {
	d, x, err := be.unaryArgs(dst, a)
	if err != nil || len(d) == 0 {
		return err
	}
	n := lastDim(a)
	be.forRows(len(d)/n, n, grainMath, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmaxRow(d[r*n:(r+1)*n], x[r*n:(r+1)*n])
		}
	})
	return nil
}

// softmaxRow works when d aliases x. Like PyTorch's kernel it subtracts the
// row max in float32 before exp (an error of u·|x - max| relative, which
// only matters for entries exp makes tiny) and sums in float32 lanes.
func softmaxRow(d, x []float32) {
	copy(d, x)
	m := rowMax(d, float32(math.Inf(-1)))
	sum := expShift(d, m)
	scaleRow(d, 1/sum)
}

// LayerNorm normalises over the last dimension with the biased variance,
// then scales by w and shifts by b (either may be nil).
func (be *Backend) LayerNorm(dst, x, w, b *tensor.Tensor, eps float32) error {
	d, xs, err := be.unaryArgs(dst, x)
	if err != nil {
		return err
	}
	n := lastDim(x)
	ws, bs, err := normParams(w, b, n)
	if err != nil || len(d) == 0 {
		return err
	}
	be.forRows(len(d)/n, n, grainStream, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			layerNormRow(d[r*n:(r+1)*n], xs[r*n:(r+1)*n], ws, bs, float64(eps))
		}
	})
	return nil
}

// normParams checks the optional per-feature weight and bias.
func normParams(w, b *tensor.Tensor, n int) ([]float32, []float32, error) {
	ws, err := optF32("weight", w)
	if err != nil {
		return nil, nil, err
	}
	bs, err := optF32("bias", b)
	if err != nil {
		return nil, nil, err
	}
	if (ws != nil && len(ws) != n) || (bs != nil && len(bs) != n) {
		return nil, nil, fmt.Errorf("cpu: norm parameters %v, %v do not match %d features", w, b, n)
	}
	return ws, bs, nil
}

func meanVar(x []float32) (mean, variance float64) {
	mean = sumF64(x) / float64(len(x))
	return mean, sqDevF64(x, mean) / float64(len(x))
}

func layerNormRow(d, x, w, b []float32, eps float64) {
	mean, variance := meanVar(x)
	normRow(d, x, w, b, mean, 1/math.Sqrt(variance+eps), 0, false)
}

// RMSNorm sets dst = x / sqrt(mean(x²) + eps) * w over the last dimension
// (T5 style: no mean subtraction, no bias); w may be nil.
func (be *Backend) RMSNorm(dst, x, w *tensor.Tensor, eps float32) error {
	d, xs, err := be.unaryArgs(dst, x)
	if err != nil {
		return err
	}
	n := lastDim(x)
	ws, _, err := normParams(w, nil, n)
	if err != nil || len(d) == 0 {
		return err
	}
	be.forRows(len(d)/n, n, grainStream, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rmsNormRow(d[r*n:(r+1)*n], xs[r*n:(r+1)*n], ws, float64(eps))
		}
	})
	return nil
}

// channelChunk is how many positions RMSNormChannels normalises together:
// their running sums of squares (on the stack) stay in L1 while every
// channel's run of them streams past.
const channelChunk = 512

// RMSNormChannels normalises x [N, C, spatial...] over its channels at every
// position: x / sqrt(mean over C of x² + eps) · w[c]. It works along the
// positions, which are contiguous, so no channels-last copy is needed: a
// chunk of positions accumulates the squares channel by channel, then each
// channel's run is scaled by the chunk's reciprocal norms. Unlike the
// other norms its sums of squares are float32, one vector lane per
// position: within C·u of exact, as PyTorch's are.
func (be *Backend) RMSNormChannels(dst, x, w *tensor.Tensor, eps float32) error {
	d, xs, err := be.unaryArgs(dst, x)
	if err != nil {
		return err
	}
	if x.Rank() < 2 {
		return fmt.Errorf("cpu: rmsnorm over channels of %v: want [N, C, ...]", x)
	}
	c := x.Dim(1)
	ws, _, err := normParams(w, nil, c)
	if err != nil || len(d) == 0 {
		return err
	}
	n, pos := x.Dim(0), x.Len()/(x.Dim(0)*c)
	chunks := (pos + channelChunk - 1) / channelChunk
	be.pool.For(n*chunks, max(1, grainStream/(c*channelChunk)), func(lo, hi int) {
		var acc, r [channelChunk]float32
		for it := lo; it < hi; it++ {
			img, p0 := it/chunks, it%chunks*channelChunk
			np := min(channelChunk, pos-p0)
			base := img * c * pos
			channelNorm(d[base:base+c*pos], xs[base:base+c*pos], ws, acc[:np], r[:np], c, pos, p0, float64(eps))
		}
	})
	return nil
}

// channelNorm normalises positions [p0, p0+len(acc)) of one image's [C,
// pos] slab x into d.
func channelNorm(d, x, w, acc, r []float32, c, pos, p0 int, eps float64) {
	np := len(acc)
	clear(acc)
	for ch := range c {
		sqAcc(acc, x[ch*pos+p0:ch*pos+p0+np])
	}
	for i, q := range acc {
		r[i] = float32(1 / math.Sqrt(float64(q)/float64(c)+eps))
	}
	for ch := range c {
		g := float32(1)
		if w != nil {
			g = w[ch]
		}
		o := ch*pos + p0
		mulScale(d[o:o+np], x[o:o+np], r, g)
	}
}

// rmsNormRow: x - 0 is x exactly, so normRow with mean 0 is x·r·w.
func rmsNormRow(d, x, w []float32, eps float64) {
	x = x[:len(d)]
	r := 1 / math.Sqrt(sqDevF64(x, 0)/float64(len(x))+eps)
	normRow(d, x, w, nil, 0, r, 0, false)
}

// GroupNorm normalises x [N, C, spatial...] over groups of C/groups channels
// and all spatial positions, then applies the per-channel w and b.
func (be *Backend) GroupNorm(dst, x, w, b *tensor.Tensor, groups int, eps float32) error {
	d, xs, err := be.unaryArgs(dst, x)
	if err != nil {
		return err
	}
	if x.Rank() < 2 || groups <= 0 || x.Dim(1)%groups != 0 {
		return fmt.Errorf("cpu: %d groups do not divide the channels of %v", groups, x)
	}
	nb, c := x.Dim(0), x.Dim(1)
	ws, bs, err := normParams(w, b, c)
	if err != nil || len(d) == 0 {
		return err
	}
	spatial := len(d) / (nb * c)
	span := c / groups * spatial // elements of one group, contiguous
	stats := make([]float64, 2*nb*groups)
	be.forRows(nb*groups, span, grainStream, func(lo, hi int) {
		for g := lo; g < hi; g++ {
			mean, variance := meanVar(xs[g*span : (g+1)*span])
			stats[2*g], stats[2*g+1] = mean, 1/math.Sqrt(variance+float64(eps))
		}
	})
	be.forRows(nb*c, spatial, grainStream, func(lo, hi int) {
		for row := lo; row < hi; row++ {
			ch := row % c
			g := row/c*groups + ch/(c/groups)
			scale, shift := 1.0, 0.0
			if ws != nil {
				scale = float64(ws[ch])
			}
			if bs != nil {
				shift = float64(bs[ch])
			}
			affineRow(d[row*spatial:(row+1)*spatial], xs[row*spatial:(row+1)*spatial],
				stats[2*g], stats[2*g+1]*scale, shift)
		}
	})
	return nil
}

// affineRow sets d = (x - mean)·scale + shift in float64.
func affineRow(d, x []float32, mean, scale, shift float64) {
	normRow(d, x, nil, nil, mean, scale, shift, true)
}
