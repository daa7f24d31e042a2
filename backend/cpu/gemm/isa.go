package gemm

import (
	"fmt"
	"os"
	"strings"
)

// ISALevel is an instruction-set level ferry has kernels for: portable Go,
// AVX2 with FMA (and F16C for the expanding packers), or AVX-512. The GEMM
// and backend/cpu's other kernels read FERRY_CPU through ParseISACap.
type ISALevel int

// The levels, lowest first.
const (
	ISAGeneric ISALevel = iota
	ISAAVX2
	ISAAVX512
)

func (l ISALevel) String() string {
	switch l {
	case ISAAVX2:
		return "avx2"
	case ISAAVX512:
		return "avx512"
	}
	return "generic"
}

// ParseISACap reads a FERRY_CPU value: the highest level the kernels may
// use. "", "auto" and "avx512" cap nothing; an unknown value is an error
// and caps nothing.
func ParseISACap(s string) (ISALevel, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto", "avx512":
		return ISAAVX512, nil
	case "avx2":
		return ISAAVX2, nil
	case "generic":
		return ISAGeneric, nil
	}
	return ISAAVX512, fmt.Errorf("FERRY_CPU=%q is not avx2, avx512 or generic: ignored", s)
}

// isaCap is FERRY_CPU, read once at start-up so that every GEMM built in
// the process (DefaultGo, the tile GEMM, DefaultBF16) agrees. Tests change
// it through setISACap instead, which also lets one `go test` run both the
// AVX-512 and the AVX2 selections.
var isaCap, _ = ParseISACap(os.Getenv("FERRY_CPU"))

// setISACap caps the kernels chosen from now on at l and returns a
// function restoring the previous cap. GEMMs already built keep their
// kernels. For tests; not safe while GEMMs are being built.
func setISACap(l ISALevel) (restore func()) {
	prev := isaCap
	isaCap = l
	return func() { isaCap = prev }
}

// noteISACap reads FERRY_CPU again, for go test's cache: it keys a
// package's cached result on the environment variables its tests read,
// and the start-up read above happens before it watches, so without this
// a run under another FERRY_CPU could reuse the default's results. GEMMs
// call it when they are built.
func noteISACap() { _ = os.Getenv("FERRY_CPU") }

// allows reports whether the cap lets the kernels use level l (the CPU
// must support it as well: each arch file checks that).
func allows(l ISALevel) bool { return isaCap >= l }
