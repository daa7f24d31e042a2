//go:build amd64

package gemm

// The AVX2 + F16C expanding packers (expand_amd64.s): n a multiple of 16.

//go:noescape
func expandBF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func expandF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func expandE4M3AVX2(dst *float32, src *uint8, n int)

//go:noescape
func expandE5M2AVX2(dst *float32, src *uint8, n int)
