package planner

import (
	"fmt"
	"math"
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/hwprofile"
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
				ex, err := residency.New(residency.Config{Backend: cpu.New(dev, gemm.DefaultGo()), HostBackend: cpu.New(host, gemm.DefaultGo()), Plan: plan, KeepStored: keepStored})
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
				checkWithin(t, "vae peak device bytes", s.dev.PeakAllocated, measured, 0)
			})
		}
	}
}

// TestVAEFirstTouchOnce: the memory a decode maps is touched in its first
// chunks; the chunks after them, in their steady state, find every size
// cached. So four more latent frames add the same time whatever a fresh
// page costs (the steady chunk's time once carried the second chunk's
// first touches, multiplied by the chunk count).
func TestVAEFirstTouchOnce(t *testing.T) {
	text, tr, vae := WanTinyConfigs()
	p, err := NewWanProfileVAE("vae-touch", text, tr, vae)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(frames int, touchUs float64) float64 {
		hw := hwprofile.Default()
		hw.FirstTouchUsPerPage = touchUs
		s := newSim(hw, Budgets{})
		plan := &residency.Plan{}
		if err := s.register(p.Component(VAE), plan.For(VAE), dtype.F32); err != nil {
			t.Fatal(err)
		}
		req := Request{Batch: 1, Frames: frames, Height: 64, Width: 64, TextLen: 8, Steps: 1}
		pl := &pipelineSim{s: s, p: p, req: req, id: &ids{}}
		pl.decode()
		return pl.tVAE
	}
	cheap := decode(17, 0.01) - decode(9, 0.01)
	dear := decode(17, 100) - decode(9, 100)
	if cheap <= 0 || math.Abs(dear-cheap) > 1e-9*cheap {
		t.Errorf("4 more latent frames add %.6gs at 0.01 µs per fresh page and %.6gs at 100 µs: want the same, > 0", cheap, dear)
	}
	if whole := decode(17, 100) - decode(17, 0.01); whole <= 0 {
		t.Errorf("a dearer first touch made the decode %.3gs longer, want > 0", whole)
	}
}

// TestConvPaysWholePanels: a convolution computes whole panels of output
// channels, so 3 channels cost what 32 do under panels of 32, and 3/32 of
// it without panels; the 8-channel probe's rate counts for 32 channels.
func TestConvPaysWholePanels(t *testing.T) {
	conv := func(cout, panel int) float64 {
		v := &vaeRec{r: &recorder{ids: &ids{}}, b: 1, panel: panel, blk: map[string]int{}}
		v.cur = &call{}
		v.conv(&vt{c: 16, t: 3, h: 8, w: 8}, cout, 3, 3, 1)
		var sum float64
		for _, f := range v.cur.work.conv {
			sum += f
		}
		return sum
	}
	if a, b := conv(3, 32), conv(32, 32); a != b {
		t.Errorf("3 output channels priced as %g flops, 32 as %g: want equal under panels of 32", a, b)
	}
	if a, b := conv(3, 1), conv(32, 1); math.Abs(a/b-3.0/32) > 1e-12 {
		t.Errorf("without panels 3 channels cost %g of 32's, want 3/32", a/b)
	}
	if a, b := conv(40, 32), conv(64, 32); a != b {
		t.Errorf("40 output channels priced as %g flops, 64 as %g: want equal under panels of 32", a, b)
	}
	for _, c := range []struct {
		ch, panel int
		want      float64
	}{{8, 32, 4}, {32, 32, 1}, {96, 32, 1}, {8, 16, 2}, {8, 1, 1}} {
		if got := paddedRatio(c.ch, c.panel); got != c.want {
			t.Errorf("paddedRatio(%d, %d) = %g, want %g", c.ch, c.panel, got, c.want)
		}
	}
}
