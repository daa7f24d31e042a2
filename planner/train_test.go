package planner

import (
	"fmt"
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/lora"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
)

// tinyTrainConfig is a Wan transformer small enough to train in a test.
func tinyTrainConfig() wan.Config {
	cfg := wan.Config1_3B()
	cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.NumLayers, cfg.FFNDim = 2, 32, 3, 192
	cfg.TextDim, cfg.FreqDim = 48, 32
	return cfg
}

// tinyTrainProfile profiles cfg's transformer alone (bf16 checkpoint, GEMM
// weights marked for a bf16 device copy).
func tinyTrainProfile(t testing.TB, cfg wan.Config) *Profile {
	t.Helper()
	tc := ComponentFromParams(Transformer, dtype.BF16, cfg.Params())
	matrix, err := residency.MatrixWeights(wan.New(cfg).Component(Transformer, nil))
	if err != nil {
		t.Fatal(err)
	}
	tc.MarkMatrices(cfg.Params(), matrix)
	return &Profile{Name: "wan-train-test", Compute: dtype.F32, Wan: cfg, Coder: Wan21VAE(), Components: []*ComponentProfile{tc}}
}

// trainCase is one row of the peak table.
type trainCase struct {
	req  TrainRequest
	k    TrainKnobs
	plan residency.ComponentPlan
}

func (c trainCase) name() string {
	mode := fmt.Sprintf("lora%d", c.req.LoRARank)
	if c.req.Full {
		mode = "full"
	}
	k := c.k.normalized()
	return fmt.Sprintf("%s-b%d-%s-%s-act%s-%s", mode, c.req.Batch, k.DTypeName(), k.Checkpointing, k.ActivationTier, planName(c.plan))
}

// measureTrainSteps runs steps real training steps (ForwardTrain, then
// Backward) of cfg through an executor placing the weights as c.plan says,
// with the knobs, and returns the device's peak allocated bytes and the
// host's peak reserved bytes.
func measureTrainSteps(t *testing.T, cfg wan.Config, c trainCase, steps int) (int64, int64) {
	t.Helper()
	req := c.req.normalized()
	dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
	g := gemm.DefaultGo()
	cp := c.plan
	if req.Full && cp.FromHostCopy() {
		cp.Tier = residency.TierDisk // as train.MasterPlan does
	}
	plan := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: cp}}
	ex, err := residency.New(residency.Config{Backend: cpu.New(dev, g), HostBackend: cpu.New(host, g), Plan: plan,
		Dense: true, MatrixDType: c.k.normalized().DType})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	m := wan.New(cfg)
	var src residency.Source = newMemSource(cfg.Params(), 21)
	var z *zeroHarness
	if req.Full {
		z = newZeroHarness(t, cfg, host)
		defer z.close()
		src = z.src
	}
	comp := m.Component(Transformer, src)
	comp.Order = residency.TrainingOrder(len(comp.Blocks))
	if err := ex.Register(comp); err != nil {
		t.Fatal(err)
	}
	ops := ex.Ops(Transformer)
	k := c.k.normalized()
	mode, err := wan.ParseCheckpointing(k.Checkpointing)
	if err != nil {
		t.Fatal(err)
	}
	m.Train = wan.TrainOptions{Checkpointing: mode, DType: dtype.F32}
	if k.DType == dtype.BF16 {
		m.Train.DType = dtype.BF16
	}
	if k.ActivationTier == TierHostT {
		m.Train.Store = residency.NewHostActivations(dev, host)
	}
	grads := map[string]*tensor.Tensor{}
	var keep []*tensor.Tensor
	if !req.Full {
		names, shapes := cfg.LinearShapes()
		var ls []wan.LoRA
		for _, mod := range lora.Targets(names, req.LoRATargets) {
			s := shapes[mod]
			l := wan.LoRA{Module: mod, Scale: 1}
			l.A, l.B = ops.Zeros(req.LoRARank, s[1]), ops.Zeros(s[0], req.LoRARank)
			l.GradA, l.GradB = ops.Zeros(req.LoRARank, s[1]), ops.Zeros(s[0], req.LoRARank)
			keep = append(keep, l.A, l.B, l.GradA, l.GradB)
			ls = append(ls, l)
		}
		if err := m.SetLoRA(ls); err != nil {
			t.Fatal(err)
		}
	}
	defer tensor.Free(keep...)
	lf, lh, lw := (req.Frames-1)/4+1, req.Height/8, req.Width/8
	lat := make([]float32, req.Batch*cfg.InChannels*lf*lh*lw)
	for i := range lat {
		lat[i] = float32(i%7) * 0.1
	}
	ctx := make([]float32, req.Batch*req.TextLen*cfg.TextDim)
	run := slowRunner{ex: ex, pause: 2 * time.Millisecond}
	for range steps {
		x := ops.Upload(lat, req.Batch, cfg.InChannels, lf, lh, lw)
		cx := ops.Upload(ctx, req.Batch, req.TextLen, cfg.TextDim)
		pred, tape, err := m.ForwardTrain(run, ops, x, make([]float32, req.Batch), cx)
		if err != nil {
			t.Fatal(err)
		}
		shape := pred.Shape()
		ops.Download(pred)
		tensor.Free(pred, x)
		d := ops.Upload(make([]float32, tensor.NumElems(shape)), shape...)
		var back residency.Runner = run
		var buf *tensor.Buffer
		if z != nil {
			buf = z.gradients(t, ops, grads)
			back = invalidating{run: run, ex: ex}
		}
		if err := m.Backward(back, ops, tape, d, grads); err != nil {
			t.Fatal(err)
		}
		buf.Free()
		tensor.Free(d, cx)
		if err := ops.Err(); err != nil {
			t.Fatal(err)
		}
	}
	ex.Done(Transformer)
	return dev.Stats().PeakAllocated, host.Stats().PeakReserved
}

// TestTrainPeakMatchesStep runs real training steps of a small Wan
// transformer with each knob and placement, and checks the predicted
// device peak (allocated bytes, what ferry train reports) against the
// measured one exactly, and the host peak where the host holds
// activations or weight copies.
func TestTrainPeakMatchesStep(t *testing.T) {
	cfg := tinyTrainConfig()
	p := tinyTrainProfile(t, cfg)
	base := TrainRequest{Batch: 1, Frames: 5, Height: 64, Width: 96, TextLen: 24, LoRARank: 4}
	resident := residency.ComponentPlan{Placement: residency.Resident}
	stream1 := residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}
	var cases []trainCase
	for _, ck := range []string{CheckpointNone, CheckpointBlock, CheckpointSelective} {
		for _, tier := range []string{TierDevice, TierHostT} {
			cases = append(cases, trainCase{req: base, k: TrainKnobs{Checkpointing: ck, ActivationTier: tier}, plan: resident})
		}
	}
	b2 := base
	b2.Batch = 2
	full := base
	full.Full, full.LoRARank = true, 0
	cases = append(cases,
		trainCase{req: b2, k: TrainKnobs{Checkpointing: CheckpointNone}, plan: resident},
		trainCase{req: b2, k: TrainKnobs{Checkpointing: CheckpointSelective, DType: dtype.BF16}, plan: resident},
		trainCase{req: base, k: TrainKnobs{Checkpointing: CheckpointNone, DType: dtype.BF16, ActivationTier: TierHostT}, plan: resident},
		trainCase{req: base, k: TrainKnobs{Checkpointing: CheckpointBlock}, plan: stream1},
		trainCase{req: b2, k: TrainKnobs{Checkpointing: CheckpointSelective}, plan: stream1},
		trainCase{req: base, k: TrainKnobs{Checkpointing: CheckpointNone}, plan: residency.ComponentPlan{Placement: residency.Stream}},
		trainCase{req: full, k: TrainKnobs{Checkpointing: CheckpointNone}, plan: resident},
		trainCase{req: full, k: TrainKnobs{Checkpointing: CheckpointBlock, DType: dtype.BF16}, plan: stream1},
		trainCase{req: full, k: TrainKnobs{Checkpointing: CheckpointSelective, ActivationTier: TierHostT}, plan: stream1},
	)
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			measured, measuredHost := measureTrainSteps(t, cfg, c, 2)
			plan := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: c.plan}}
			pred, err := PredictTraining(p, slowCompute(), plan, c.req, c.k, Budgets{})
			if err != nil {
				t.Fatal(err)
			}
			if pred.Problem != "" {
				t.Fatal(pred.Problem)
			}
			checkWithin(t, "peak device bytes", pred.PeakDeviceBytes, measured, 0)
			if measuredHost > 1<<20 {
				checkWithin(t, "peak host bytes", pred.PeakHostBytes, measuredHost, 0)
			}
		})
	}
}

// zeroHarness is train's ZeRO-Offload state reduced to its allocations:
// four host-tier buffers per block (masters, gradients, moments), the
// masters served to the executor as float32, and one device buffer for a
// block's gradients during the backward.
type zeroHarness struct {
	src   *f32Source
	bufs  []*tensor.Buffer
	offs  map[string]int64
	bytes int64 // the largest block's gradients
}

func newZeroHarness(t *testing.T, cfg wan.Config, host tensor.Device) *zeroHarness {
	t.Helper()
	z := &zeroHarness{src: &f32Source{shapes: map[string][]int{}}, offs: map[string]int64{}}
	per := map[string]int64{}
	var blocks []string
	for _, p := range cfg.Params() {
		if _, ok := per[p.Block]; !ok {
			blocks = append(blocks, p.Block)
		}
		z.offs[p.Name] = per[p.Block]
		per[p.Block] += alignUp(f32(p.Shape...), 64)
		z.src.shapes[p.Name] = p.Shape
	}
	for _, b := range blocks {
		z.bytes = max(z.bytes, per[b])
		for range 4 {
			buf, err := host.Alloc(per[b], b)
			if err != nil {
				t.Fatal(err)
			}
			z.bufs = append(z.bufs, buf)
		}
	}
	return z
}

func (z *zeroHarness) close() {
	for _, b := range z.bufs {
		b.Free()
	}
}

// gradients allocates the device buffer and points grads at views of it.
func (z *zeroHarness) gradients(t *testing.T, ops *tensor.Ops, grads map[string]*tensor.Tensor) *tensor.Buffer {
	t.Helper()
	buf, err := ops.B.Device().Alloc(z.bytes, "gradients")
	if err != nil {
		t.Fatal(err)
	}
	for name, off := range z.offs {
		v, err := tensor.View(buf, off, dtype.F32, z.src.shapes[name]...)
		if err != nil {
			t.Fatal(err)
		}
		grads[name] = v
	}
	return buf
}

// invalidating runs a backward block, then drops its copies as the host
// update does (deterministically here, right after the block).
type invalidating struct {
	run slowRunner
	ex  *residency.Executor
}

func (r invalidating) Run(b *residency.Block, fn func() error) error {
	if err := r.run.Run(b, fn); err != nil {
		return err
	}
	r.ex.Invalidate(b)
	return nil
}

// f32Source serves zero-valued float32 tensors (the masters' layout).
type f32Source struct{ shapes map[string][]int }

func (s *f32Source) Info(name string) (residency.TensorInfo, bool) {
	sh, ok := s.shapes[name]
	if !ok {
		return residency.TensorInfo{}, false
	}
	return residency.TensorInfo{DType: dtype.F32, Shape: sh, Size: f32(sh...)}, true
}

func (s *f32Source) Read(name string, off int64, dst []byte) error {
	clear(dst)
	return nil
}

func (s *f32Source) Drop(string) {}
