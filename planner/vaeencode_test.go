package planner

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/wanvae"
	"ferry/residency"
)

// TestVAEPeakMatchesEncode encodes an image-to-video condition video with
// model/wanvae through the executor (as pipeline/wan's encodeCondition:
// the video uploaded, encoded, Done, the mean and log-variance freed) and
// compares the device peak with the encode script's prediction, for the
// Wan 2.1 layout (image then black frames) and the Wan 2.2 one (the image
// alone), resident and streamed.
func TestVAEPeakMatchesEncode(t *testing.T) {
	w21 := wanvae.ConfigWan21()
	w21.BaseDim = 8
	w22 := wanvae.ConfigWan22()
	base, dec := 8, 12
	w22.BaseDim, w22.DecoderBaseDim = base, &dec
	text, tr, _ := WanTinyConfigs()
	for _, tc := range []struct {
		name   string
		cfg    wanvae.Config
		mode   ImageMode
		frames int
	}{
		{"wan2.1", w21, ImageThenZeros, 13},
		{"wan2.2", w22, ImageAlone, 1},
	} {
		for _, cp := range []residency.ComponentPlan{{Placement: residency.Resident}, {Placement: residency.Stream, Prefetch: 1}} {
			t.Run(fmt.Sprintf("%s-%s", tc.name, planName(cp)), func(t *testing.T) {
				tr := tr
				tr.InChannels, tr.OutChannels = tc.cfg.ZDim, tc.cfg.ZDim
				p, err := NewWanProfileVAE("encode-test", text, tr, tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.SetImageMode(tc.mode, tc.cfg); err != nil {
					t.Fatal(err)
				}
				req := Request{Batch: 1, Frames: 13, Height: 96, Width: 128, TextLen: 8, Steps: 1}
				plan := &residency.Plan{Components: map[string]residency.ComponentPlan{VAE: cp}}
				dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
				ex, err := residency.New(residency.Config{Backend: cpu.New(dev, gemm.DefaultGo()), HostBackend: cpu.New(host, gemm.DefaultGo()), Plan: plan, KeepStored: keepStored})
				if err != nil {
					t.Fatal(err)
				}
				defer ex.Close()
				m := wanvae.New(tc.cfg)
				if err := ex.Register(m.Component(VAE, newMemSource(tc.cfg.Params(), 5))); err != nil {
					t.Fatal(err)
				}
				ops := ex.Ops(VAE)
				video := ops.Upload(make([]float32, 3*tc.frames*req.Height*req.Width), 1, 3, tc.frames, req.Height, req.Width)
				mean, logvar, err := m.Encode(slowRunner{ex: ex, pause: time.Millisecond}, ops, video)
				if err != nil {
					t.Fatal(err)
				}
				video.Free()
				ex.Done(VAE)
				mean.Free()
				logvar.Free()
				measured := dev.Stats().PeakAllocated

				s := newSim(slowCompute(), Budgets{})
				if err := s.register(p.Component(VAE), plan.For(VAE), dtype.F32); err != nil {
					t.Fatal(err)
				}
				pl := &pipelineSim{s: s, p: p, req: req, id: &ids{}}
				pl.encodeImage()
				checkWithin(t, "encode peak device bytes", s.dev.PeakAllocated, measured, 0)
			})
		}
	}
}

// TestEncodeScriptVisitsEncoderBlocks: the encode script runs every
// encoder block of the image-to-video profiles, in the order wanvae
// declares them, and names no block the VAE lacks.
func TestEncodeScriptVisitsEncoderBlocks(t *testing.T) {
	for _, name := range BuiltinNames() {
		p, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.ImageMode == NoImage {
			continue
		}
		comp := p.Component(VAE)
		v := &vaeRec{r: &recorder{ids: &ids{}}, b: 1, panel: 1, blk: map[string]int{}}
		for i, b := range comp.Blocks {
			v.blk[b.Name] = i
		}
		steps := 0
		for _, b := range comp.Blocks {
			if strings.HasPrefix(b.Name, VAE+".encoder.") {
				steps++
			}
		}
		v.encodeChunk(p.Coder, 1, 64, 64)
		if len(v.calls) != steps {
			t.Fatalf("%s: the script makes %d calls, the VAE has %d encoder blocks", name, len(v.calls), steps)
		}
		for i, c := range v.calls {
			if c.block != i || !strings.HasPrefix(comp.Blocks[i].Name, VAE+".encoder.") {
				t.Errorf("%s: call %d runs block %d (%s)", name, i, c.block, comp.Blocks[c.block].Name)
			}
		}
	}
}
