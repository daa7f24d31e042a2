package planner

import (
	"fmt"
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/wanvae"
	"ferry/residency"
)

// TestVAEPeakMatchesDecode decodes with model/wanvae through the executor
// and compares the device peak with the VAE formula's prediction.
func TestVAEPeakMatchesDecode(t *testing.T) {
	cfg := wanvae.ConfigWan21()
	cfg.BaseDim = 8
	text, tr, _ := WanTinyConfigs()
	p, err := NewWanProfileVAE("vae-test", text, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := newMemSource(cfg.DecoderParams(), 4)
	for _, tile := range []int{0, 64} {
		for _, cp := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
			t.Run(fmt.Sprintf("%s-tile%d", planName(cp), tile), func(t *testing.T) {
				req := Request{Batch: 1, Frames: 9, Height: 96, Width: 128, TextLen: 8, Steps: 1}
				run := residency.RunOptions{}
				if tile > 0 {
					run.VAETile, run.VAEStride = tile, tile*3/4
				}
				plan := &residency.Plan{Components: map[string]residency.ComponentPlan{VAE: cp}, Run: run}
				dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
				ex, err := residency.New(residency.Config{Backend: cpu.New(dev, gemm.DefaultGo()), HostBackend: cpu.New(host, gemm.DefaultGo()), Plan: plan})
				if err != nil {
					t.Fatal(err)
				}
				defer ex.Close()
				m := wanvae.New(cfg)
				if tile > 0 {
					m.Options.Tiling = wanvae.SquareTiling(tile, tile*3/4)
				}
				if err := ex.Register(m.DecoderComponent(VAE, src)); err != nil {
					t.Fatal(err)
				}
				ops := ex.Ops(VAE)
				c, f, h, w := req.latent(p)
				z := ops.Upload(make([]float32, c*f*h*w), 1, c, f, h, w)
				video, err := m.Decode(slowRunner{ex: ex, pause: time.Millisecond}, ops, z)
				if err != nil {
					t.Fatal(err)
				}
				z.Free()
				ex.Done(VAE)
				video.Free()
				measured := dev.Stats().PeakAllocated

				s := newSim(slowCompute(), Budgets{})
				if err := s.register(p.Component(VAE), plan.For(VAE), dtype.F32); err != nil {
					t.Fatal(err)
				}
				pl := &pipelineSim{s: s, p: p, req: req, run: run, id: &ids{}}
				pl.decode()
				checkWithin(t, "vae peak device bytes", s.dev.PeakAllocated, measured, 0.05)
			})
		}
	}
}
