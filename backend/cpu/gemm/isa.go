package gemm

import (
	"fmt"
	"os"
	"strings"
)

// isaLevel is an instruction-set level the GEMM has kernels for: portable
// Go, AVX2 with FMA (and F16C for the expanding packers), or AVX-512.
type isaLevel int

const (
	isaGeneric isaLevel = iota
	isaAVX2
	isaAVX512
)

func (l isaLevel) String() string {
	switch l {
	case isaAVX2:
		return "avx2"
	case isaAVX512:
		return "avx512"
	}
	return "generic"
}

// parseISACap reads a FERRY_CPU value (as backend/cpu reads it): the
// highest level the kernels may use. "", "auto" and "avx512" cap nothing;
// an unknown value is an error and caps nothing.
func parseISACap(s string) (isaLevel, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto", "avx512":
		return isaAVX512, nil
	case "avx2":
		return isaAVX2, nil
	case "generic":
		return isaGeneric, nil
	}
	return isaAVX512, fmt.Errorf("FERRY_CPU=%q is not avx2, avx512 or generic: ignored", s)
}

// isaCap is FERRY_CPU, read once at start-up so that every GEMM built in
// the process (DefaultGo, the tile GEMM, DefaultBF16) agrees. Tests change
// it through setISACap instead, which also lets one `go test` run both the
// AVX-512 and the AVX2 selections.
var isaCap, _ = parseISACap(os.Getenv("FERRY_CPU"))

// setISACap caps the kernels chosen from now on at l and returns a
// function restoring the previous cap. GEMMs already built keep their
// kernels. For tests; not safe while GEMMs are being built.
func setISACap(l isaLevel) (restore func()) {
	prev := isaCap
	isaCap = l
	return func() { isaCap = prev }
}

// allows reports whether the cap lets the kernels use level l (the CPU
// must support it as well: each arch file checks that).
func allows(l isaLevel) bool { return isaCap >= l }
