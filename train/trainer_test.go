package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// concat joins two fixed batches of equal shapes into one of both samples.
func concat(a, b *Batch) *Batch {
	c := &Batch{LatentShape: append([]int{a.Samples() + b.Samples()}, a.LatentShape[1:]...),
		ContextShape: append([]int{a.Samples() + b.Samples()}, a.ContextShape[1:]...)}
	c.Latents = append(append([]float32(nil), a.Latents...), b.Latents...)
	c.Context = append(append([]float32(nil), a.Context...), b.Context...)
	c.Noise = append(append([]float32(nil), a.Noise...), b.Noise...)
	c.Sigmas = append(append([]float32(nil), a.Sigmas...), b.Sigmas...)
	return c
}

// firstStep trains one step and returns its figures and gradients.
func firstStep(t *testing.T, cfg Config, data Data) (StepStat, [][]float32) {
	t.Helper()
	tr, err := New(cfg, newToyNet(3, 1), data, NewRNG(5))
	if err != nil {
		t.Fatal(err)
	}
	var grads [][]float32
	tr.OnFirstGrads = func(_ []*Param, g [][]float32) error { grads = copyGrads(g); return nil }
	s, err := tr.Train()
	if err != nil {
		t.Fatal(err)
	}
	return s, grads
}

// TestGradAccumulation: two micro-batches of one sample each, averaged,
// give the loss and gradients of one batch holding both samples (the mean
// over every element either way, as both micro-batches are equal in size).
func TestGradAccumulation(t *testing.T) {
	a, b := toyBatch(1, 3, 4, 10, true), toyBatch(1, 3, 4, 11, true)
	cfg := Config{Steps: 1, Adam: DefaultAdam(1e-2)}
	whole, gw := firstStep(t, cfg, FixedData{B: concat(a, b)})
	cfg.GradAccum = 2
	acc, ga := firstStep(t, cfg, &cycleData{batches: []*Batch{a, b}})
	if math.Abs(float64(whole.Loss-acc.Loss)) > 1e-6*float64(whole.Loss) {
		t.Errorf("accumulated loss %g, one batch %g", acc.Loss, whole.Loss)
	}
	for i := range gw {
		for j := range gw[i] {
			if math.Abs(float64(gw[i][j]-ga[i][j])) > 1e-6 {
				t.Fatalf("grad %d[%d]: accumulated %g, one batch %g", i, j, ga[i][j], gw[i][j])
			}
		}
	}
	// The gradient of the mean is half the sum: one micro-batch alone
	// is not what was applied.
	one, g1 := firstStep(t, Config{Steps: 1, Adam: DefaultAdam(1e-2)}, FixedData{B: a})
	if one.Loss == acc.Loss || g1[1][0] == ga[1][0] {
		t.Error("accumulation did not change the step")
	}
}

// TestClippingApplied: with a tiny max norm the update follows the
// clipped gradient (Adam is scale-invariant, so compare the EMA-free
// gradient norm reported and the bias gradient seen by the optimizer).
func TestClippingApplied(t *testing.T) {
	b := toyBatch(2, 3, 4, 3, true)
	s, _ := firstStep(t, Config{Steps: 1, Adam: DefaultAdam(1e-2), MaxGradNorm: 1e-3}, FixedData{B: b})
	if s.GradNorm <= 1e-3 {
		t.Fatalf("norm %g: the test needs a gradient above the clip", s.GradNorm)
	}
	tr, err := New(Config{Steps: 1, Adam: DefaultAdam(1e-2), MaxGradNorm: 1e-3}, newToyNet(3, 1), FixedData{B: b}, NewRNG(5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Train(); err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, v := range tr.opt.M {
		for _, x := range v {
			n += float64(x) * float64(x)
		}
	}
	// m after one step is (1−β1)·g: its norm is 0.1 × the clipped norm.
	if got := math.Sqrt(n); math.Abs(got-1e-4) > 1e-7 {
		t.Errorf("first moment norm %g, want 0.1 × 1e-3", got)
	}
}

// TestToyLearns: the loop drives the loss of a batch the toy can fit
// exactly (one position, more parameters than values) towards zero.
func TestToyLearns(t *testing.T) {
	tr, err := New(Config{Steps: 300, Adam: DefaultAdam(3e-2)}, newToyNet(3, 1), FixedData{B: toyBatch(1, 3, 1, 4, true)}, NewRNG(5))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	first, last := tr.History[0].Loss, tr.History[len(tr.History)-1].Loss
	if !(last < first/10) {
		t.Errorf("loss %g → %g: did not fall", first, last)
	}
}

// resumeSetup is a run whose σ, noise and data order all come from the
// RNG and the data position, with every piece of state in use.
func resumeSetup(t *testing.T, dir string, steps int) *Trainer {
	t.Helper()
	data := &cycleData{batches: []*Batch{toyBatch(2, 3, 4, 20, false), toyBatch(2, 3, 4, 21, false), toyBatch(2, 3, 4, 22, false),
		toyBatch(2, 3, 4, 23, false)}}
	cfg := Config{Steps: steps, GradAccum: 2, Adam: DefaultAdam(1e-2), MaxGradNorm: 0.5, EMADecay: 0.8,
		SaveEvery: 2, CheckpointDir: dir, Timesteps: Timesteps{Sampling: Shift, FlowShift: 3}}
	tr, err := New(cfg, newToyNet(3, 1), data, NewRNG(9))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestResumeBitIdentical: a run cancelled after step 3 saves a checkpoint
// and exits with Interrupted; resuming from it ends with exactly the
// weights, EMA and losses of a run that was never interrupted.
func TestResumeBitIdentical(t *testing.T) {
	const steps = 7
	straight := resumeSetup(t, t.TempDir(), steps)
	if err := straight.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	first := resumeSetup(t, dir, steps)
	ctx, cancel := context.WithCancel(context.Background())
	first.OnStep = func(s StepStat) {
		if s.Step == 3 {
			cancel()
		}
	}
	err := first.Run(ctx)
	var in *Interrupted
	if !errors.As(err, &in) || !errors.Is(err, context.Canceled) || in.Step != 3 {
		t.Fatalf("Run = %v, want Interrupted after step 3", err)
	}
	if got := checkpoints(dir); len(got) != 2 || filepath.Base(got[1]) != CheckpointName(3) {
		t.Fatalf("checkpoints %v, want step 2 and step 3", got)
	}
	found, err := FindCheckpoint(dir)
	if err != nil || found != in.Dir {
		t.Fatalf("FindCheckpoint = %s, %v; want %s", found, err, in.Dir)
	}

	resumed := resumeSetup(t, dir, steps)
	if err := resumed.Restore(found); err != nil {
		t.Fatal(err)
	}
	if resumed.Step() != 3 {
		t.Fatalf("resumed at step %d", resumed.Step())
	}
	if err := resumed.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, p := range straight.net.Params() {
		q := resumed.net.Params()[i]
		for j := range p.Data {
			if math.Float32bits(p.Data[j]) != math.Float32bits(q.Data[j]) {
				t.Fatalf("%s[%d]: resumed %g, straight %g", p.Name, j, q.Data[j], p.Data[j])
			}
			if straight.ema.W[i][j] != resumed.ema.W[i][j] {
				t.Fatalf("EMA %s[%d] differs", p.Name, j)
			}
		}
	}
	if len(resumed.History) != steps {
		t.Fatalf("history of %d steps", len(resumed.History))
	}
	for i := range straight.History {
		if straight.History[i].Loss != resumed.History[i].Loss {
			t.Errorf("step %d loss: resumed %g, straight %g", i+1, resumed.History[i].Loss, straight.History[i].Loss)
		}
	}
}

// TestRestoreRefusesOtherSetup: a checkpoint of another parameter set is
// refused with a message naming the difference.
func TestRestoreRefusesOtherSetup(t *testing.T) {
	dir := t.TempDir()
	tr := resumeSetup(t, dir, 1)
	saved, err := tr.Save(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{Steps: 1, Adam: DefaultAdam(1e-2), EMADecay: 0.8}, newToyNet(4, 1), FixedData{B: toyBatch(1, 4, 2, 1, true)}, NewRNG(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Restore(saved); err == nil {
		t.Error("checkpoint of a 3-channel net restored into a 4-channel one")
	}
	// A save leaves no temporary folder behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != CheckpointName(0) {
			t.Errorf("unexpected %s in the checkpoint folder", e.Name())
		}
	}
}

// TestSaveEvery: checkpoints every SaveEvery steps and after the last,
// the newest two kept; an interrupt right after a periodic save reuses it.
func TestSaveEvery(t *testing.T) {
	dir := t.TempDir()
	tr := resumeSetup(t, dir, 5)
	var saves []string
	tr.OnSave = func(d string) { saves = append(saves, filepath.Base(d)) }
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{CheckpointName(2), CheckpointName(4), CheckpointName(5)}
	if len(saves) != 3 || saves[0] != want[0] || saves[1] != want[1] || saves[2] != want[2] {
		t.Errorf("saved %v, want %v", saves, want)
	}
	if got := checkpoints(dir); len(got) != 2 || filepath.Base(got[0]) != want[1] {
		t.Errorf("kept %v, want the last two", got)
	}

	dir = t.TempDir()
	tr = resumeSetup(t, dir, 5)
	saves = nil
	tr.OnSave = func(d string) { saves = append(saves, filepath.Base(d)) }
	ctx, cancel := context.WithCancel(context.Background())
	tr.OnStep = func(s StepStat) {
		if s.Step == 4 {
			cancel()
		}
	}
	var in *Interrupted
	if err := tr.Run(ctx); !errors.As(err, &in) || filepath.Base(in.Dir) != CheckpointName(4) {
		t.Fatalf("Run = %v, want Interrupted with step 4's checkpoint", err)
	}
	if len(saves) != 2 {
		t.Errorf("saved %v: the interrupt saved step 4 again", saves)
	}
}
