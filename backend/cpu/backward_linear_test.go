package cpu_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/dtype"
	"ferry/tensor"
)

// TestLinearBackwardBF16Chunks: a BF16 weight is widened for dx a chunk of
// rows at a time (32 rows when k is 32768), each chunk's product added into
// dx; with 40 rows there are two chunks. The result must match the F32
// weight of the same values, to the two roundings (one per chunk) that the
// reference GEMM makes: 2u·Σ|dy·w| per element.
func TestLinearBackwardBF16Chunks(t *testing.T) {
	const m, n, k = 2, 40, 32768
	rng := rand.New(rand.NewPCG(3, 4))
	be := cpu.New(cpu.NewDevice(0), cpu.ExactGEMM{})
	ops := tensor.NewOps(be)
	w := make([]float32, n*k)
	raw := make([]byte, 2*n*k)
	for i := range w {
		bits := math.Float32bits(float32(rng.NormFloat64())) &^ 0xffff // exact in bf16
		w[i] = math.Float32frombits(bits)
		binary.LittleEndian.PutUint16(raw[2*i:], uint16(bits>>16))
	}
	dyv := make([]float32, m*n)
	for i := range dyv {
		dyv[i] = float32(rng.NormFloat64())
	}
	dy, wf := ops.Upload(dyv, m, n), ops.Upload(w, n, k)
	x := ops.Zeros(m, k)
	wb := ops.Empty(dtype.BF16, n, k)
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	if err := be.Upload(wb, raw, dtype.BF16); err != nil {
		t.Fatal(err)
	}
	want, got := ops.Empty(dtype.F32, m, k), ops.Empty(dtype.F32, m, k)
	if err := be.LinearBackward(want, nil, nil, dy, x, wf); err != nil {
		t.Fatal(err)
	}
	if err := be.LinearBackward(got, nil, nil, dy, x, wb); err != nil {
		t.Fatal(err)
	}
	g, f := ops.Download(got), ops.Download(want)
	bad := 0
	for i := range m {
		for q := range k {
			var mag float64
			for j := range n {
				mag += math.Abs(float64(dyv[i*n+j]) * float64(w[j*k+q]))
			}
			at := i*k + q
			if d := math.Abs(float64(g[at]) - float64(f[at])); !(d <= 2*mag/(1<<24)) && bad < 3 {
				t.Errorf("dx[%d, %d] = %g with a BF16 weight, %g with F32 (tolerance %g)", i, q, g[at], f[at], 2*mag/(1<<24))
				bad++
			}
		}
	}
	tensor.Free(dy, wf, x, wb, want, got)
}

// TestLinearBackwardRefusesPacked: a packed weight is refused with an error
// that says so, before anything is written.
func TestLinearBackwardRefusesPacked(t *testing.T) {
	be := cpu.New(cpu.NewDevice(0), cpu.ExactGEMM{})
	ops := tensor.NewOps(be)
	x, dy, w := ops.Zeros(3, 4), ops.Zeros(3, 5), ops.Zeros(5, 4)
	dx := ops.Upload([]float32{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, 3, 4)
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	packed, err := tensor.PackedView(w.Buffer(), 0, dtype.F32, "some-layout", 5, 4)
	if err != nil {
		t.Fatal(err)
	}
	err = be.LinearBackward(dx, nil, nil, dy, x, packed)
	if err == nil || !strings.Contains(err.Error(), "packed") {
		t.Errorf("packed weight: error %v, want one saying it is packed", err)
	}
	for i, v := range ops.Download(dx) {
		if v != 7 {
			t.Fatalf("dx[%d] = %g after a refused call, want it untouched", i, v)
		}
	}
	tensor.Free(x, dy, w, dx)
}
