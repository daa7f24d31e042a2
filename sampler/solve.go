package sampler

import "math"

// solveInPlace solves the n x n system a x = b (a row-major) by Gaussian
// elimination with partial pivoting, leaving x in b. a is destroyed. A
// singular system gives non-finite values, as torch.linalg.solve would fail;
// the UniPC systems (Vandermonde rows of distinct r_k) are never singular.
func solveInPlace(a, b []float64, n int) {
	for col := 0; col < n; col++ {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r*n+col]) > math.Abs(a[p*n+col]) {
				p = r
			}
		}
		if p != col {
			for k := 0; k < n; k++ {
				a[p*n+k], a[col*n+k] = a[col*n+k], a[p*n+k]
			}
			b[p], b[col] = b[col], b[p]
		}
		for r := col + 1; r < n; r++ {
			f := a[r*n+col] / a[col*n+col]
			for k := col; k < n; k++ {
				a[r*n+k] -= f * a[col*n+k]
			}
			b[r] -= f * b[col]
		}
	}
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for k := r + 1; k < n; k++ {
			s -= a[r*n+k] * b[k]
		}
		b[r] = s / a[r*n+r]
	}
}
