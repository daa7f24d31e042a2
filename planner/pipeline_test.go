package planner

import (
	"fmt"
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/umt5"
	"ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/residency"
	"ferry/tensor"
)

// miniPipeline runs the three real models through one executor the way
// the planner's pipeline contract says pipeline/wan does (see
// pipelineSim), and returns the device's peak allocated bytes and the
// host's peak reserved bytes (what the report calls peak_host_bytes).
func miniPipeline(tb testing.TB, p *Profile, plan *residency.Plan, req Request, b Budgets) (int64, int64, error) {
	tb.Helper()
	dev, host := cpu.NewDevice(b.DeviceBytes), cpu.NewDevice(b.HostBytes)
	g := gemm.DefaultGo()
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, g), HostBackend: cpu.New(host, g), Plan: plan, KeepStored: keepStored})
	if err != nil {
		return 0, 0, err
	}
	defer ex.Close()
	run := slowRunner{ex: ex, pause: miniPipelineSlow}
	vcfg := wanvae.ConfigWan21()
	vcfg.BaseDim = p.Coder.BaseDim
	te, tr, vae := umt5.New(p.Text), wan.New(p.Wan), wanvae.New(vcfg)
	tr.Options.FFNChunk = plan.Run.FFNChunk
	if plan.Run.VAETile > 0 {
		vae.Options.Tiling = wanvae.SquareTiling(plan.Run.VAETile, plan.Run.VAEStride)
	}
	for _, c := range []*residency.Component{
		te.Component(TextEncoder, newMemSource(p.Text.Params(), 11)),
		tr.Component(Transformer, newMemSource(p.Wan.Params(), 12)),
		vae.DecoderComponent(VAE, newMemSource(vcfg.DecoderParams(), 13)),
	} {
		if err := ex.Register(c); err != nil {
			return 0, 0, err
		}
	}
	fail := func(ops *tensor.Ops, err error) error {
		if err != nil {
			return err
		}
		return ops.Err()
	}

	// Text: prompt and negative prompt as one batch of their real tokens,
	// downloaded and freed (pipeline/wan's encodeText).
	t0 := time.Now()
	n := req.normalized().PromptTokens
	tokens, mask := make([]int32, 2*n), make([]int32, 2*n)
	for i := range 2 * n {
		if i%n < 6 {
			tokens[i], mask[i] = int32(i%n+2), 1
		}
	}
	tops := ex.Ops(TextEncoder)
	emb, err := te.Encode(run, tops, tokens, mask, 2, n)
	if err != nil {
		return 0, 0, err
	}
	ex.Done(TextEncoder)
	tops.Download(emb)
	emb.Free()
	if err := tops.Err(); err != nil {
		return 0, 0, err
	}
	miniTimes[0] = time.Since(t0).Seconds()
	t0 = time.Now()
	// Denoise: the zero-padded contexts uploaded where the transformer
	// computes (as pipeline/wan does), then two steps.
	ops := ex.Ops(Transformer)
	var ctx []*tensor.Tensor
	shape := []int{1, req.TextLen, p.Text.DModel}
	if plan.Run.CFG != residency.CFGSequential {
		ctx = []*tensor.Tensor{ops.Zeros(2, req.TextLen, p.Text.DModel)}
	} else {
		ctx = []*tensor.Tensor{ops.Zeros(shape...), ops.Zeros(shape...)}
	}
	c, f, h, w := req.latent(p)
	for range 2 {
		for _, cx := range ctx {
			bs := cx.Dim(0)
			x := ops.Upload(make([]float32, bs*c*f*h*w), bs, c, f, h, w)
			out, err := tr.Forward(run, ops, x, make([]float32, bs), cx)
			if err := fail(ops, err); err != nil {
				return 0, 0, err
			}
			tensor.Free(out, x)
		}
	}
	ex.Done(Transformer)
	tensor.Free(ctx...)

	miniTimes[1] = time.Since(t0).Seconds()
	t0 = time.Now()
	// Decode.
	vops := ex.Ops(VAE)
	z := vops.Upload(make([]float32, c*f*h*w), 1, c, f, h, w)
	video, err := vae.Decode(run, vops, z)
	if err := fail(vops, err); err != nil {
		return 0, 0, err
	}
	z.Free()
	ex.Done(VAE)
	video.Free()
	miniTimes[2] = time.Since(t0).Seconds()
	return dev.Stats().PeakAllocated, host.Stats().PeakReserved, nil
}

// TestPipelinePeakMatches checks the whole-pipeline prediction (three
// components through one executor, phases, contexts, onload eviction
// under a cap) against the mini pipeline for every preset, at no budget
// and at the smallest device budget the planner says the plan fits in:
// there the run must not run out of memory.
func TestPipelinePeakMatches(t *testing.T) {
	p := mustBuiltin(t, "wan-tiny")
	for _, c := range p.Components {
		c.Storage = dtype.BF16 // as memSource stores them
	}
	req := Request{Batch: 1, Frames: 5, Height: 64, Width: 64, TextLen: 16, Steps: 2, Guidance: 5}
	hw := slowCompute()
	// Beside the presets, every component computing on the host: nothing
	// (not the contexts, not the latents) should reach the device.
	allHost := &residency.Plan{Name: "all-host", Components: map[string]residency.ComponentPlan{}}
	for _, c := range []string{TextEncoder, Transformer, VAE} {
		allHost.Components[c] = residency.ComponentPlan{Placement: residency.Host}
	}
	for _, name := range append(PresetNames(), "all-host") {
		for _, tight := range []bool{false, true} {
			if name == "all-host" && tight {
				continue // it needs no device memory: there is no tight budget
			}
			t.Run(fmt.Sprintf("%s-tight%v", name, tight), func(t *testing.T) {
				b := Budgets{}
				plan := allHost
				if name != "all-host" {
					var err error
					if plan, err = Preset(name, PresetOptions{Profile: p, HW: hw, Request: req, Budgets: Budgets{DeviceBytes: 24 << 20}}); err != nil {
						t.Fatal(err)
					}
				}
				free, err := Predict(p, hw, plan, req, b)
				if err != nil {
					t.Fatal(err)
				}
				if tight {
					sr := &searcher{p: p, hw: hw, req: req.normalized()}
					if b.DeviceBytes = sr.bisect(plan, true); b.DeviceBytes == 0 {
						t.Fatalf("no device budget fits %s (unconstrained peak %d)", describe(plan), free.PeakDeviceReservedBytes)
					}
				}
				pred, err := Predict(p, hw, plan, req, b)
				if err != nil {
					t.Fatal(err)
				}
				measured, measuredHost, err := miniPipeline(t, p, plan, req, b)
				if !pred.Fits {
					t.Fatalf("budget %+v: predicted not to fit: %s", b, pred.Problem)
				}
				if err != nil {
					t.Fatalf("predicted to fit %+v but the run failed: %v", b, err)
				}
				// Exact: the planner runs the device's own allocator
				// (package arena) over the same requests in the same order.
				checkWithin(t, "pipeline peak device bytes", pred.PeakDeviceBytes, measured, 0)
				checkWithin(t, "pipeline peak host bytes", pred.PeakHostBytes, measuredHost, 0)
			})
		}
	}
}

// miniTimes are the last mini pipeline's phase times: text, denoise, decode.
var miniTimes [3]float64

// miniPipelineSlow is the pause slowRunner adds before each block.
var miniPipelineSlow = time.Millisecond
