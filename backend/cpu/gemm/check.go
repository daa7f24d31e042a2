package gemm

import "fmt"

// Check reports whether a product's arguments are consistent: non-negative
// sizes, leading dimensions at least max(1, row length) as CBLAS requires,
// and slices long enough for every element the product reads or writes.
// Sgemm implementations call it and panic on its error (Impl has no error
// result, and carrying on would read or write out of bounds, or inside
// OpenBLAS, crash the process); callers that take sizes from untrusted
// input can call it first.
func Check(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: negative size m=%d n=%d k=%d", m, n, k)
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if err := checkMatrix("A", ar, ac, len(a), lda); err != nil {
		return err
	}
	if err := checkMatrix("B", br, bc, len(b), ldb); err != nil {
		return err
	}
	return checkMatrix("C", m, n, len(c), ldc)
}

// checkMatrix checks one stored (not transposed) rows×cols matrix.
func checkMatrix(name string, rows, cols, length, ld int) error {
	if ld < max(1, cols) {
		return fmt.Errorf("gemm: %s is %d×%d but its leading dimension is %d", name, rows, cols, ld)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if need := (rows-1)*ld + cols; length < need {
		return fmt.Errorf("gemm: %s is %d×%d with leading dimension %d and needs %d elements, has %d",
			name, rows, cols, ld, need, length)
	}
	return nil
}

// scaleC sets C = beta·C over m×n, writing zeros (not 0·NaN) when beta is 0.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}
