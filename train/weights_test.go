package train

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/catalog"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/synth"
	"ferry/tensor"
)

// tinyTransformer writes wan-tiny's transformer (as `ferry synth --arch
// wan-tiny` does, bf16) into a temporary folder.
func tinyTransformer(t testing.TB) (wan.Config, *checkpoint.Set) {
	return synthTransformer(t, catalog.WanTiny())
}

// synthTransformer writes w's transformer alone into a temporary folder.
func synthTransformer(t testing.TB, w catalog.Wan) (wan.Config, *checkpoint.Set) {
	t.Helper()
	arch, err := synth.Wan(w)
	if err != nil {
		t.Fatal(err)
	}
	var keep []synth.Component
	for _, c := range arch.Components {
		if c.Name == "transformer" {
			keep = append(keep, c)
		}
	}
	arch.Components = keep
	dir := filepath.Join(t.TempDir(), "wan-tiny")
	if err := synth.Write(dir, arch, synth.Options{Seed: 1, DType: dtype.BF16}); err != nil {
		t.Fatal(err)
	}
	set, err := checkpoint.OpenSet(filepath.Join(dir, "transformer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return w.Transformer, set
}

// tinyBatch is a fixed batch of one sample: 2x8x8 latents (32 tokens)
// and 8 text tokens.
func tinyBatch(cfg wan.Config) *Batch {
	rng := NewRNG(7)
	shape := []int{1, cfg.InChannels, 2, 8, 8}
	n := tensor.NumElems(shape)
	return &Batch{Latents: rng.Normals(n), LatentShape: shape, Noise: rng.Normals(n), Sigmas: []float32{0.6},
		Context: rng.Normals(8 * cfg.TextDim), ContextShape: []int{1, 8, cfg.TextDim}}
}

// budgets cap the device and host (0: unlimited).
type budgets struct{ device, host int64 }

// trained is what a run left: the parameters' values and the peaks.
type trained struct {
	values            [][]float32
	devPeak, hostPeak int64 // peak reserved bytes
	stats             residency.Stats
}

// trainTiny trains wan-tiny for steps on the fixed batch under plan (nil:
// the fixed float32 weights of residency.Fixed) and returns the values.
func trainTiny(t *testing.T, cfg wan.Config, set *checkpoint.Set, plan *residency.Plan, opt WanOptions, c Config, b budgets) (trained, error) {
	t.Helper()
	dev, host := cpu.NewDevice(b.device), cpu.NewDevice(b.host)
	be, hostBe := cpu.New(dev, gemm.Best()), cpu.New(host, gemm.Best())
	ops := tensor.NewOps(be)
	if plan != nil {
		if opt.Full {
			plan = MasterPlan(plan)
		}
		ex, err := residency.New(residency.Config{Backend: be, HostBackend: hostBe, Plan: plan, Dense: true})
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close()
		opt.Residency = &Residency{Exec: ex, Host: host}
	}
	net, err := NewWanNet(ops, cfg, set, opt, NewRNG(3))
	if err != nil {
		return trained{}, err
	}
	defer net.Close()
	tr, err := New(c, net, FixedData{B: tinyBatch(cfg)}, NewRNG(5))
	if err != nil {
		t.Fatal(err)
	}
	for range c.Steps {
		if _, err := tr.Train(); err != nil {
			return trained{}, err
		}
	}
	// The budgets cap what the devices reserve (allocated plus cached
	// free), so reserved is the peak to hold against them.
	out := trained{values: copyData(net.Params()), devPeak: dev.Stats().PeakReserved, hostPeak: host.Stats().PeakReserved}
	if opt.Residency != nil {
		out.stats = opt.Residency.Exec.Stats()
		if out.stats.Loads == 0 {
			t.Errorf("plan %s: the executor loaded nothing", plan.Name)
		}
	}
	return out, nil
}

// plans are the placements a result must not depend on.
func plans() []*residency.Plan {
	place := func(name string, c residency.ComponentPlan) *residency.Plan {
		return residency.Uniform(name, c, ComponentName)
	}
	return []*residency.Plan{
		place("resident", residency.ComponentPlan{Placement: residency.Resident}),
		place("stream-k1-host", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}),
		place("stream-k0-host", residency.ComponentPlan{Placement: residency.Stream}),
		place("stream-k2-n1-disk", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 2, Persistent: 1, Tier: residency.TierDisk}),
		place("onload", residency.ComponentPlan{Placement: residency.Onload}),
	}
}

func sameValues(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
	}
	for i := range got {
		for j := range got[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("%s: parameter %d value %d is %g, want %g (bit-identical)", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestLoRAPlansAgree: the LoRA weights after 5 steps are bit-identical
// whatever the frozen weights' plan (fp32).
func TestLoRAPlansAgree(t *testing.T) {
	cfg, set := tinyTransformer(t)
	opt := WanOptions{LoRA: LoRAOptions{Rank: 4, Alpha: 4}}
	c := Config{Steps: 5, Adam: DefaultAdam(1e-3)}
	var ref trained
	for i, p := range plans() {
		got, err := trainTiny(t, cfg, set, p, opt, c, budgets{})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if i == 0 {
			ref = got
			if moved(ref.values, t, cfg, set, opt) {
				continue
			}
			t.Fatal("the LoRA did not train: B is still zero")
		}
		sameValues(t, p.Name, got.values, ref.values)
	}
}

// moved reports whether some LoRA B matrix left zero.
func moved(values [][]float32, t *testing.T, _ wan.Config, _ *checkpoint.Set, _ WanOptions) bool {
	for i := 1; i < len(values); i += 2 {
		for _, v := range values[i] {
			if v != 0 {
				return true
			}
		}
	}
	return false
}

// TestFullPlansMatchFixed: full fine-tuning with host-tier master
// weights (ZeRO-Offload) gives, after 3 steps, the weights of the fixed
// float32 path bit for bit, under every plan, with and without clipping
// (which makes the updates wait for the last block).
func TestFullPlansMatchFixed(t *testing.T) {
	cfg, set := tinyTransformer(t)
	opt := WanOptions{Full: true}
	for _, clip := range []float64{0, 0.05} {
		c := Config{Steps: 3, Adam: DefaultAdam(1e-3), MaxGradNorm: clip}
		ref, err := trainTiny(t, cfg, set, nil, opt, c, budgets{})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range plans() {
			got, err := trainTiny(t, cfg, set, p, opt, c, budgets{})
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			sameValues(t, fmt.Sprintf("%s clip %g", p.Name, clip), got.values, ref.values)
			if i == 0 && got.devPeak > ref.devPeak-gradsBeyondOneBlock(cfg) {
				t.Errorf("resident: device peak %d, the fixed path's %d: the gradients of all blocks but one should have stayed off the device",
					got.devPeak, ref.devPeak)
			}
		}
	}
}

// TestFullGradAccumOnHost: with micro-batches accumulated on the host the
// result is the fixed path's to float32 rounding (the sums are the same,
// their order differs).
func TestFullGradAccumOnHost(t *testing.T) {
	cfg, set := tinyTransformer(t)
	opt := WanOptions{Full: true}
	c := Config{Steps: 2, GradAccum: 2, Adam: DefaultAdam(1e-3)}
	ref, err := trainTiny(t, cfg, set, nil, opt, c, budgets{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := trainTiny(t, cfg, set, plans()[1], opt, c, budgets{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got.values {
		for j, v := range got.values[i] {
			if d := math.Abs(float64(v - ref.values[i][j])); d > 1e-6 {
				t.Fatalf("parameter %d value %d: %g, fixed path %g", i, j, v, ref.values[i][j])
			}
		}
	}
}

// TestBudgetsAreCaps trains under budgets just large enough for a
// streamed run (smaller than the resident run needs): the peaks stay under
// them, and the figures split by phase.
func TestBudgetsAreCaps(t *testing.T) {
	cfg, set := tinyTransformer(t)
	ps := plans()
	resident, stream := ps[0], ps[1]
	cases := []struct {
		name string
		opt  WanOptions
	}{
		{"lora", WanOptions{LoRA: LoRAOptions{Rank: 4, Alpha: 4}}},
		{"full", WanOptions{Full: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Steps: 2, Adam: DefaultAdam(1e-3)}
			res, err := trainTiny(t, cfg, set, resident, tc.opt, c, budgets{})
			if err != nil {
				t.Fatal(err)
			}
			free, err := trainTiny(t, cfg, set, stream, tc.opt, c, budgets{})
			if err != nil {
				t.Fatal(err)
			}
			if free.devPeak >= res.devPeak {
				t.Fatalf("streamed device peak %d is not below the resident %d", free.devPeak, res.devPeak)
			}
			b := budgets{device: free.devPeak, host: free.hostPeak}
			capped, err := trainTiny(t, cfg, set, stream, tc.opt, c, b)
			if err != nil {
				t.Fatalf("under device %d, host %d: %v", b.device, b.host, err)
			}
			if capped.devPeak > b.device || capped.hostPeak > b.host {
				t.Errorf("peaks device %d, host %d exceed the budgets %d, %d", capped.devPeak, capped.hostPeak, b.device, b.host)
			}
			sameValues(t, "capped", capped.values, free.values)
			if _, err := trainTiny(t, cfg, set, resident, tc.opt, c, b); !errors.Is(err, tensor.ErrOutOfMemory) {
				t.Errorf("resident under the streamed run's budget: %v, want out of memory", err)
			}
			f, bw := capped.stats.Phases[PhaseForward], capped.stats.Phases[PhaseBackward]
			if f.Loads == 0 || bw.Loads == 0 || f.Loads+bw.Loads != capped.stats.Loads {
				t.Errorf("loads by phase %d + %d, total %d", f.Loads, bw.Loads, capped.stats.Loads)
			}
		})
	}
}

// TestBlockLargerThanBudget: a device budget smaller than one block is
// refused before training, in one line naming the block.
func TestBlockLargerThanBudget(t *testing.T) {
	cfg, set := tinyTransformer(t)
	for _, full := range []bool{false, true} {
		opt := WanOptions{Full: full, LoRA: LoRAOptions{Rank: 4, Alpha: 4}}
		_, err := trainTiny(t, cfg, set, plans()[1], opt, Config{Steps: 1, Adam: DefaultAdam(1e-3)}, budgets{device: 64 << 10})
		var be *residency.BudgetError
		if !errors.As(err, &be) {
			t.Fatalf("full=%v: got %v, want a BudgetError", full, err)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "transformer.") {
			t.Errorf("full=%v: %q is not one line naming the block", full, msg)
		}
	}
}

// TestFullHostBudget: the master weights, moments and gradients are in
// the host tier, so a host budget smaller than them fails at setup.
func TestFullHostBudget(t *testing.T) {
	cfg, set := tinyTransformer(t)
	var n int64
	for _, p := range cfg.Params() {
		n += int64(tensor.NumElems(p.Shape))
	}
	_, err := trainTiny(t, cfg, set, plans()[1], WanOptions{Full: true}, Config{Steps: 1, Adam: DefaultAdam(1e-3)}, budgets{host: 4 * n * 3})
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "host tier") {
		t.Fatalf("host budget for 3 of the 4 float32 copies: got %v, want a host tier out of memory", err)
	}
}

// TestFullNeedsMasterPlan: a plan that would keep a second, stale host
// copy of the weights is refused; MasterPlan reads the masters instead.
func TestFullNeedsMasterPlan(t *testing.T) {
	cfg, set := tinyTransformer(t)
	stream := plans()[1]
	if MasterPlan(stream).For(ComponentName).Tier != residency.TierDisk || stream.For(ComponentName).Tier != residency.TierHost {
		t.Fatalf("MasterPlan: %+v from %+v (the input must not change)", MasterPlan(stream).For(ComponentName), stream.For(ComponentName))
	}
	dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
	be := cpu.New(dev, gemm.Best())
	ex, err := residency.New(residency.Config{Backend: be, HostBackend: cpu.New(host, gemm.Best()), Plan: stream, Dense: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	_, err = NewWanNet(tensor.NewOps(be), cfg, set, WanOptions{Full: true, Residency: &Residency{Exec: ex, Host: host}}, NewRNG(0))
	if err == nil || !strings.Contains(err.Error(), "MasterPlan") {
		t.Fatalf("full fine-tuning under a host-copy plan: %v", err)
	}
	if a := host.Stats().Allocated; a != 0 {
		t.Errorf("the refused net left %d host bytes", a)
	}
}

// gradsBeyondOneBlock is the float32 gradient bytes of every parameter
// less those of the largest block.
func gradsBeyondOneBlock(cfg wan.Config) int64 {
	blocks := map[string]int64{}
	var all, largest int64
	for _, p := range cfg.Params() {
		n := 4 * int64(tensor.NumElems(p.Shape))
		blocks[p.Block] += n
		all += n
	}
	for _, b := range blocks {
		largest = max(largest, b)
	}
	return all - largest
}
