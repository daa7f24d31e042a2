package synthetic

import (
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	model "ferry/model/synthetic"
	"ferry/pipeline"
	"ferry/residency"
	"ferry/synth"
	"ferry/tensor"
)

// testConfig is a 24-block model small enough to run many times.
func testConfig() model.Config {
	c := model.Default()
	c.Dim, c.Heads, c.TextDim, c.TextHeads, c.DecoderWidth = 128, 4, 64, 4, 32
	return c
}

var (
	folderOnce sync.Once
	folderDir  string
	folderErr  error
)

// testFolder writes the test model once per test binary.
func testFolder(t testing.TB) string {
	t.Helper()
	folderOnce.Do(func() {
		dir, err := osMkdirTemp()
		if err != nil {
			folderErr = err
			return
		}
		folderDir = filepath.Join(dir, "model")
		folderErr = synth.Write(folderDir, synth.Synthetic(testConfig()), synth.Options{Seed: 7, DType: dtype.BF16})
	})
	if folderErr != nil {
		t.Fatal(folderErr)
	}
	return folderDir
}

var request = Request{Prompt: "a red boat", Height: 16, Width: 16, Steps: 2, Seed: 3}

// result is one run's output and measurements.
type result struct {
	img      []float32
	measured pipeline.Measured
	device   tensor.MemStats
	err      error
}

// generate runs the request under a budget and plan, closes everything and
// checks nothing leaked.
func generate(t testing.TB, budget pipeline.Budget, plan *residency.Plan) result {
	t.Helper()
	f, err := checkpoint.OpenFolder(testFolder(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rt, err := pipeline.NewRuntime(budget, plan, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var res result
	p, err := Load(f, rt.Exec)
	if err == nil {
		res.img, err = p.Generate(rt, request)
	}
	res.err = err
	res.measured = rt.Measure()
	res.device = rt.Device.Stats()
	rt.Close()
	if err := rt.CheckReleased(); err != nil {
		t.Error(err)
	}
	return res
}

func components() []string { return []string{model.TextEncoder, model.Denoiser, model.Decoder} }

func uniform(name string, c residency.ComponentPlan) *residency.Plan {
	return residency.Uniform(name, c, components()...)
}

// blockBytes is one denoiser block on the device (float32).
func blockBytes() int64 {
	var n int64
	for _, p := range testConfig().Params(model.Denoiser) {
		if p.Block == "blocks.0" {
			n += int64(tensor.NumElems(p.Shape)) * 4
		}
	}
	return n
}

func componentBytes(name string) int64 {
	var n int64
	for _, p := range testConfig().Params(name) {
		if !p.Rows {
			n += int64(tensor.NumElems(p.Shape)) * 4
		}
	}
	return n
}

// TestPlansBitIdenticalUnderBudget is the foundation's proof: under tight
// budgets every placement gives exactly the all-resident output and never
// exceeds its budget.
func TestPlansBitIdenticalUnderBudget(t *testing.T) {
	ref := generate(t, pipeline.Budget{}, uniform("resident", residency.ComponentPlan{Placement: residency.Resident}))
	if ref.err != nil {
		t.Fatal(ref.err)
	}
	var weights int64
	for _, c := range components() {
		weights += componentBytes(c)
	}
	// Activations: what the resident run reserved beyond its weights
	// (the allocator's rounding and caching of activation buffers included).
	act := ref.device.PeakReserved - weights
	if act <= 0 {
		t.Fatalf("resident peak %d does not exceed the weights %d", ref.measured.PeakDeviceBytes, weights)
	}
	block := blockBytes()
	streamBudget := int64(2.2*float64(block)) + act
	onloadBudget := componentBytes(model.Denoiser) + act
	for _, tc := range []struct {
		name   string
		plan   residency.ComponentPlan
		budget int64
	}{
		{"stream k=1", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, streamBudget},
		{"stream k=0", residency.ComponentPlan{Placement: residency.Stream}, streamBudget},
		{"stream k=1 disk tier", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk}, streamBudget},
		{"stream k=1 n=1", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Persistent: 1}, streamBudget + block},
		{"onload", residency.ComponentPlan{Placement: residency.Onload}, onloadBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := generate(t, pipeline.Budget{DeviceBytes: tc.budget}, uniform(tc.name, tc.plan))
			if got.err != nil {
				t.Fatalf("budget %s: %v", tensor.FormatBytes(tc.budget), got.err)
			}
			if got.device.PeakReserved > tc.budget || got.measured.PeakDeviceBytes > tc.budget {
				t.Errorf("peak reserved %d, allocated %d over budget %d", got.device.PeakReserved, got.measured.PeakDeviceBytes, tc.budget)
			}
			if len(got.img) != len(ref.img) {
				t.Fatalf("%d values, want %d", len(got.img), len(ref.img))
			}
			for i := range ref.img {
				if math.Float32bits(got.img[i]) != math.Float32bits(ref.img[i]) {
					t.Fatalf("value %d: %v, resident %v (not bit-identical)", i, got.img[i], ref.img[i])
				}
			}
			if tc.plan.Placement == residency.Stream && got.measured.BytesCopied <= componentBytes(model.Denoiser) {
				t.Errorf("streamed only %d bytes: the blocks were not moved per step", got.measured.BytesCopied)
			}
		})
	}
}

// TestBudgetBelowLargestBlock fails before any compute with one line naming
// the block, its size and the budget.
func TestBudgetBelowLargestBlock(t *testing.T) {
	budget := blockBytes() / 2
	got := generate(t, pipeline.Budget{DeviceBytes: budget}, uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}))
	if got.err == nil {
		t.Fatal("ran under a budget smaller than a block")
	}
	msg := got.err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	for _, want := range []string{"transformer.blocks.", tensor.FormatBytes(blockBytes()), tensor.FormatBytes(budget)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if got.measured.TextEncoderS > 0 && got.measured.DenoiseS > 0 && len(got.measured.StepS) > 0 {
		t.Errorf("compute ran (%d steps) before the budget check failed", len(got.measured.StepS))
	}
}

// TestRepeatedRunsKeepRSSFlat: 20 runs in one process neither leak device
// memory (checked in generate) nor grow the peak RSS.
func TestRepeatedRunsKeepRSSFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("20 runs; skipped with -short")
	}
	plan := uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1})
	var early, last int64
	for i := range 20 {
		r := generate(t, pipeline.Budget{}, plan)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if i == 2 {
			early = r.measured.PeakRSSBytes
		}
		last = r.measured.PeakRSSBytes
	}
	if early == 0 {
		t.Skip("peak RSS is not measurable on this OS")
	}
	if slack := early/20 + 8<<20; last > early+slack {
		t.Errorf("peak RSS grew from %s (run 3) to %s (run 20)", tensor.FormatBytes(early), tensor.FormatBytes(last))
	}
}
