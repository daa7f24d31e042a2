package planner

import (
	"fmt"
	"math/rand/v2"
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

// memSource is an in-memory bf16 checkpoint with random weights.
type memSource struct {
	raw    map[string][]byte
	shapes map[string][]int
}

func newMemSource(params []residency.ParamSpec, seed uint64) *memSource {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := &memSource{raw: map[string][]byte{}, shapes: map[string][]int{}}
	for _, p := range params {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		b := make([]byte, 2*n)
		for i := range n {
			h := dtype.F32ToBF16(float32(rng.NormFloat64() * 0.05))
			b[2*i], b[2*i+1] = byte(h), byte(h>>8)
		}
		s.raw[p.Name], s.shapes[p.Name] = b, p.Shape
	}
	return s
}

func (s *memSource) Info(name string) (residency.TensorInfo, bool) {
	b, ok := s.raw[name]
	if !ok {
		return residency.TensorInfo{}, false
	}
	return residency.TensorInfo{DType: dtype.BF16, Shape: s.shapes[name], Size: int64(len(b))}, true
}

func (s *memSource) Read(name string, off int64, dst []byte) error {
	b, ok := s.raw[name]
	if !ok || off+int64(len(dst)) > int64(len(b)) {
		return fmt.Errorf("read %s [%d, +%d) out of range", name, off, len(dst))
	}
	copy(dst, b[off:])
	return nil
}

func (s *memSource) Drop(string) {}

// slowRunner lets the copy worker start what the executor queued before
// fn allocates, so that the run meets the simulation's assumption that
// compute outlasts copies.
type slowRunner struct {
	ex    *residency.Executor
	pause time.Duration
}

func (r slowRunner) Run(b *residency.Block, fn func() error) error {
	return r.ex.Run(b, func() error { time.Sleep(r.pause); return fn() })
}

// slowCompute is a hardware profile on which every block's compute takes
// far longer than any copy, as slowRunner makes the real run behave.
func slowCompute() hwprofile.Profile {
	hw := hwprofile.Default()
	hw.Gemm = []hwprofile.GemmRate{{Name: hw.GemmDefault, GFLOPS: 1e-6}}
	hw.AttentionGFLOPS, hw.ConvGFLOPS, hw.ConvWideGFLOPS, hw.ConvMidGFLOPS, hw.ConvSmallGFLOPS, hw.MemGBps = 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6
	hw.OpOverheadUs = 1e-9
	hw.H2DGBps, hw.H2DF32GBps, hw.DiskGBps = 1e6, 1e6, 1e6
	return hw
}

// placements are the plans every peak test covers.
func placements() []residency.ComponentPlan {
	return []residency.ComponentPlan{
		{Placement: residency.Resident},
		{Placement: residency.Stream, Prefetch: 0},
		{Placement: residency.Stream, Prefetch: 1},
		{Placement: residency.Stream, Prefetch: 2},
		{Placement: residency.Stream, Prefetch: 1, Persistent: 1},
		{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk},
		{Placement: residency.Onload},
		{Placement: residency.Onload, Tier: residency.TierDisk},
	}
}

func planName(c residency.ComponentPlan) string {
	return fmt.Sprintf("%s-k%d-n%d-%s", c.Placement, c.Prefetch, c.Persistent, c.Tier)
}

// syntheticParams is a component of uneven blocks (64 KiB to 3 MiB in
// bf16, 6 MiB on the device), so that rounding and segment reuse matter.
func syntheticParams() []residency.ParamSpec {
	var ps []residency.ParamSpec
	sizes := [][2]int{{128, 256}, {1024, 768}, {512, 512}, {1536, 1024}, {256, 1024}, {1024, 1024}}
	for i, s := range sizes {
		block := fmt.Sprintf("blocks.%d", i)
		ps = append(ps,
			residency.ParamSpec{Block: block, Name: block + ".w", Shape: []int{s[0], s[1]}},
			residency.ParamSpec{Block: block, Name: block + ".b", Shape: []int{s[0]}})
	}
	return ps
}

// activationScript is what each block's fn allocates: a few tensors of
// sizes that vary by block, some kept into the next block.
func activationScript(nblocks, passes int, id *ids) []pass {
	var out []pass
	r := &recorder{ids: id}
	for range passes {
		var ps pass
		carry := r.alloc(300_000)
		ps.pre = r.take()
		for i := range nblocks {
			a := r.alloc(int64(200_000 * (i + 1)))
			b := r.alloc(1_500_000)
			r.free(a)
			c := r.alloc(int64(700_000 * (nblocks - i)))
			r.free(b, c)
			ps.calls = append(ps.calls, call{block: i, ev: r.take(), work: work{mem: 1}})
		}
		r.free(carry)
		ps.post = r.take()
		out = append(out, ps)
	}
	return out
}

// replay performs a pass's events with real tensors.
type replay struct {
	ops  *tensor.Ops
	live map[int]*tensor.Tensor
}

func (rp *replay) do(evs []event) error {
	for _, ev := range evs {
		if ev.bytes == 0 {
			rp.live[ev.id].Free()
			delete(rp.live, ev.id)
			continue
		}
		rp.live[ev.id] = rp.ops.Empty(dtype.Bool, int(ev.bytes))
	}
	return rp.ops.Err()
}

// TestPeakMatchesExecutor runs a synthetic component through the real
// executor and CPU devices, and checks the simulated peak device bytes
// against the measured ones for every placement.
func TestPeakMatchesExecutor(t *testing.T) {
	params := syntheticParams()
	comp := ComponentFromParams("synthetic", dtype.BF16, params)
	for _, cp := range placements() {
		t.Run(planName(cp), func(t *testing.T) {
			plan := &residency.Plan{Components: map[string]residency.ComponentPlan{"synthetic": cp}}
			passes := activationScript(len(comp.Blocks), 2, &ids{})

			dev, host := cpu.NewDevice(64<<20), cpu.NewDevice(0)
			ex, err := residency.New(residency.Config{Backend: cpu.New(dev, gemm.Naive{}), HostBackend: cpu.New(host, gemm.Naive{}), Plan: plan, KeepStored: keepStored})
			if err != nil {
				t.Fatal(err)
			}
			rc := &residency.Component{Name: "synthetic", Source: newMemSource(params, 1)}
			weights := make([]struct {
				W *tensor.Tensor `w:"w"`
				B *tensor.Tensor `w:"b"`
			}, len(comp.Blocks))
			for i := range comp.Blocks {
				rc.Blocks = append(rc.Blocks, &residency.Block{Name: fmt.Sprintf("synthetic.blocks.%d", i), Prefix: fmt.Sprintf("blocks.%d.", i), Weights: &weights[i]})
			}
			if err := ex.Register(rc); err != nil {
				t.Fatal(err)
			}
			rp := &replay{ops: ex.Ops("synthetic"), live: map[int]*tensor.Tensor{}}
			run := slowRunner{ex: ex, pause: 3 * time.Millisecond}
			for _, ps := range passes {
				if err := rp.do(ps.pre); err != nil {
					t.Fatal(err)
				}
				for _, c := range ps.calls {
					if err := run.Run(rc.Blocks[c.block], func() error { return rp.do(c.ev) }); err != nil {
						t.Fatal(err)
					}
				}
				if err := rp.do(ps.post); err != nil {
					t.Fatal(err)
				}
			}
			ex.Done("synthetic")
			measured, measuredHost := dev.Stats().PeakAllocated, host.Stats().PeakReserved
			ex.Close()

			s := newSim(slowCompute(), Budgets{DeviceBytes: 64 << 20})
			if err := s.register(comp, plan.For("synthetic"), dtype.F32); err != nil {
				t.Fatal(err)
			}
			for _, ps := range passes {
				s.runPass(s.byName["synthetic"], ps)
			}
			s.done(s.byName["synthetic"])
			if s.err != nil {
				t.Fatal(s.err)
			}
			checkWithin(t, "peak device bytes", s.dev.PeakAllocated, measured, 0)
			checkWithin(t, "peak host bytes", s.host.PeakReserved, measuredHost, 0)
		})
	}
}

func checkWithin(t *testing.T, what string, predicted, measured int64, tol float64) {
	t.Helper()
	diff := float64(predicted-measured) / float64(max(measured, 1))
	t.Logf("%s: predicted %d, measured %d (%+.2f%%)", what, predicted, measured, 100*diff)
	if diff > tol || diff < -tol {
		t.Errorf("%s: predicted %d, measured %d: off by %+.1f%% (tolerance %.0f%%)", what, predicted, measured, 100*diff, 100*tol)
	}
}

// TestWanPeakMatchesForward runs the real Wan transformer (a small config)
// through the executor with each placement, uploading latents and context
// as the pipeline does, and checks the prediction built from wanPass.
func TestWanPeakMatchesForward(t *testing.T) {
	cfg := wan.Config1_3B()
	cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.NumLayers, cfg.FFNDim = 2, 32, 3, 192
	cfg.TextDim, cfg.FreqDim = 48, 32
	p := &Profile{Name: "wan-test", Compute: dtype.F32, Wan: cfg, Coder: Wan21VAE(),
		Components: []*ComponentProfile{marked(t, ComponentFromParams(Transformer, dtype.BF16, cfg.Params()), cfg.Params(), wan.New(cfg).Component(Transformer, nil))}}
	src := newMemSource(cfg.Params(), 2)
	// prompt: the longest prompt's rows, the rest of the 24 folded into
	// one (0: not told, nothing folds).
	cases := []struct {
		run           residency.RunOptions
		batch, prompt int
	}{{residency.RunOptions{}, 1, 0}, {residency.RunOptions{FFNChunk: 16}, 1, 0}, {residency.RunOptions{}, 2, 0},
		{residency.RunOptions{FFNChunk: 20}, 2, 0}, {residency.RunOptions{}, 2, 7}}
	for _, tc := range cases {
		run := tc.run
		req := Request{Batch: tc.batch, Frames: 5, Height: 64, Width: 96, TextLen: 24, PromptTokens: tc.prompt, Steps: 1}
		for _, cp := range placements() {
			t.Run(fmt.Sprintf("%s-chunk%d-batch%d-prompt%d", planName(cp), run.FFNChunk, tc.batch, tc.prompt), func(t *testing.T) {
				plan := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: cp}, Run: run}
				measured := runWan(t, cfg, src, plan, req, 2)

				s := newSim(slowCompute(), Budgets{})
				if err := s.register(p.Components[0], plan.For(Transformer), dtype.F32); err != nil {
					t.Fatal(err)
				}
				c, f, h, w := req.latent(p)
				id := &ids{}
				for range 2 {
					r := &recorder{ids: id}
					lat := r.alloc(f32(req.Batch, c, f, h, w))
					ctx := r.alloc(f32(req.Batch, req.TextLen, cfg.TextDim))
					for _, ev := range r.take() {
						s.apply(ev, s.dev)
					}
					s.runPass(s.byName[Transformer], wanPass(p, req, run, req.Batch, loraPass{}, id))
					s.apply(event{id: lat}, s.dev)
					s.apply(event{id: ctx}, s.dev)
				}
				s.done(s.byName[Transformer])
				checkWithin(t, "peak device bytes", s.dev.PeakAllocated, measured, 0)
			})
		}
	}
}

// runWan runs passes forward passes of a Wan transformer and returns the
// device's peak allocated bytes.
func runWan(t *testing.T, cfg wan.Config, src residency.Source, plan *residency.Plan, req Request, passes int) int64 {
	t.Helper()
	ex, m, dev := wanExecutor(t, cfg, src, plan)
	defer ex.Close()
	ops := ex.Ops(Transformer)
	lf, lh, lw := (req.Frames-1)/4+1, req.Height/8, req.Width/8
	lat := make([]float32, req.Batch*cfg.InChannels*lf*lh*lw)
	ctx := make([]float32, req.Batch*req.TextLen*cfg.TextDim)
	for range passes {
		x := ops.Upload(lat, req.Batch, cfg.InChannels, lf, lh, lw)
		c := ops.Upload(ctx, req.Batch, req.TextLen, cfg.TextDim)
		in := wan.Inputs{Timesteps: make([]float32, req.Batch), Context: c, TextRows: promptRows(req)}
		out, err := m.ForwardInputs(slowRunner{ex: ex, pause: 2 * time.Millisecond}, ops, x, in)
		if err != nil {
			t.Fatal(err)
		}
		tensor.Free(out, x, c)
	}
	ex.Done(Transformer)
	return dev.Stats().PeakAllocated
}

// promptRows is Inputs.TextRows for req: each sample's text holds
// PromptTokens rows before its zero padding (nil when not told).
func promptRows(req Request) []int {
	if req.PromptTokens == 0 {
		return nil
	}
	rows := make([]int, req.Batch)
	for i := range rows {
		rows[i] = req.PromptTokens
	}
	return rows
}

// wanExecutor registers a Wan transformer, its FFN chunked as plan runs
// it, with an executor over a CPU device and host, and returns the
// executor (the caller closes it), the model and the device.
func wanExecutor(t *testing.T, cfg wan.Config, src residency.Source, plan *residency.Plan) (*residency.Executor, *wan.Model, *cpu.Device) {
	t.Helper()
	dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
	g := gemm.DefaultGo()
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, g), HostBackend: cpu.New(host, g), Plan: plan, KeepStored: keepStored})
	if err != nil {
		t.Fatal(err)
	}
	m := wan.New(cfg)
	m.Options.FFNChunk = plan.Run.FFNChunk
	if err := ex.Register(m.Component(Transformer, src)); err != nil {
		ex.Close()
		t.Fatal(err)
	}
	return ex, m, dev
}

// marked marks c's GEMM weights as comp declares them, as the profile
// builders do, so that the planner counts them in the dtype the executor
// keeps them in (keepStored: bf16 as stored where the CPU GEMM widens it).
func marked(tb testing.TB, c *ComponentProfile, params []residency.ParamSpec, comp *residency.Component) *ComponentProfile {
	tb.Helper()
	matrix, err := residency.MatrixWeights(comp)
	if err != nil {
		tb.Fatal(err)
	}
	c.MarkMatrices(params, matrix)
	return c
}

// TestWanImagePeakMatchesForward is TestWanPeakMatchesForward for an
// image-conditioned transformer (Wan 2.1 I2V's 257 CLIP tokens) at text
// lengths where diffusers' re-split of [image; text] gives back the parts
// (512), moves text rows to the image attention (600), counts its cut from
// the end (24) or leaves the image attention nothing (255). The text is
// long against the 48 video tokens, so the cross-attention's keys set the
// peak.
func TestWanImagePeakMatchesForward(t *testing.T) {
	cfg := wan.Config1_3B()
	cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.NumLayers, cfg.FFNDim = 2, 32, 2, 192
	cfg.TextDim, cfg.FreqDim, cfg.InChannels = 48, 32, 36
	imageDim, kv := 24, cfg.InnerDim()
	cfg.ImageDim, cfg.AddedKVProjDim = &imageDim, &kv
	p := &Profile{Name: "wan-i2v-test", Compute: dtype.F32, Wan: cfg, Coder: Wan21VAE(),
		Components: []*ComponentProfile{marked(t, ComponentFromParams(Transformer, dtype.BF16, cfg.Params()), cfg.Params(), wan.New(cfg).Component(Transformer, nil))}}
	src := newMemSource(cfg.Params(), 2)
	const imgRows = 257
	for _, tc := range []struct{ textLen, prompt int }{{512, 0}, {600, 0}, {24, 0}, {255, 0}, {512, 9}, {600, 9}} {
		req := Request{Batch: 1, Frames: 5, Height: 64, Width: 96, TextLen: tc.textLen, PromptTokens: tc.prompt, Steps: 1}
		plan := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: {Placement: residency.Resident}}}
		t.Run(fmt.Sprintf("%d-prompt%d", tc.textLen, tc.prompt), func(t *testing.T) {
			measured := runWanImage(t, cfg, src, plan, req, imgRows)

			s := newSim(slowCompute(), Budgets{})
			if err := s.register(p.Components[0], plan.For(Transformer), dtype.F32); err != nil {
				t.Fatal(err)
			}
			c, f, h, w := req.latent(p)
			r := &recorder{ids: &ids{}}
			lat := r.alloc(f32(req.Batch, c, f, h, w))
			ctx := r.alloc(f32(req.Batch, req.TextLen, cfg.TextDim))
			img := r.alloc(f32(req.Batch, imgRows, imageDim))
			for _, ev := range r.take() {
				s.apply(ev, s.dev)
			}
			s.runPass(s.byName[Transformer], wanPass(p, req, plan.Run, req.Batch, loraPass{}, r.ids))
			s.done(s.byName[Transformer])
			for _, id := range []int{lat, ctx, img} {
				s.apply(event{id: id}, s.dev)
			}
			checkWithin(t, "peak device bytes", s.dev.PeakAllocated, measured, 0)
		})
	}
}

// runWanImage runs one forward pass of an image-conditioned Wan
// transformer with imgRows image tokens and returns the device's peak
// allocated bytes.
func runWanImage(t *testing.T, cfg wan.Config, src residency.Source, plan *residency.Plan, req Request, imgRows int) int64 {
	t.Helper()
	ex, m, dev := wanExecutor(t, cfg, src, plan)
	defer ex.Close()
	ops := ex.Ops(Transformer)
	lf, lh, lw := (req.Frames-1)/4+1, req.Height/8, req.Width/8
	x := ops.Upload(make([]float32, req.Batch*cfg.InChannels*lf*lh*lw), req.Batch, cfg.InChannels, lf, lh, lw)
	c := ops.Upload(make([]float32, req.Batch*req.TextLen*cfg.TextDim), req.Batch, req.TextLen, cfg.TextDim)
	img := ops.Upload(make([]float32, req.Batch*imgRows**cfg.ImageDim), req.Batch, imgRows, *cfg.ImageDim)
	out, err := m.ForwardInputs(ex, ops, x, wan.Inputs{Timesteps: make([]float32, req.Batch), Context: c, Image: img, TextRows: promptRows(req)})
	if err != nil {
		t.Fatal(err)
	}
	tensor.Free(out, x, c, img)
	ex.Done(Transformer)
	return dev.Stats().PeakAllocated
}
