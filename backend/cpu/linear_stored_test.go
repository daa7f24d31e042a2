package cpu_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// TestLinearStored runs Linear over weights kept in their storage dtype
// (bf16, fp16, fp8 E4M3 and E5M2), packed by PackRows in row groups as
// the executor packs them and dense, under compute dtypes F32 and BF16
// (where only bf16 weights change path), with each fp32 kernel (the
// portable one offers no stored layout: its weights stay dense and are
// widened per product), against a float64 reference on
// the decoded weights: the products are those of the exact values, within
// the float32 dot-product bound (K+2)·2⁻²⁴·(Σ|x·w| + |bias|). fp8 weights
// run again with a scale recorded (a scaled fp8 checkpoint's).
func TestLinearStored(t *testing.T) {
	if !gemm.Expands(dtype.F16) {
		t.Skip("CPU lacks AVX2+FMA+F16C: weights are widened to float32 on the device here, and the stored layouts are not offered")
	}
	shapes := []struct{ m, n, k int }{{1, 16, 1}, {7, 32, 33}, {70, 64, 300}, {300, 96, 130}, {5, 40, 8}, {3, 64, 7}}
	for _, kernel := range gemm.GoKernels() {
		g, err := gemm.NewGoKernel(nil, kernel)
		if err != nil {
			t.Fatal(err)
		}
		for _, compute := range []dtype.DType{dtype.F32, dtype.BF16} {
			for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2} {
				for _, s := range shapes {
					for _, packed := range []bool{true, false} {
						name := fmt.Sprintf("%s/compute=%s/%s/%dx%dx%d/packed=%v", kernel, compute, dt, s.m, s.n, s.k, packed)
						t.Run(name, func(t *testing.T) {
							be := cpu.New(cpu.NewDevice(0), g)
							if err := be.SetComputeDType(compute); err != nil {
								t.Fatal(err)
							}
							// bf16 weights under bf16 compute take the bf16 GEMM (activations
							// rounded to bf16) unless only its portable kernel exists and
							// this fp32 GEMM widens bf16 instead (the backend's rule).
							bf16Kernel := compute == dtype.BF16 && dt == dtype.BF16 &&
								!(gemm.DefaultBF16().Kernel() == "portable" && g.Expands(dtype.BF16))
							checkLinearStored(t, be, g, dt, s.m, s.n, s.k, packed, bf16Kernel, 1)
						})
						if dt.Size() == 1 {
							// A scaled fp8 checkpoint's weight: its scale recorded, the products
							// multiplied by it.
							t.Run(name+"/scaled", func(t *testing.T) {
								be := cpu.New(cpu.NewDevice(0), g)
								if err := be.SetComputeDType(compute); err != nil {
									t.Fatal(err)
								}
								checkLinearStored(t, be, g, dt, s.m, s.n, s.k, packed, false, 0.0371)
							})
						}
					}
				}
			}
		}
	}
}

func checkLinearStored(t *testing.T, be *cpu.Backend, g *gemm.Go, dt dtype.DType, m, n, k int, packed, bf16Kernel bool, scale float32) {
	rng := rand.New(rand.NewPCG(uint64(m*n), uint64(k)+uint64(dt)))
	x, bias := normals(rng, m*k), normals(rng, n)
	raw, wv := storedWeights(rng, dt, n*k)
	tw := denseOrPacked(t, be, dt, raw, n, k, packed)
	if scale != 1 {
		if err := be.ScaleWeight(tw, scale); err != nil {
			t.Fatal(err)
		}
		for i := range wv {
			wv[i] *= float64(scale)
		}
	}
	// Whole panels pack: of the bf16 GEMM's (and whole pairs) for its
	// kernel, else of the fp32 GEMM's where it expands dt.
	fits := g.Expands(dt) && n%g.PanelWidth() == 0
	if bf16Kernel {
		fits = n%gemm.DefaultBF16().PanelWidth() == 0 && k%2 == 0
	}
	if want := packed && fits; want != (tw.Layout() != "") {
		t.Fatalf("weight %d×%d laid out %q, want packed %v", n, k, tw.Layout(), want)
	}
	ops := tensor.NewOps(be)
	got := ops.Download(ops.Linear(ops.Upload(x, m, k), tw, ops.Upload(bias, n)))
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	u := math.Ldexp(1, -24)
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				xv := float64(x[i*k+p])
				if bf16Kernel {
					xv = float64(roundBF16(x[i*k+p])) // the bf16 GEMM rounds activations
				}
				v := xv * wv[j*k+p]
				s, abs = s+v, abs+math.Abs(v)
			}
			s += float64(bias[j])
			tol := float64(k+2)*u*(abs+math.Abs(float64(bias[j]))) + 1e-30
			if g := float64(got[i*n+j]); math.Abs(g-s) > tol {
				t.Fatalf("out[%d,%d] = %g, want %g ± %g", i, j, g, s, tol)
			}
		}
	}
}

// denseOrPacked puts the raw n×k weight on be's device: packed through
// PackRows in groups of rows when the backend packs it and packed is set,
// dense otherwise.
func denseOrPacked(t *testing.T, be *cpu.Backend, dt dtype.DType, raw []byte, n, k int, packed bool) *tensor.Tensor {
	t.Helper()
	buf, err := be.Device().Alloc(int64(len(raw)), "weight")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free() })
	layout, group, ok := be.PackedLayout(dt, n, k)
	if !packed || !ok {
		w, err := tensor.View(buf, 0, dt, n, k)
		if err != nil {
			t.Fatal(err)
		}
		copy(w.Raw(), raw)
		return w
	}
	w, err := tensor.PackedView(buf, 0, dt, layout, n, k)
	if err != nil {
		t.Fatal(err)
	}
	rowBytes := k * dt.Size()
	for r0 := 0; r0 < n; r0 += group {
		rows := min(group, n-r0)
		if err := be.PackRows(w, raw[r0*rowBytes:(r0+rows)*rowBytes], dt, r0); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// storedWeights returns n random raw values of dt (no NaNs or
// infinities) and their exact values.
func storedWeights(rng *rand.Rand, dt dtype.DType, n int) ([]byte, []float64) {
	raw, vals := make([]byte, n*dt.Size()), make([]float64, n)
	for i := range n {
		v := float32(rng.NormFloat64())
		switch dt {
		case dtype.BF16:
			h := dtype.F32ToBF16(v)
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
			vals[i] = float64(dtype.BF16ToF32(h))
		case dtype.F16:
			h := dtype.F32ToF16(v)
			raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
			vals[i] = float64(dtype.F16ToF32(h))
		case dtype.F8E4M3:
			b := byte(rng.IntN(256))
			for b&0x7f == 0x7f {
				b = byte(rng.IntN(256))
			}
			raw[i], vals[i] = b, float64(dtype.F8E4M3ToF32(b))
		case dtype.F8E5M2:
			b := byte(rng.IntN(256))
			for b&0x7c == 0x7c {
				b = byte(rng.IntN(256))
			}
			raw[i], vals[i] = b, float64(dtype.F8E5M2ToF32(b))
		}
	}
	return raw, vals
}

// ScaleWeight folds a scale into the values of a float32 weight (dense or
// packed) and of a bf16 one, rounding as a bf16 store does, so that Linear
// gives what it gives on weights scaled before they were stored; it
// records no scale there.
func TestScaleWeightFolds(t *testing.T) {
	const n, k, m, s = 32, 24, 5, float32(0.37)
	be := cpu.New(cpu.NewDevice(0), nil)
	rng := rand.New(rand.NewPCG(3, 4))
	x := normals(rng, m*k)
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
		for _, packed := range []bool{true, false} {
			raw, wv := storedWeights(rng, dt, n*k)
			if dt == dtype.F32 {
				raw = make([]byte, 4*n*k)
				for i := range wv {
					wv[i] = rng.NormFloat64()
					binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(wv[i])))
				}
			}
			scaled := make([]byte, len(raw))
			for i := range wv {
				v := float32(wv[i]) * s
				if dt == dtype.F32 {
					binary.LittleEndian.PutUint32(scaled[4*i:], math.Float32bits(v))
				} else {
					binary.LittleEndian.PutUint16(scaled[2*i:], dtype.F32ToBF16(v))
				}
			}
			tw := denseOrPacked(t, be, dt, raw, n, k, packed)
			if err := be.ScaleWeight(tw, s); err != nil {
				t.Fatal(err)
			}
			if tw.Scale() != 1 {
				t.Fatalf("%s: a scale recorded (%g) on a weight that holds it", dt, tw.Scale())
			}
			want := denseOrPacked(t, be, dt, scaled, n, k, packed)
			ops := tensor.NewOps(be)
			xt := ops.Upload(x, m, k)
			got, ref := ops.Download(ops.Linear(xt, tw, nil)), ops.Download(ops.Linear(xt, want, nil))
			if err := ops.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, ref) {
				t.Errorf("%s packed=%v: Linear over the folded weight differs from Linear over the weight scaled before storing", dt, packed)
			}
		}
	}
}
