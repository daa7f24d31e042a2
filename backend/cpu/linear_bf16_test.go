package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// TestLinearBF16Compute runs Linear with BF16 weights under compute dtype
// BF16 (activations rounded to bf16, bf16 GEMM) with every bf16 kernel,
// against a float64 reference on the bf16-rounded inputs. Tolerance: the
// bf16 products are exact in float32, so the error is float32 summation
// of K terms plus the bias, at most (K+2)·2⁻²⁴·(Σ|x·w| + |bias|); a kernel
// that skipped the rounding of x, or dropped a pair, is off by ~2⁻⁹ of the
// terms and fails.
func TestLinearBF16Compute(t *testing.T) {
	cases := []struct {
		x    []int
		n    int
		bias bool
	}{
		{[]int{1, 1}, 1, false},
		{[]int{5}, 3, true},
		{[]int{7, 13}, 5, true},
		{[]int{2, 3, 33}, 17, false},
		{[]int{65, 64}, 130, true},
		{[]int{3, 2, 1, 70}, 31, true},
		{[]int{300, 257}, 100, true},
	}
	for _, kernel := range gemm.BF16Kernels() {
		g, err := gemm.NewGoBF16Kernel(nil, kernel)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%v/n=%d/bias=%v", kernel, c.x, c.n, c.bias), func(t *testing.T) {
				be := cpu.New(cpu.NewDevice(0), gemm.DefaultGo())
				be.SetBF16GEMM(g)
				if err := be.SetComputeDType(dtype.BF16); err != nil {
					t.Fatal(err)
				}
				checkLinearBF16(t, be, c.x, c.n, c.bias)
			})
		}
	}
}

func checkLinearBF16(t *testing.T, be *cpu.Backend, xShape []int, n int, withBias bool) {
	ops := tensor.NewOps(be)
	k := xShape[len(xShape)-1]
	m := tensor.NumElems(xShape) / k
	rng := rand.New(rand.NewPCG(uint64(m), uint64(n*k)))
	x, w := normals(rng, m*k), normals(rng, n*k)
	var b []float32
	var tb *tensor.Tensor
	if withBias {
		b = normals(rng, n)
		tb = ops.Upload(b, n)
	}
	tw := ops.Cast(ops.Upload(w, n, k), dtype.BF16)
	tx := ops.Upload(x, xShape...)
	got := ops.Download(ops.Linear(tx, tw, tb))
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	u := math.Ldexp(1, -24)
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				v := float64(roundBF16(x[i*k+p])) * float64(roundBF16(w[j*k+p]))
				s, abs = s+v, abs+math.Abs(v)
			}
			if withBias {
				s, abs = s+float64(b[j]), abs+math.Abs(float64(b[j]))
			}
			if d := math.Abs(float64(got[i*n+j]) - s); !(d <= float64(k+2)*u*abs+1e-30) {
				t.Fatalf("out[%d,%d] = %g, want %g (error %g, bound %g)", i, j, got[i*n+j], s, d, float64(k+2)*u*abs)
			}
		}
	}
}

// TestLinearBF16WidenedWithGo checks the default compute dtype (F32) with
// BF16 weights through the fast fp32 GEMM, in several weight chunks: the
// result must be that of the widened weights (float32 tolerance K·2⁻²⁴·Σ|x·w|).
func TestLinearBF16WidenedWithGo(t *testing.T) {
	be := cpu.New(cpu.NewDevice(0), gemm.DefaultGo())
	ops := tensor.NewOps(be)
	m, n, k := 33, 300, 4100 // 4100 columns of K: chunks of 224 weight rows
	rng := rand.New(rand.NewPCG(3, 4))
	x, w := normals(rng, m*k), normals(rng, n*k)
	got := ops.Download(ops.Linear(ops.Upload(x, m, k), ops.Cast(ops.Upload(w, n, k), dtype.BF16), nil))
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	u := math.Ldexp(1, -24)
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				v := float64(x[i*k+p]) * float64(roundBF16(w[j*k+p]))
				s, abs = s+v, abs+math.Abs(v)
			}
			if d := math.Abs(float64(got[i*n+j]) - s); !(d <= float64(k+1)*u*abs) {
				t.Fatalf("out[%d,%d] = %g, want %g (error %g)", i, j, got[i*n+j], s, d)
			}
		}
	}
}

func TestSetComputeDType(t *testing.T) {
	be := cpu.New(nil, nil)
	for _, c := range []struct {
		dt dtype.DType
		ok bool
	}{{dtype.F32, true}, {dtype.BF16, true}, {dtype.F16, false}, {dtype.F64, false}} {
		err := be.SetComputeDType(c.dt)
		if (err == nil) != c.ok {
			t.Errorf("SetComputeDType(%s): error %v, want ok=%v", c.dt, err, c.ok)
		}
	}
	if be.ComputeDType() != dtype.BF16 {
		t.Errorf("compute dtype %s after refused F16/F64, want BF16", be.ComputeDType())
	}
}

func roundBF16(v float32) float32 { return dtype.BF16ToF32(dtype.F32ToBF16(v)) }

func normals(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}
