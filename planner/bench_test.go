package planner

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
)

// BenchmarkWanPassVsPrediction runs a mid-sized Wan transformer pass
// through the executor (resident, and streamed with prefetch 1) on this
// machine and reports the predicted steady pass time over the measured
// median as pred/measured (1.0 is a perfect prediction). The hardware
// figures are measured first, as `ferry calibrate` does.
func BenchmarkWanPassVsPrediction(b *testing.B) {
	hw, err := hwprofile.Measure(hwprofile.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := wan.Config1_3B()
	cfg.NumAttentionHeads, cfg.NumLayers, cfg.FFNDim, cfg.TextDim = 4, 4, 2048, 256
	p := &Profile{Name: "bench", Compute: dtype.F32, Wan: cfg, Coder: Wan21VAE(),
		Components: []*ComponentProfile{marked(b, ComponentFromParams(Transformer, dtype.BF16, cfg.Params()), cfg.Params(), wan.New(cfg).Component(Transformer, nil))}}
	req := Request{Batch: 1, Frames: 9, Height: 256, Width: 256, TextLen: 64, Steps: 1}
	src := newMemSource(cfg.Params(), 3)
	for _, cp := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
		b.Run(string(cp.Placement), func(b *testing.B) {
			plan := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: cp}}
			measured := measureWanPasses(b, cfg, src, plan, req)
			s := newSim(hw, Budgets{})
			if err := s.register(p.Components[0], plan.For(Transformer), dtype.F32); err != nil {
				b.Fatal(err)
			}
			var predicted float64
			for range 2 { // the second pass is the steady one
				t0 := s.now
				s.runPass(s.byName[Transformer], wanPass(p, req, residency.RunOptions{}, 1, loraPass{}, &ids{}))
				predicted = s.now - t0
			}
			b.ReportMetric(predicted/measured, "pred/measured")
			b.ReportMetric(measured, "s/pass")
		})
	}
}

// measureWanPasses returns the median steady pass time over b.N passes
// (after one warm-up pass that loads the weights).
func measureWanPasses(b *testing.B, cfg wan.Config, src residency.Source, plan *residency.Plan, req Request) float64 {
	dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
	g := gemm.Best()
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, g), HostBackend: cpu.New(host, g), Plan: plan, KeepStored: keepStored})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	m := wan.New(cfg)
	if err := ex.Register(m.Component(Transformer, src)); err != nil {
		b.Fatal(err)
	}
	ops := ex.Ops(Transformer)
	lf, lh, lw := (req.Frames-1)/4+1, req.Height/8, req.Width/8
	pass := func() float64 {
		t0 := time.Now()
		x := ops.Upload(make([]float32, cfg.InChannels*lf*lh*lw), 1, cfg.InChannels, lf, lh, lw)
		c := ops.Upload(make([]float32, req.TextLen*cfg.TextDim), 1, req.TextLen, cfg.TextDim)
		out, err := m.Forward(ex, ops, x, []float32{500}, c)
		if err != nil {
			b.Fatal(err)
		}
		tensor.Free(out, x, c)
		return time.Since(t0).Seconds()
	}
	pass()
	b.ResetTimer()
	var times []float64
	for range b.N {
		times = append(times, pass())
	}
	sort.Float64s(times)
	return times[len(times)/2]
}

// BenchmarkSearch times the plan search for the 1.3B model at Wan's
// reference request under an 8 GiB device budget (what `ferry plan`
// costs).
func BenchmarkSearch(b *testing.B) {
	p, err := Builtin("wan2.1-t2v-1.3b")
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if _, _, err := Search(p, hwprofile.Default(), DefaultRequest(), Budgets{DeviceBytes: 8 << 30, HostBytes: 64 << 30}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPipelineTimeVsPrediction runs the mini pipeline (the real
// UMT5, Wan and Wan VAE models of wan-tiny through one executor, all
// resident, two denoising steps) at two shapes and reports the predicted
// time of the three phases over the measured one (pred/measured, 1.0 is
// perfect), with the hardware figures measured first as `ferry calibrate`
// does.
func BenchmarkPipelineTimeVsPrediction(b *testing.B) {
	hw, err := hwprofile.Measure(hwprofile.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := Builtin("wan-tiny")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range p.Components {
		c.Storage = dtype.BF16
	}
	for _, req := range []Request{
		{Batch: 1, Frames: 5, Height: 64, Width: 64, TextLen: 16, Steps: 2, Guidance: 5},
		{Batch: 1, Frames: 17, Height: 128, Width: 192, TextLen: 64, Steps: 2, Guidance: 5},
	} {
		b.Run(fmt.Sprintf("%dx%dx%d", req.Frames, req.Height, req.Width), func(b *testing.B) {
			plan := &residency.Plan{}
			pred, err := Predict(p, hw, plan, req, Budgets{})
			if err != nil {
				b.Fatal(err)
			}
			miniPipelineSlow = 0
			defer func() { miniPipelineSlow = time.Millisecond }()
			var runs []float64
			for range b.N {
				if _, _, err := miniPipeline(b, p, plan, req, Budgets{}); err != nil {
					b.Fatal(err)
				}
				runs = append(runs, miniTimes[0]+miniTimes[1]+miniTimes[2])
			}
			sort.Float64s(runs)
			measured := runs[len(runs)/2]
			b.ReportMetric(pred.TotalS/measured, "pred/measured")
			b.ReportMetric(measured, "s/run")
		})
	}
}
