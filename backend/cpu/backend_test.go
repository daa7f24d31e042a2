package cpu_test

import (
	"testing"

	"ferry/backend/backendtest"
	"ferry/backend/cpu"
	"ferry/tensor"
)

// TestConformance runs the backend suite with a reference GEMM (see ExactGEMM).
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(c int64) tensor.Backend { return cpu.New(cpu.NewDevice(c), cpu.ExactGEMM{}) })
}
