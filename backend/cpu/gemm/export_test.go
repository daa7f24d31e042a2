package gemm

// CapISA caps the kernels chosen from now on at "avx2", "generic" or
// "avx512" (no cap), as FERRY_CPU does at start-up, and returns a function
// restoring the previous cap: one `go test` checks both the AVX-512 and
// the AVX2 selections. GEMMs already built keep their kernels.
func CapISA(name string) (restore func()) {
	l, err := ParseISACap(name)
	if err != nil {
		panic(err)
	}
	return setISACap(l)
}

// HasExpand reports whether the vectorised expanding packers may run
// under the current cap.
func HasExpand() bool { return hasExpand() }
