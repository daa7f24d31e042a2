package wan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/arena"
	"ferry/dtype"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// allParams is every parameter name of the golden model (full fine-tuning).
func allParams(cfg Config) []string {
	var names []string
	for _, p := range cfg.Params() {
		names = append(names, p.Name)
	}
	return names
}

// knobCase is one setting of the training memory knobs.
type knobCase struct {
	name  string
	mode  Checkpointing
	store func(r *trainRig, host *cpu.Device) ActivationStore
}

func hostStore(prefetch bool) func(*trainRig, *cpu.Device) ActivationStore {
	return func(r *trainRig, host *cpu.Device) ActivationStore {
		s := residency.NewHostActivations(r.dev, host)
		s.NoPrefetch = !prefetch
		return s
	}
}

func knobCases() []knobCase {
	var cs []knobCase
	for _, mode := range []Checkpointing{CheckpointNone, CheckpointBlock, CheckpointSelective} {
		cs = append(cs,
			knobCase{name: mode.String() + "/device", mode: mode},
			knobCase{name: mode.String() + "/host", mode: mode, store: hostStore(true)},
			knobCase{name: mode.String() + "/host-no-prefetch", mode: mode, store: hostStore(false)})
	}
	return cs
}

// TestKnobsGiveIdenticalGradients: full fine-tuning and LoRA gradients
// (fp32) are the same bits under every checkpointing mode, with the
// activations on the device or the host, and within the golden tolerance.
func TestKnobsGiveIdenticalGradients(t *testing.T) {
	tc := loadTrainCase(t)
	for _, lora := range []bool{false, true} {
		t.Run(fmt.Sprintf("lora=%v", lora), func(t *testing.T) {
			r := newTrainRig(t, tc, nil)
			names := allParams(tc.cfg)
			var loraGrads map[string]*tensor.Tensor
			if lora {
				loraGrads, names = r.setGoldenLoRA(t), nil
			}
			var want map[string][]float32
			for _, c := range knobCases() {
				host := cpu.NewDevice(0)
				r.m.Train = TrainOptions{Checkpointing: c.mode}
				if c.store != nil {
					r.m.Train.Store = c.store(r, host)
				}
				grads := r.zeros(names)
				r.step(t, grads, nil)
				got := map[string][]float32{}
				for n, g := range grads {
					got[n] = r.ops.Download(g)
				}
				for n, g := range loraGrads {
					got[n] = r.ops.Download(g)
					r.ops.B.Fill(g, 0)
				}
				for _, g := range grads {
					g.Free()
				}
				if a := host.Stats().Allocated; a != 0 {
					t.Errorf("%s: the host store still holds %d bytes after the step", c.name, a)
				}
				if want == nil {
					want = got
					checkGolden(t, r, tc, got, lora)
					continue
				}
				for n, w := range want {
					if !slices.Equal(got[n], w) {
						t.Errorf("%s: gradient of %s differs from checkpointing none on the device", c.name, n)
					}
				}
			}
			r.m.Train = TrainOptions{}
		})
	}
}

// checkGolden compares gradients with the golden case's.
func checkGolden(t *testing.T, r *trainRig, tc *trainCase, got map[string][]float32, lora bool) {
	t.Helper()
	set, prefix := tc.full, "grad."
	if lora {
		set, prefix = tc.loraSteps, "step1.grad."
	}
	for n, g := range got {
		want, _ := modeltest.TensorOf(t, set, prefix+n)
		modeltest.Compare(t, n, g, want, gradAtolRel*absMax(want), 0)
	}
}

// tapeShape is the golden case's sizes: batch, tokens, text length.
func tapeShape(r *trainRig) (b, l, lt int) {
	s := r.xt.Shape()
	ps := r.tc.cfg.PatchSize
	return s[0], s[2] / ps[0] * (s[3] / ps[1]) * (s[4] / ps[2]), r.ctx.Dim(1)
}

// TestTapeBytes checks the tape's accounting against the arithmetic of
// trainopts.go's comment: what each mode keeps per block, and that
// Tape.Bytes with block checkpointing holds the blocks' inputs and
// nothing more of theirs.
func TestTapeBytes(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	defer func() { r.m.Train = TrainOptions{} }()
	c := tc.cfg
	d, f, h := int64(c.InnerDim()), int64(c.FFNDim), int64(c.NumAttentionHeads)
	b, l, lt := tapeShape(r)
	bl := int64(b * l)
	input := 4 * bl * d
	saved := 4 * (bl*(9*d+2*h+f) + 2*int64(b*lt)*d + 6*int64(b)*d)
	kept := map[Checkpointing]int64{CheckpointNone: saved, CheckpointBlock: 0, CheckpointSelective: 4 * bl * (d + h)}
	total := map[Checkpointing]int64{}
	for _, mode := range []Checkpointing{CheckpointNone, CheckpointBlock, CheckpointSelective} {
		r.m.Train = TrainOptions{Checkpointing: mode}
		pred, tape, err := r.m.ForwardTrain(r.weights, r.ops, r.xt, r.ts, r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := tape.Stats()
		if st.Batch != b || st.Tokens != l || st.TextLen != lt || len(st.Blocks) != c.NumLayers {
			t.Errorf("%s: stats of shape %d×%d (text %d), %d blocks; want %d×%d (text %d), %d", mode,
				st.Batch, st.Tokens, st.TextLen, len(st.Blocks), b, l, lt, c.NumLayers)
		}
		for i, bt := range st.Blocks {
			want := BlockTape{Input: input, Saved: saved, Kept: kept[mode], Stored: kept[mode]}
			if bt != want {
				t.Errorf("%s: block %d tape %+v, want %+v", mode, i, bt, want)
			}
		}
		n := int64(len(st.Blocks))
		if got, want := tape.layerBytes(), n*(input+kept[mode]); got != want {
			t.Errorf("%s: blocks hold %d bytes on the tape, want %d", mode, got, want)
		}
		if st.Device != tape.Bytes() {
			t.Errorf("%s: Stats().Device %d, Bytes %d", mode, st.Device, tape.Bytes())
		}
		total[mode] = tape.Bytes()
		tape.Free()
		pred.Free()
	}
	n := int64(c.NumLayers)
	if freed := total[CheckpointNone] - total[CheckpointBlock]; freed != n*saved {
		t.Errorf("block checkpointing freed %d bytes of the tape, want the saved activations %d", freed, n*saved)
	}
}

// recordingStore is the device tier with a record of the allocator's
// bytes of what each block put.
type recordingStore struct {
	held    map[int][]*tensor.Tensor
	rounded map[int]int64
}

func (s *recordingStore) Put(block int, ts []*tensor.Tensor) error {
	var n int64
	for _, x := range ts {
		if x != nil {
			n += arena.Round(x.Bytes())
		}
	}
	s.held[block], s.rounded[block] = ts, n
	return nil
}

func (s *recordingStore) Get(block int) ([]*tensor.Tensor, error) {
	ts := s.held[block]
	delete(s.held, block)
	return ts, nil
}

func (s *recordingStore) Release(block int) {
	tensor.Free(s.held[block]...)
	delete(s.held, block)
}

// TestHostStorePeak: moving the blocks' activations to the host lowers the
// device peak of a step by exactly what the blocks not being worked on
// hold: with N blocks, all but the last one's (the backward's first) on
// demand, and all but the last two with a prefetch one block ahead.
func TestHostStorePeak(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	deepen(t, r, 4)
	names := allParams(r.m.Config())
	peak := func(s ActivationStore) int64 {
		r.m.Train = TrainOptions{Store: s}
		grads := r.zeros(names)
		defer func() {
			for _, g := range grads {
				g.Free()
			}
		}()
		r.dev.ResetPeakStats()
		r.step(t, grads, nil)
		return r.dev.Stats().PeakAllocated
	}
	rec := &recordingStore{held: map[int][]*tensor.Tensor{}, rounded: map[int]int64{}}
	onDevice := peak(rec)
	n := r.m.Config().NumLayers
	var held []int64
	for i := range n {
		held = append(held, rec.rounded[i])
	}
	for _, prefetch := range []bool{false, true} {
		host := cpu.NewDevice(0)
		s := residency.NewHostActivations(r.dev, host)
		s.NoPrefetch = !prefetch
		got := onDevice - peak(s)
		var want int64
		top := n - 1 // the backward's first block is back on the device
		if prefetch {
			top = n - 2 // and the one after it, prefetched
		}
		for i := range max(top, 0) {
			want += held[i]
		}
		if got != want {
			t.Errorf("prefetch %v: the host store lowered the device peak by %d bytes, want %d (blocks 0..%d: %v)", prefetch, got, want, top-1, held)
		}
		st := s.Stats()
		if st.ToHostBytes == 0 || st.ToHostBytes != st.FromHostBytes {
			t.Errorf("prefetch %v: %d bytes to the host, %d back", prefetch, st.ToHostBytes, st.FromHostBytes)
		}
	}
}

// deepen gives the rig's model layers blocks, the golden ones repeated.
func deepen(t *testing.T, r *trainRig, layers int) {
	t.Helper()
	cfg := r.tc.cfg
	golden := cfg.NumLayers
	cfg.NumLayers = layers
	for _, p := range cfg.Params() {
		if _, ok := r.weights.Tensors[p.Name]; ok {
			continue
		}
		i, _ := layerOf(p.Name)
		src := layerPrefix(i%golden) + strings.TrimPrefix(p.Name, layerPrefix(i))
		r.weights.Tensors[p.Name] = r.ops.Copy(r.weights.Tensors[src])
	}
	r.m = New(cfg)
	r.m.Component("transformer", nil)
	if err := r.ops.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestHostStoreBudget: a host tier too small for the activations fails the
// step with the host's out-of-memory error and a hint, and frees
// everything on both tiers.
func TestHostStoreBudget(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	defer func() { r.m.Train = TrainOptions{} }()
	host := cpu.NewDevice(4096)
	r.m.Train = TrainOptions{Store: residency.NewHostActivations(r.dev, host)}
	before := r.dev.Stats().Allocated
	pred, tape, err := r.m.ForwardTrain(r.weights, r.ops, r.xt, r.ts, r.ctx)
	if err == nil {
		pred.Free()
		tape.Free()
		t.Fatal("ForwardTrain with activations on a 4 KiB host tier succeeded")
	}
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "host tier") {
		t.Errorf("error %q: want the host tier's out of memory", err)
	}
	t.Logf("error: %v", err)
	if a := r.dev.Stats().Allocated; a != before {
		t.Errorf("device holds %d bytes after the failed step, %d before", a, before)
	}
	if a := host.Stats().Allocated; a != 0 {
		t.Errorf("host holds %d bytes after the failed step", a)
	}
}

// bf16Tolerance is how far bf16 autocast's gradients may be from the
// fp32 golden ones, relative to each reference's largest magnitude (for a
// bias, the larger of its own and its weight's: the keys' bias gradient
// nearly cancels, softmax ignoring a per-query constant, so its own
// magnitude is no scale). bf16 keeps 8 significant bits (relative
// rounding 2⁻⁹ ≈ 0.2%); the rounding of every GEMM input and saved
// activation compounds through two blocks and the backward to a few
// percent (2.3% measured with checkpointing none, 1% selective).
const bf16Tolerance = 5e-2

// TestBF16AutocastCloseToFP32: with bf16 GEMM weights and compute dtype
// (products in bf16, fp32 accumulation) and bf16 saved activations, full
// fine-tuning's gradients stay within bf16Tolerance of the fp32 golden
// ones, and the tape stores half the bytes of what it keeps (apart from
// the log-sum-exps and the modulation).
func TestBF16AutocastCloseToFP32(t *testing.T) {
	tc := loadTrainCase(t)
	r := newTrainRig(t, tc, nil)
	be := r.be.Backend.(*cpu.Backend)
	if err := be.SetComputeDType(dtype.BF16); err != nil {
		t.Fatal(err)
	}
	defer be.SetComputeDType(dtype.F32)
	mods, _ := tc.cfg.LinearShapes()
	for _, mod := range mods {
		w := r.weights.Tensors[mod+".weight"]
		r.weights.Tensors[mod+".weight"] = r.ops.Cast(w, dtype.BF16)
		w.Free()
	}
	defer func() { r.m.Train = TrainOptions{} }()
	names := allParams(tc.cfg)
	for _, mode := range []Checkpointing{CheckpointNone, CheckpointSelective} {
		r.m.Train = TrainOptions{Checkpointing: mode, DType: dtype.BF16}
		grads := r.zeros(names)
		worst := 0.0
		r.step(t, grads, func(tape *Tape) {
			for i, b := range tape.Stats().Blocks {
				if b.Stored >= b.Kept || b.Stored < b.Kept/2 {
					t.Errorf("%s: block %d stores %d bytes of %d kept: want about half", mode, i, b.Stored, b.Kept)
				}
			}
		})
		var worstName string
		for _, n := range names {
			want, _ := modeltest.TensorOf(t, tc.full, "grad."+n)
			m := absMax(want)
			if mod, ok := strings.CutSuffix(n, ".bias"); ok && slices.Contains(names, mod+".weight") {
				w, _ := modeltest.TensorOf(t, tc.full, "grad."+mod+".weight")
				m = max(m, absMax(w))
			}
			got := r.ops.Download(grads[n])
			for i := range got {
				if e := math.Abs(float64(got[i]-want[i])) / m; e > worst {
					worst, worstName = e, n
				}
			}
			grads[n].Free()
		}
		if worst > bf16Tolerance {
			t.Errorf("%s: bf16 gradients differ from fp32 by %.3g × absmax, tolerance %g", mode, worst, bf16Tolerance)
		}
		t.Logf("%s: bf16 worst gradient error %.3g × absmax (%s)", mode, worst, worstName)
	}
}

// TestAttentionWeightBytes: the [L, L] probabilities ferry's attention
// never materialises, at the 1.3B shape and a tiny one.
func TestAttentionWeightBytes(t *testing.T) {
	big := defaults()
	big.NumAttentionHeads, big.NumLayers = 12, 30
	for _, c := range []struct {
		cfg             Config
		batch, l, text  int
		self, cross     int64
		tape, backwards int64
	}{
		// 12 heads · 1280² · 4 bytes = 78 643 200; 12 · 1280 · 512 · 4 = 31 457 280.
		{big, 1, 1280, 512, 78643200, 31457280, 30 * (78643200 + 31457280), 2 * (78643200 + 31457280)},
		{big, 2, 1280, 512, 2 * 78643200, 2 * 31457280, 60 * (78643200 + 31457280), 4 * (78643200 + 31457280)},
		{tinyConfig(), 1, 3, 5, 2 * 9 * 4, 2 * 15 * 4, 2 * (72 + 120), 2 * (72 + 120)},
	} {
		got := c.cfg.AttentionWeightBytes(c.batch, c.l, c.text)
		want := AttentionWeights{Self: c.self, Cross: c.cross, Tape: c.tape, Backward: c.backwards}
		if got != want {
			t.Errorf("B %d, L %d, Lt %d: %+v, want %+v", c.batch, c.l, c.text, got, want)
		}
	}
}

// FuzzParseCheckpointing: a mode parses back to itself, anything else is
// an error naming the modes.
func FuzzParseCheckpointing(f *testing.F) {
	for _, s := range []string{"none", "block", "selective", "", "Block", "all"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseCheckpointing(s)
		if err != nil {
			if !strings.Contains(err.Error(), "none, block, selective") {
				t.Errorf("%q: error %q does not name the modes", s, err)
			}
			return
		}
		if m.String() != s {
			t.Errorf("%q parsed as %v", s, m)
		}
	})
}
