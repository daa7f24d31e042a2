package bench

import (
	"math"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
)

func TestRandomSource(t *testing.T) {
	specs := []residency.ParamSpec{
		{Name: "a.weight", Shape: []int{64, 256}},
		{Name: "a.bias", Shape: []int{64}},
	}
	src := RandomSource(specs, 7)
	cases := []struct {
		name       string
		mean, std  float64
		wantLength int
	}{
		{"a.weight", 0, 1.0 / 16, 64 * 256},
		{"a.bias", 1, 0.1, 64},
	}
	for _, c := range cases {
		info, ok := src.Info(c.name)
		if !ok || info.DType != dtype.BF16 || info.Size != int64(2*c.wantLength) {
			t.Fatalf("%s: info %+v, ok %v", c.name, info, ok)
		}
		raw := make([]byte, info.Size)
		if err := src.Read(c.name, 0, raw); err != nil {
			t.Fatal(err)
		}
		vals := make([]float32, c.wantLength)
		if err := dtype.ToF32(vals, raw, dtype.BF16); err != nil {
			t.Fatal(err)
		}
		var sum, sq float64
		for _, v := range vals {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		mean := sum / float64(len(vals))
		std := math.Sqrt(sq/float64(len(vals)) - mean*mean)
		if math.Abs(mean-c.mean) > 4*c.std/math.Sqrt(float64(len(vals))) || math.Abs(std/c.std-1) > 0.2 {
			t.Errorf("%s: mean %g std %g, want %g and %g", c.name, mean, std, c.mean, c.std)
		}
	}
	if _, ok := src.Info("missing"); ok {
		t.Error("Info reports a missing tensor")
	}
	if err := src.Read("a.bias", 100, make([]byte, 40)); err == nil {
		t.Error("Read past the end succeeded")
	}
	if err := src.Read("missing", 0, nil); err == nil {
		t.Error("Read of a missing tensor succeeded")
	}
}

// TestBF16ExecutorMatchesFP32 runs a tiny Wan model through the executor
// twice, as bench/block does: weights widened to F32 with fp32 compute, and
// GEMM weights kept bf16 (and packed) with bf16 compute. The same weights,
// so the outputs agree to bf16 rounding of the activations.
func TestBF16ExecutorMatchesFP32(t *testing.T) {
	cfg := wan.Config1_3B()
	cfg.NumLayers, cfg.NumAttentionHeads, cfg.AttentionHeadDim = 1, 2, 16
	cfg.FFNDim, cfg.TextDim, cfg.FreqDim = 64, 24, 16
	src := RandomSource(cfg.Params(), 3)

	run := func(compute dtype.DType) []float32 {
		be := cpu.New(cpu.NewDevice(0), gemm.DefaultGo())
		if err := be.SetComputeDType(compute); err != nil {
			t.Fatal(err)
		}
		ops := tensor.NewOps(be)
		m := wan.New(cfg)
		exec, err := residency.New(residency.Config{Backend: be, HostBackend: be, MatrixDType: compute})
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Close()
		if err := exec.Register(m.Component("transformer", src)); err != nil {
			t.Fatal(err)
		}
		lat := make([]float32, 2*16*1*4*4)
		ctx := make([]float32, 2*3*cfg.TextDim)
		for i := range lat {
			lat[i] = float32(math.Sin(float64(i)))
		}
		for i := range ctx {
			ctx[i] = float32(math.Cos(float64(i)))
		}
		out, err := m.Forward(exec, ops, ops.Upload(lat, 2, 16, 1, 4, 4), []float32{10, 900}, ops.Upload(ctx, 2, 3, cfg.TextDim))
		if err != nil {
			t.Fatal(err)
		}
		return ops.Download(out)
	}
	want, got := run(dtype.F32), run(dtype.BF16)
	var num, den float64
	for i := range want {
		d := float64(got[i] - want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	// bf16 activations carry 8 significant bits: a relative error of a
	// few 2⁻⁹ through two small layers, far below the 0.1 a wrong weight
	// or binding would give.
	if rel := math.Sqrt(num / den); !(rel < 0.02) || rel == 0 {
		t.Fatalf("relative RMS difference %g between fp32 and bf16 compute, want (0, 0.02)", rel)
	}
}
