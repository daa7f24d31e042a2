package cpu

// installRowsF64 installs the AVX2 float64 row kernels
// (rows_f64_amd64.s). Each handles whole groups of four floats (pairs of
// pairs for RoPE); the Go version finishes the row.
func installRowsF64() {
	sumF64 = func(x []float32) float64 {
		n4 := len(x) &^ 3
		if n4 == 0 {
			return sumF64Go(x)
		}
		return sumF64AVX2(&x[0], n4) + sumF64Go(x[n4:])
	}
	sqDevF64 = func(x []float32, mean float64) float64 {
		n4 := len(x) &^ 3
		if n4 == 0 {
			return sqDevF64Go(x, mean)
		}
		return sqDevF64AVX2(&x[0], n4, mean) + sqDevF64Go(x[n4:], mean)
	}
	normRow = func(d, x, w, b []float32, mean, scale, shift float64, addShift bool) {
		n4 := len(d) &^ 3
		if n4 > 0 {
			_ = x[n4-1]
			mode, wp, bp := 0, &x[0], &x[0] // wp, bp: any valid pointer where unused
			if w != nil {
				_ = w[n4-1]
				mode, wp = mode|1, &w[0]
			}
			if b != nil {
				_ = b[n4-1]
				mode, bp = mode|2, &b[0]
			}
			if addShift && w == nil && b == nil {
				mode |= 4
			}
			normRowAVX2(&d[0], &x[0], wp, bp, n4, mean, scale, shift, mode)
		}
		if n4 < len(d) {
			if w != nil {
				w = w[n4:]
			}
			if b != nil {
				b = b[n4:]
			}
			normRowGo(d[n4:], x[n4:], w, b, mean, scale, shift, addShift)
		}
	}
	ropeRow = func(d, x []float32, c, s []float64) {
		half := len(c)
		if half == 0 {
			return
		}
		pairs := half &^ 1
		_ = s[half-1]
		for h := 0; h+2*half <= len(d); h += 2 * half {
			dd, xx := d[h:h+2*half], x[h:h+2*half]
			if pairs > 0 {
				ropeAVX2(&dd[0], &xx[0], &c[0], &s[0], pairs)
			}
			if pairs < half {
				ropeRowGo(dd[2*pairs:], xx[2*pairs:], c[pairs:], s[pairs:])
			}
		}
	}
}

//go:noescape
func sumF64AVX2(x *float32, n int) float64

//go:noescape
func sqDevF64AVX2(x *float32, n int, mean float64) float64

//go:noescape
func normRowAVX2(d, x, w, b *float32, n int, mean, scale, shift float64, mode int)

//go:noescape
func ropeAVX2(d, x *float32, c, s *float64, pairs int)
