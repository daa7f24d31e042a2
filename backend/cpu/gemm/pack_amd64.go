//go:build amd64

package gemm

// copyRows16 copies kc steps of rows ≤ 16 contiguous floats, src steps lda
// apart, into dst packed back to back (AVX-512; callers check).
//
//go:noescape
func copyRows16(dst, src *float32, lda, rows, kc int)
