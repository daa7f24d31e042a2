package gemm

import (
	"time"

	"golang.org/x/sys/cpu"
)

// openBLASSpin is how long OpenBLAS 0.3's threads may spin after a call:
// 0.3.21 busy-waits for new work for about 2^28 cycles (~80 ms here).
const openBLASSpin = 150 * time.Millisecond

// Settle returns once impl's own threads have stopped spinning after its
// last call, so that they take no core from what runs next: it waits
// openBLASSpin after OpenBLAS, nothing after the others. (The Go GEMM
// timed right after OpenBLAS ran at one core's rate.)
func Settle(impl Impl) {
	if impl.Name() == "openblas" {
		time.Sleep(openBLASSpin)
	}
}

// BLASInfo describes the OpenBLAS this process loaded, for reports.
type BLASInfo struct {
	Path     string // the library file that loaded
	CoreName string // openblas_get_corename(): the kernels in use
	Config   string // openblas_get_config()
	// CoreType is the OPENBLAS_CORETYPE ferry set before loading ("" when
	// it left the environment alone); CoreTypeReason says why.
	CoreType       string
	CoreTypeReason string
	Threads        int // openblas_set_num_threads
}

// cpuFeatures is what the core type choice depends on.
type cpuFeatures struct {
	avx512 bool // AVX-512 F, BW, DQ and VL (what OpenBLAS's SkylakeX kernels use)
	bf16   bool // AVX512-BF16
}

func hostFeatures() cpuFeatures {
	x := cpu.X86
	return cpuFeatures{
		avx512: x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL,
		bf16:   x.HasAVX512BF16,
	}
}

// chooseCoreType picks OPENBLAS_CORETYPE. override (FERRY_OPENBLAS_CORETYPE)
// wins. Otherwise AVX-512 CPUs get SkylakeX: OpenBLAS 0.3.21 does not know
// AMD Zen 4/5 and falls back to the AVX2 (Haswell/Zen) kernels, as it does
// when the environment sets OPENBLAS_CORETYPE=Haswell. The brief this was
// written from measured 215 vs 410 GFLOP/s on 2 cores of a CPU with full
// 512-bit FMA units; on the 2-core development VM (AVX-512 executed as two
// 256-bit halves, ~113 GFLOP/s per core peak) Haswell gave 165-190 and
// SkylakeX 190-207. Cooperlake is not chosen for BF16 CPUs: its sgemm
// kernels are SkylakeX's (it adds bf16 routines only), and it measured the
// same (186-208). Without AVX-512 the environment's value, if any, stands.
func chooseCoreType(override string, f cpuFeatures) (coreType, reason string) {
	switch {
	case override != "":
		return override, "FERRY_OPENBLAS_CORETYPE"
	case f.avx512:
		return "SkylakeX", "CPU has AVX-512F/BW/DQ/VL"
	default:
		return "", "no AVX-512: OPENBLAS_CORETYPE left as the environment sets it"
	}
}
