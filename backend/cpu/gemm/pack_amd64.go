//go:build amd64

package gemm

// copyRows16 copies kc steps of rows ≤ 16 contiguous floats, src steps lda
// apart, into dst packed back to back (AVX-512; callers check).
//
//go:noescape
func copyRows16(dst, src *float32, lda, rows, kc int)

// copyRows8 is copyRows16 for AVX2 (rows ≤ 8); its first fast steps may
// copy 8 floats unmasked, which needs lda ≥ 8, rows ≥ 4 and a later step
// after each (copyRowsAVX2 decides).
//
//go:noescape
func copyRows8(dst, src *float32, lda, rows, kc, fast int)
