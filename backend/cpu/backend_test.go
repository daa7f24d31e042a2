package cpu_test

import (
	"testing"

	"ferry/backend/backendtest"
	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// TestConformance runs the backend suite with a reference GEMM (see ExactGEMM).
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(c int64) tensor.Backend { return cpu.New(cpu.NewDevice(c), cpu.ExactGEMM{}) })
}

// TestConformanceGoGEMM runs the suite with the production Go GEMM, whose
// tiles, blocks and threads take other paths than the reference.
func TestConformanceGoGEMM(t *testing.T) {
	backendtest.Run(t, func(c int64) tensor.Backend { return cpu.New(cpu.NewDevice(c), gemm.DefaultGo()) })
}

// TestConformanceISAs runs the suite again with each lower level's kernels
// installed (AVX2 and the portable Go ones on an AVX-512 machine), under
// the Go GEMM with that level's GEMM kernel where it has one, so that one
// machine checks what the others run.
func TestConformanceISAs(t *testing.T) {
	gemmKernel := map[string]string{"generic": "portable", "avx2": "avx2"}
	for _, level := range []string{"generic", "avx2"} {
		t.Run(level, func(t *testing.T) {
			if level == cpu.KernelISA() {
				t.Skipf("the %s kernels are the ones installed: TestConformance ran them", level)
			}
			restore, ok := cpu.UseKernels(level)
			if !ok {
				t.Skipf("this CPU cannot run the %s kernels", level)
			}
			defer restore()
			var g gemm.Impl = cpu.ExactGEMM{}
			if k, err := gemm.NewGoKernel(nil, gemmKernel[level]); err == nil {
				g = k
			}
			backendtest.Run(t, func(c int64) tensor.Backend { return cpu.New(cpu.NewDevice(c), g) })
		})
	}
}
