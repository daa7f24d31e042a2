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

// transpose8 is transpose16 for AVX2: the transpose of a rows×8 block
// (rows ≤ 8, missing rows zero) as 8 rows of 8 floats dstStride apart, the
// last stored under the mask of the low rows lanes when maskLast is set.
//
//go:noescape
func transpose8(dst *float32, dstStride int, src *float32, srcStride int, rows, maskLast int)

// copyPanel16 copies kc steps of 16 contiguous floats, src steps ldb
// apart, into dst back to back: a whole AVX2 B panel (AVX2; callers
// check).
//
//go:noescape
func copyPanel16(dst, src *float32, ldb, kc int)

// copyPanel32 is copyPanel16 for the AVX-512 kernel's 32-wide panels
// (AVX-512 F; callers check).
//
//go:noescape
func copyPanel32(dst, src *float32, ldb, kc int)

// addBiasAVX2 adds bias[:cols] to rows rows of C, ldc apart (AVX2;
// callers check with biasVec).
//
//go:noescape
func addBiasAVX2(c *float32, ldc, rows int, bias *float32, cols int)

// biasVec says addBiasAVX2 may run.
func biasVec() bool { return hasAVX2() }

// roundPairsAVX512 rounds 2·pairs floats to bf16 pair words as
// dtype.F32ToBF16 does; pairs is a multiple of 8 (AVX-512 F; callers
// check).
//
//go:noescape
func roundPairsAVX512(dst *uint32, src *float32, pairs int)

// roundPairsVec says roundPairsAVX512 may run.
func roundPairsVec() bool { return hasAVX512() }
