package cpu

// installBackward installs k's kernels of the attention backward
// (asmKernels.install).
func (k *asmKernels) installBackward() {
	scoreGrads = func(dp, pt, dd []float32) {
		cols := len(dd)
		if cols == 0 || len(dp) < cols {
			return
		}
		rows := len(dp) / cols
		_ = pt[rows*cols-1]
		k.scoreGrads(&dp[0], &pt[0], &dd[0], rows, cols)
	}
	dot = func(a, b []float32) float32 {
		if len(a) == 0 {
			return 0
		}
		_ = b[len(a)-1]
		return k.dot(&a[0], &b[0], len(a))
	}
}

//go:noescape
func scoreGradsAVX512(dp, pt, dd *float32, rows, cols int)

//go:noescape
func dotAVX512(a, b *float32, n int) float32
