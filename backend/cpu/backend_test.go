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
