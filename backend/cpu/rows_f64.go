package cpu

// Row kernels that compute in float64 from float32 data: the statistics
// and the scaling of LayerNorm, RMSNorm and GroupNorm, and RoPE's
// rotation. Each has a portable Go version here; on amd64 with AVX2 (and
// so with AVX-512) the variables are replaced by assembly that does the
// same float64 operations in the same order, four lanes at a time (no
// fused multiply-adds where the Go version has none), so that the scaled
// rows come out identical and only the sums' rounding differs, in float64.
var (
	// sumF64 returns Σ x in float64.
	sumF64 = sumF64Go
	// sqDevF64 returns Σ (x - mean)² in float64.
	sqDevF64 = sqDevF64Go
	// normRow sets d[i] = float32((x[i] - mean)·scale·w[i] + b[i]), leaving
	// out ·w[i] where w is nil and + b[i] where b is nil; with both nil and
	// addShift, d[i] = float32((x[i] - mean)·scale + shift) (len(x), len(w),
	// len(b) >= len(d)).
	normRow = normRowGo
	// ropeRow rotates adjacent pairs of every head of one position by the
	// angles whose cosines and sines are c and s (len(c) pairs per head);
	// d may alias x.
	ropeRow = ropeRowGo
)

func sumF64Go(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}

func sqDevF64Go(x []float32, mean float64) float64 {
	var q float64
	for _, v := range x {
		c := float64(v) - mean
		q += c * c
	}
	return q
}

func normRowGo(d, x, w, b []float32, mean, scale, shift float64, addShift bool) {
	x = x[:len(d)]
	switch {
	case w != nil && b != nil:
		w, b = w[:len(d)], b[:len(d)]
		for i, v := range x {
			d[i] = float32((float64(v)-mean)*scale*float64(w[i]) + float64(b[i]))
		}
	case w != nil:
		w = w[:len(d)]
		for i, v := range x {
			d[i] = float32((float64(v) - mean) * scale * float64(w[i]))
		}
	case b != nil:
		b = b[:len(d)]
		for i, v := range x {
			d[i] = float32((float64(v)-mean)*scale + float64(b[i]))
		}
	case addShift:
		for i, v := range x {
			d[i] = float32((float64(v)-mean)*scale + shift)
		}
	default:
		for i, v := range x {
			d[i] = float32((float64(v) - mean) * scale)
		}
	}
}

func ropeRowGo(d, x []float32, c, s []float64) {
	half := len(c)
	for h := 0; h < len(d); h += 2 * half {
		dd, xx := d[h:h+2*half], x[h:h+2*half]
		for j := range half {
			x0, x1 := float64(xx[2*j]), float64(xx[2*j+1])
			dd[2*j] = float32(x0*c[j] - x1*s[j])
			dd[2*j+1] = float32(x0*s[j] + x1*c[j])
		}
	}
}
