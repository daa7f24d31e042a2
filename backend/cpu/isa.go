package cpu

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// isaLevel is an instruction-set level the non-GEMM kernels have versions
// for: the portable Go loops, AVX2 with FMA, or AVX-512 F.
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

// parseISACap reads a FERRY_CPU value: the highest level the kernels may
// use. "" (and "auto") leaves the choice to the CPU. An unknown value is
// an error, and caps nothing.
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

// isaCap is FERRY_CPU, read once: a machine with AVX-512 can then run and
// measure what an AVX2-only one runs.
var isaCap = sync.OnceValues(func() (isaLevel, error) { return parseISACap(os.Getenv("FERRY_CPU")) })

// selectedISA is the level the kernels use: the best the CPU supports,
// capped by FERRY_CPU.
func selectedISA() isaLevel {
	c, _ := isaCap()
	return min(detectedISA(), c)
}

// KernelISA names the instruction-set level the CPU backend's kernels run
// at here ("avx512", "avx2" or "generic"): the best the CPU and OS support,
// lowered by FERRY_CPU. The planner's defaults and the hardware profile's
// record of the CPU depend on it.
func KernelISA() string { return installedISA.String() }

// ISAWarning is the one line to show when FERRY_CPU is set to something
// this package does not know ("" otherwise).
func ISAWarning() string {
	if _, err := isaCap(); err != nil {
		return err.Error()
	}
	return ""
}

// installedISA is the level whose kernels are installed.
var installedISA isaLevel

func init() { installKernels(selectedISA()) }

// installKernels points every kernel variable at level l's version,
// falling back to the Go one where l has none. Not safe while kernels run:
// only init and tests call it.
func installKernels(l isaLevel) {
	installGoKernels()
	installArchKernels(l)
	installedISA = l
}
