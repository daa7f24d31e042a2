package wan

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/checkpoint"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// The training golden case's tolerances (manifest.json, wan_train): the
// loss within rtol 1e-5; every gradient within 1e-4 × its reference's
// largest magnitude.
const lossRtol, gradAtolRel = 1e-5, 1e-4

// loraAlpha is the golden LoRA's alpha (rank 4: scale 2).
const loraAlpha = 8

// trainCase is the golden training case copied from
// ../shared/golden/wan_train into testdata/train.
type trainCase struct {
	cfg                                        Config
	weights, inputs, loraInit, full, loraSteps *checkpoint.Set
}

// trainGoldenDir is the wan_train golden case from ../shared/golden, one
// copy for every package that tests training.
var trainGoldenDir = filepath.Join("..", "..", "testdata", "wan_train")

func loadTrainCase(t *testing.T) *trainCase {
	t.Helper()
	dir := trainGoldenDir
	raw, err := os.ReadFile(filepath.Join(dir, "model", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tc := &trainCase{}
	if tc.cfg, err = ParseConfig(raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		set  **checkpoint.Set
		file string
	}{{&tc.weights, "model/diffusion_pytorch_model"}, {&tc.inputs, "inputs"}, {&tc.loraInit, "lora_init"},
		{&tc.full, "outputs_full"}, {&tc.loraSteps, "outputs_lora"}} {
		s, err := checkpoint.OpenSet(filepath.Join(dir, f.file+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		*f.set = s
		t.Cleanup(func() { s.Close() })
	}
	return tc
}

// countingBackend records the weights LinearBackward is called with.
type countingBackend struct {
	tensor.Backend
	calls []linearCall
}

type linearCall struct {
	w          *tensor.Tensor
	weightGrad bool // dw or db given
}

func (c *countingBackend) LinearBackward(dx, dw, db, dy, x, w *tensor.Tensor) error {
	c.calls = append(c.calls, linearCall{w: w, weightGrad: dw != nil || db != nil})
	return c.Backend.LinearBackward(dx, dw, db, dy, x, w)
}

// trainRig runs the golden model through a Fixed runner over its weights
// uploaded as float32, on a fresh CPU device.
type trainRig struct {
	tc      *trainCase
	dev     *cpu.Device
	be      *countingBackend
	ops     *tensor.Ops
	weights residency.Fixed
	m       *Model
	// The objective's inputs on the device, and its target on the host.
	xt, ctx *tensor.Tensor
	ts      []float32
	target  []float32
}

func newTrainRig(t *testing.T, tc *trainCase, g gemm.Impl) *trainRig {
	t.Helper()
	dev := cpu.NewDevice(0)
	r := &trainRig{tc: tc, dev: dev, be: &countingBackend{Backend: cpu.New(dev, g)}}
	r.ops = tensor.NewOps(r.be)
	r.weights = residency.Fixed{Tensors: map[string]*tensor.Tensor{}}
	for _, p := range tc.cfg.Params() {
		d, shape := modeltest.TensorOf(t, tc.weights, p.Name)
		r.weights.Tensors[p.Name] = r.ops.Upload(d, shape...)
	}
	r.m = New(tc.cfg)
	r.m.Component("transformer", nil)

	// x_t = (1−σ)·latents + σ·noise, timestep = σ·1000, target = noise − latents.
	lat, shape := modeltest.TensorOf(t, tc.inputs, "latents")
	noise, _ := modeltest.TensorOf(t, tc.inputs, "noise")
	sigmas, _ := modeltest.TensorOf(t, tc.inputs, "sigmas")
	ctx, cs := modeltest.TensorOf(t, tc.inputs, "encoder_hidden_states")
	per := len(lat) / shape[0]
	xt := make([]float32, len(lat))
	r.target = make([]float32, len(lat))
	for i := range lat {
		s := sigmas[i/per]
		xt[i] = (1-s)*lat[i] + s*noise[i]
		r.target[i] = noise[i] - lat[i]
	}
	for _, s := range sigmas {
		r.ts = append(r.ts, s*1000)
	}
	r.xt = r.ops.Upload(xt, shape...)
	r.ctx = r.ops.Upload(ctx, cs...)
	if err := r.ops.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tensor.Free(r.xt, r.ctx)
		for _, w := range r.weights.Tensors {
			w.Free()
		}
		if a := dev.Stats().Allocated; a != 0 {
			t.Errorf("device still holds %d bytes after the test freed everything", a)
		}
	})
	return r
}

// zeros allocates float32 zeros of each parameter's shape, by name.
func (r *trainRig) zeros(names []string) map[string]*tensor.Tensor {
	out := map[string]*tensor.Tensor{}
	for _, n := range names {
		out[n] = r.ops.Zeros(r.weights.Tensors[n].Shape()...)
	}
	return out
}

// step runs one training step: ForwardTrain, the loss mean((pred−target)²)
// in float64, dpred = 2(pred−target)/N, Backward. It returns the loss and
// the prediction, and checks that the device is back to what it held
// before the step.
func (r *trainRig) step(t *testing.T, grads map[string]*tensor.Tensor, tweak func(*Tape)) (float64, []float32) {
	t.Helper()
	before := r.dev.Stats().Allocated
	pred, tape, err := r.m.ForwardTrain(r.weights, r.ops, r.xt, r.ts, r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tape.Bytes() <= 0 {
		t.Errorf("tape holds %d bytes", tape.Bytes())
	}
	got := r.ops.Download(pred)
	pred.Free()
	loss, dpred := mseGrad(got, r.target)
	if tweak != nil {
		tweak(tape)
	}
	d := r.ops.Upload(dpred, tape.pred...)
	err = r.m.Backward(r.weights, r.ops, tape, d, grads)
	d.Free()
	tape.Free()
	if err != nil {
		t.Fatal(err)
	}
	if after := r.dev.Stats().Allocated; after != before {
		t.Errorf("device allocated %d bytes before the step, %d after", before, after)
	}
	return loss, got
}

// mseGrad is the objective's loss mean((pred−target)²) and its gradient
// 2(pred−target)/N.
func mseGrad(pred, target []float32) (float64, []float32) {
	sum := 0.0
	d := make([]float32, len(pred))
	for i := range pred {
		e := float64(pred[i]) - float64(target[i])
		sum += e * e
		d[i] = float32(2 * e / float64(len(pred)))
	}
	return sum / float64(len(pred)), d
}

// compareGrad checks a gradient against its reference within
// gradAtolRel × the reference's largest magnitude.
// It returns the largest error relative to that magnitude.
func compareGrad(t *testing.T, ops *tensor.Ops, name string, got *tensor.Tensor, want []float32) float64 {
	t.Helper()
	m := absMax(want)
	if m == 0 {
		t.Errorf("%s: the reference gradient is all zeros", name)
		return 0
	}
	return modeltest.Compare(t, name, ops.Download(got), want, gradAtolRel*m, 0) / m
}

// worstGrad keeps the largest relative gradient error and its name.
type worstGrad struct {
	name string
	rel  float64
}

func (w *worstGrad) add(name string, rel float64) {
	if rel > w.rel {
		w.name, w.rel = name, rel
	}
}

func compareLoss(t *testing.T, name string, got float64, s *checkpoint.Set) {
	t.Helper()
	want, _ := modeltest.TensorOf(t, s, name)
	if math.Abs(got-float64(want[0])) > lossRtol*math.Abs(float64(want[0])) {
		t.Errorf("%s = %.8g, want %.8g (rtol %g)", name, got, want[0], lossRtol)
	}
}

// TestTrainFullMatchesGolden: full fine-tuning, a gradient for every
// parameter, with the reference GEMM and the one ferry runs with.
func TestTrainFullMatchesGolden(t *testing.T) {
	tc := loadTrainCase(t)
	for _, impl := range []gemm.Impl{gemm.Naive{}, gemm.Best()} {
		t.Run(impl.Name(), func(t *testing.T) {
			r := newTrainRig(t, tc, impl)
			var names []string
			for _, p := range tc.cfg.Params() {
				names = append(names, p.Name)
			}
			grads := r.zeros(names)
			defer func() {
				for _, g := range grads {
					g.Free()
				}
			}()
			loss, pred := r.step(t, grads, nil)
			want, _ := modeltest.TensorOf(t, tc.full, "model_pred")
			modeltest.Compare(t, "model_pred", pred, want, atol, rtol)
			compareLoss(t, "loss", loss, tc.full)
			var worst worstGrad
			for _, n := range names {
				want, _ := modeltest.TensorOf(t, tc.full, "grad."+n)
				worst.add(n, compareGrad(t, r.ops, "grad."+n, grads[n], want))
			}
			t.Logf("%d gradients: worst error %.3g × absmax (%s), tolerance %g", len(names), worst.rel, worst.name, gradAtolRel)
		})
	}
}

// setGoldenLoRA applies lora_init's adapters with zeroed gradients; it
// returns them by parameter name ("<module>.lora_A.weight") with their
// gradient tensors.
func (r *trainRig) setGoldenLoRA(t *testing.T) map[string]*tensor.Tensor {
	t.Helper()
	var ls []LoRA
	grads := map[string]*tensor.Tensor{}
	for _, n := range r.tc.loraInit.Names() {
		mod, ok := strings.CutSuffix(n, ".lora_A.weight")
		if !ok {
			continue
		}
		a, as := modeltest.TensorOf(t, r.tc.loraInit, n)
		b, bs := modeltest.TensorOf(t, r.tc.loraInit, mod+".lora_B.weight")
		l := LoRA{Module: mod, A: r.ops.Upload(a, as...), B: r.ops.Upload(b, bs...), Scale: float32(loraAlpha) / float32(as[0])}
		l.GradA, l.GradB = r.ops.Zeros(as...), r.ops.Zeros(bs...)
		grads[n], grads[mod+".lora_B.weight"] = l.GradA, l.GradB
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		t.Fatal("lora_init holds no adapters")
	}
	if err := r.m.SetLoRA(ls); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range ls {
			tensor.Free(l.A, l.B, l.GradA, l.GradB)
		}
	})
	return grads
}

// TestTrainLoRAMatchesGolden: LoRA on every block's attention and FFN
// Linears, no base-weight gradients. Besides the golden loss and adapter
// gradients it checks that no base weight gets a weight-gradient GEMM and
// that the input-gradient chain stops at the first block's attention
// projections (nothing before them trains).
//
// The adapters' products are added in blocks of rows (byRows): the second
// run cuts the golden case's 72 rows in several blocks.
func TestTrainLoRAMatchesGolden(t *testing.T) {
	for _, blockBytes := range []int{rowBlockBytes, 4 * 48 * 10} {
		t.Run(fmt.Sprintf("rows of %d bytes", blockBytes), func(t *testing.T) {
			defer func(b int) { rowBlockBytes = b }(rowBlockBytes)
			rowBlockBytes = blockBytes
			testTrainLoRA(t)
		})
	}
}

func testTrainLoRA(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	loraGrads := r.setGoldenLoRA(t)
	loss, _ := r.step(t, nil, nil)
	compareLoss(t, "step1.loss", loss, tc.loraSteps)
	var worst worstGrad
	for n, g := range loraGrads {
		want, _ := modeltest.TensorOf(t, tc.loraSteps, "step1.grad."+n)
		worst.add(n, compareGrad(t, r.ops, "step1.grad."+n, g, want))
	}
	t.Logf("%d adapter gradients: worst error %.3g × absmax (%s), tolerance %g", len(loraGrads), worst.rel, worst.name, gradAtolRel)

	base, embed := map[*tensor.Buffer]string{}, map[string]bool{}
	for _, p := range tc.cfg.Params() {
		base[r.weights.Tensors[p.Name].Buffer()] = p.Name
		embed[p.Name] = p.Block == embedBlock
	}
	seen := map[string]int{}
	for _, c := range r.be.calls {
		n, ok := base[c.w.Buffer()]
		if !ok {
			continue // an adapter
		}
		seen[n]++
		if c.weightGrad {
			t.Errorf("LinearBackward computed a weight gradient of %s", n)
		}
		if embed[n] {
			t.Errorf("LinearBackward ran on %s: nothing before the blocks trains", n)
		}
	}
	for _, proj := range []string{"to_q", "to_k", "to_v"} {
		if n := "blocks.0.attn1." + proj + ".weight"; seen[n] != 0 {
			t.Errorf("%s: %d input-gradient products in the first block (nothing needs them)", n, seen[n])
		}
		if n := "blocks.1.attn1." + proj + ".weight"; seen[n] != 1 {
			t.Errorf("%s: %d input-gradient products, want 1", n, seen[n])
		}
	}
}

// TestBackwardRecomputesDroppedBlocks drops every block's saved
// activations after ForwardTrain (what activation checkpointing will do)
// and checks that Backward, recomputing them from the blocks' inputs, gives
// the same gradients bit for bit.
func TestBackwardRecomputesDroppedBlocks(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	names := []string{"patch_embedding.weight", "blocks.0.attn1.to_q.weight", "blocks.1.ffn.net.2.weight",
		"blocks.0.scale_shift_table", "condition_embedder.time_proj.weight", "condition_embedder.text_embedder.linear_1.bias"}
	kept, dropped := r.zeros(names), r.zeros(names)
	defer func() {
		for _, n := range names {
			tensor.Free(kept[n], dropped[n])
		}
	}()
	r.step(t, kept, nil)
	r.step(t, dropped, func(tape *Tape) {
		before := tape.Bytes()
		for i := range tape.layers {
			tensor.Free(tape.layers[i].saved.tensors()...)
			tape.layers[i].saved = nil
		}
		if tape.Bytes() >= before {
			t.Errorf("tape holds %d bytes after dropping the blocks' activations, %d before", tape.Bytes(), before)
		}
	})
	for _, n := range names {
		if !slices.Equal(r.ops.Download(kept[n]), r.ops.Download(dropped[n])) {
			t.Errorf("%s: recomputed blocks give another gradient", n)
		}
	}
}

// TestBackwardRefuses checks Backward's refusals; each still frees the
// tape, so the device ends where it started.
func TestBackwardRefuses(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	q := "blocks.0.attn1.to_q.weight"
	cases := []struct {
		name    string
		grads   func() map[string]*tensor.Tensor
		dpred   func(shape []int) []int
		reuse   bool
		wantErr string
	}{
		{name: "unknown parameter", grads: func() map[string]*tensor.Tensor {
			return map[string]*tensor.Tensor{"blocks.9.attn1.to_q.weight": r.ops.Zeros(1)}
		}, wantErr: "no such parameter"},
		{name: "wrong gradient shape", grads: func() map[string]*tensor.Tensor {
			return map[string]*tensor.Tensor{q: r.ops.Zeros(3, 3)}
		}, wantErr: "want float32"},
		{name: "wrong dpred shape", dpred: func(s []int) []int { return append([]int{1}, s[1:]...) }, wantErr: "dpred"},
		{name: "tape used twice", reuse: true, wantErr: "already used"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := r.dev.Stats().Allocated
			var grads map[string]*tensor.Tensor
			if c.grads != nil {
				grads = c.grads()
			}
			pred, tape, err := r.m.ForwardTrain(r.weights, r.ops, r.xt, r.ts, r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			shape := pred.Shape()
			if c.dpred != nil {
				shape = c.dpred(shape)
			}
			d := r.ops.Zeros(shape...)
			if c.reuse {
				if err := r.m.Backward(r.weights, r.ops, tape, d, nil); err != nil {
					t.Fatal(err)
				}
			}
			err = r.m.Backward(r.weights, r.ops, tape, d, grads)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Backward error %v, want one containing %q", err, c.wantErr)
			}
			tensor.Free(pred, d)
			for _, g := range grads {
				g.Free()
			}
			if after := r.dev.Stats().Allocated; after != before {
				t.Errorf("device allocated %d bytes before, %d after", before, after)
			}
		})
	}
}

// TestTrainBlockMatchesBackward chains TrainBlock over the golden model's
// two blocks, from the gradient Backward's out stage gives the last
// block's output, and checks that both blocks' parameter gradients are
// Backward's bit for bit (the input gradient of block 1 feeds block 0).
func TestTrainBlockMatchesBackward(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	var names []string
	for _, p := range tc.cfg.Params() {
		if strings.HasPrefix(p.Name, "blocks.") {
			names = append(names, p.Name)
		}
	}
	viaBackward, viaBlocks := r.zeros(names), r.zeros(names)
	defer func() {
		for _, n := range names {
			tensor.Free(viaBackward[n], viaBlocks[n])
		}
	}()
	before := r.dev.Stats().Allocated
	pred, tape, err := r.m.ForwardTrain(r.weights, r.ops, r.xt, r.ts, r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, dpred := mseGrad(r.ops.Download(pred), r.target)
	pred.Free()
	d := r.ops.Upload(dpred, tape.pred...)
	defer d.Free()

	var dh *tensor.Tensor
	b := &bwd{m: r.m, ops: r.ops, t: tape}
	err = runBlock(r.weights, r.ops, r.m.comp.Blocks[len(r.m.comp.Blocks)-1], func() { dh = b.outBack(d, true) })
	if err != nil {
		t.Fatal(err)
	}
	latent := [3]int(r.xt.Shape()[2:])
	for i := len(r.m.layers) - 1; i >= 0; i-- {
		next, err := r.m.TrainBlock(r.weights, r.ops, i, latent, tape.layers[i].in, tape.p.mods, tape.p.text, dh, viaBlocks, nil, nil)
		dh.Free()
		if err != nil {
			t.Fatal(err)
		}
		dh = next
	}
	dh.Free()
	if err := r.m.Backward(r.weights, r.ops, tape, d, viaBackward); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		got, want := r.ops.Download(viaBlocks[n]), r.ops.Download(viaBackward[n])
		if absMax(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: TrainBlock's gradient differs from Backward's (or is zero)", n)
		}
	}
	d.Free()
	if after := r.dev.Stats().Allocated; after != before {
		t.Errorf("device allocated %d bytes before, %d after", before, after)
	}
}

// TestBackwardWithoutCrossAttnNorm checks the path the golden case does not
// take (cross_attn_norm false: attn2 reads the hidden states themselves)
// by central differences of the loss along a random direction of a few
// parameters, in float32 (a wrong gradient is off by far more than the
// 0.5% allowed).
func TestBackwardWithoutCrossAttnNorm(t *testing.T) {
	tc := loadTrainCase(t)
	tc.cfg.CrossAttnNorm = false // the golden weights without norm2
	r := newTrainRig(t, tc, nil)
	names := []string{"blocks.0.attn2.to_q.weight", "blocks.0.attn1.to_k.weight", "blocks.1.scale_shift_table",
		"condition_embedder.text_embedder.linear_1.weight", "condition_embedder.time_embedder.linear_1.weight"}
	grads := r.zeros(names)
	defer func() {
		for _, g := range grads {
			g.Free()
		}
	}()
	r.step(t, grads, nil)
	loss := func() float64 {
		pred, err := r.m.Forward(r.weights, r.ops, r.xt, r.ts, r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := mseGrad(r.ops.Download(pred), r.target)
		pred.Free()
		return l
	}
	for i, n := range names {
		w := r.weights.Tensors[n].F32()
		orig := slices.Clone(w)
		dir := modeltest.Randn(uint64(20+i), len(w))
		want := 0.0
		for j, g := range r.ops.Download(grads[n]) {
			want += float64(g) * float64(dir[j])
		}
		shift := func(s float32) {
			for j := range w {
				w[j] = orig[j] + s*dir[j]
			}
		}
		// Central differences of the float32 loss converge to within 1e-4
		// here by h = 1e-3 (curvature error above, rounding noise below).
		const h = 1e-3
		shift(h)
		up := loss()
		shift(-h)
		down := loss()
		copy(w, orig)
		got := (up - down) / (2 * h)
		if math.Abs(got-want) > 5e-3*math.Abs(want) || want == 0 {
			t.Errorf("%s: directional derivative %.6g by differences, %.6g from Backward", n, got, want)
		}
	}
}

// TestBackwardWithNothingToTrain: no gradient asked for and no adapter,
// so Backward computes nothing and only frees the tape.
func TestBackwardWithNothingToTrain(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	r.step(t, map[string]*tensor.Tensor{}, nil)
	if len(r.be.calls) != 0 {
		t.Errorf("Backward ran %d linear backward products with nothing to train", len(r.be.calls))
	}
}
