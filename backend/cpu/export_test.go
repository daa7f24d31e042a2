package cpu

// ExactGEMM is exported to the external tests (package cpu_test).
type ExactGEMM = exactGEMM

// exactGEMM is a plain float64-accumulating GEMM that reads only the
// elements of the logical matrices. (gemm.Naive reads b[p*ldb+j] before
// checking transB, and a[i*lda+p] before transA, which runs past the end of
// a transposed operand passed as a strided sub-slice; until that is fixed
// in package gemm the tests use this one.)
type exactGEMM struct{}

func (exactGEMM) Name() string { return "exact" }

func (exactGEMM) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if transA {
					ai = p*lda + i
				}
				if transB {
					bi = j*ldb + p
				}
				s += float64(a[ai]) * float64(b[bi])
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(v)
		}
	}
}

// UseKernels installs the named level's kernels ("generic", "avx2",
// "avx512") for an external test and returns the function that puts back
// the ones installed before; ok is false where this CPU cannot run them.
func UseKernels(name string) (restore func(), ok bool) {
	l, err := parseISACap(name)
	if err != nil || l > detectedISA() {
		return func() {}, false
	}
	prev := installedISA
	installKernels(l)
	return func() { installKernels(prev) }, true
}
