package cpu

import (
	"os"
	"sync"

	"ferry/backend/cpu/gemm"
)

// isaLevel is an instruction-set level the non-GEMM kernels have versions
// for (gemm.ISALevel: the GEMM's levels, one FERRY_CPU for both).
type isaLevel = gemm.ISALevel

const (
	isaGeneric = gemm.ISAGeneric
	isaAVX2    = gemm.ISAAVX2
	isaAVX512  = gemm.ISAAVX512
)

// parseISACap reads a FERRY_CPU value as the GEMM does.
func parseISACap(s string) (isaLevel, error) { return gemm.ParseISACap(s) }

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
func KernelISA() string {
	_ = os.Getenv("FERRY_CPU") // for go test's cache, as gemm's noteISACap
	return installedISA.String()
}

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
