package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/residency"
)

func mustBuiltin(t *testing.T, name string) *Profile {
	t.Helper()
	p, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// requestFor is a request each built-in profile is tested at: the tiny
// model at a tiny shape, the real ones at Wan's 480p (fewer frames keeps
// the test short; the planner's cost does not depend on the shape).
func requestFor(name string) Request {
	if name == "wan-tiny" {
		return Request{Frames: 9, Height: 64, Width: 96, TextLen: 16, Steps: 3, Guidance: 5}
	}
	r := DefaultRequest()
	r.Frames = 33
	return r
}

func TestBuiltinSizes(t *testing.T) {
	tests := []struct {
		model, comp string
		lo, hi      float64 // parameter count bounds
	}{
		{"wan2.1-t2v-1.3b", Transformer, 1.3e9, 1.5e9},
		{"wan2.1-t2v-14b", Transformer, 13.5e9, 15e9},
		{"wan2.1-t2v-1.3b", TextEncoder, 4.5e9, 4.8e9}, // 24 layers; the 1.05B-row table is read by row
		{"wan2.1-t2v-1.3b", VAE, 6e7, 8e7},
	}
	for _, tc := range tests {
		p := mustBuiltin(t, tc.model)
		var n int64
		for _, b := range p.Component(tc.comp).Blocks {
			n += b.Params()
		}
		if float64(n) < tc.lo || float64(n) > tc.hi {
			t.Errorf("%s %s: %d parameters, want within [%g, %g]", tc.model, tc.comp, n, tc.lo, tc.hi)
		}
	}
	if _, err := Builtin("wan3-imaginary"); err == nil || !strings.Contains(err.Error(), "wan-tiny") {
		t.Errorf("unknown model: err %v, want one listing the built-ins", err)
	}
}

func TestProfileFromFolder(t *testing.T) {
	p, err := ProfileFromFolder("testdata/wan_pipeline")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Components {
		if c.Storage != dtype.F32 {
			t.Errorf("%s: storage %v, want F32 (torch_dtype)", c.Name, c.Storage)
		}
	}
	// The transformer's blocks must hold exactly the checkpoint's tensors.
	f, err := checkpoint.Open("testdata/wan_pipeline/transformer/diffusion_pytorch_model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want int64
	for _, info := range f.Tensors() {
		want += info.Elements()
	}
	var got int64
	for _, b := range p.Component(Transformer).Blocks {
		got += b.Params()
	}
	if got != want || len(p.Component(Transformer).Blocks) != p.Wan.NumLayers+2 {
		t.Errorf("transformer: %d parameters in %d blocks, checkpoint has %d", got, len(p.Component(Transformer).Blocks), want)
	}
	// Just read, the files are in the page cache, and the profile says so.
	if _, err := os.ReadFile("testdata/wan_pipeline/transformer/diffusion_pytorch_model.safetensors"); err != nil {
		t.Fatal(err)
	}
	if p, err = ProfileFromFolder("testdata/wan_pipeline"); err != nil {
		t.Fatal(err)
	}
	if c := p.Component(Transformer).Cached; c < 0.99 && runtime.GOOS == "linux" {
		t.Errorf("transformer just read: %.2f of it in the page cache, want all", c)
	}
	if _, err := ProfileFromFolder(t.TempDir()); err == nil {
		t.Error("an empty folder gave a profile")
	}
}

func TestPresetsValidate(t *testing.T) {
	p := mustBuiltin(t, "wan-tiny")
	opts := PresetOptions{Profile: p, HW: hwprofile.Default(), Request: requestFor("wan-tiny"), Budgets: Budgets{DeviceBytes: 64 << 20}}
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			plan, err := Preset(name, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := plan.Validate(); err != nil {
				t.Fatal(err)
			}
			if PresetHelp(name) == "" {
				t.Error("no help text")
			}
			pred, err := Predict(p, opts.HW, plan, opts.Request, opts.Budgets)
			if err != nil {
				t.Fatal(err)
			}
			if !(pred.TotalS > 0) || pred.PeakDeviceBytes <= 0 {
				t.Errorf("prediction %+v has no time or peak", pred)
			}
		})
	}
	if _, err := Preset("level9", opts); err == nil || !strings.Contains(err.Error(), "level3") {
		t.Errorf("unknown preset: err %v, want one listing the presets", err)
	}
}

func TestLevels(t *testing.T) {
	for n, want := range []struct {
		tile      bool
		text, dit residency.Placement
	}{
		{false, residency.Resident, residency.Resident},
		{true, residency.Resident, residency.Resident},
		{true, residency.Host, residency.Resident},
		{true, residency.Host, residency.Stream},
	} {
		p := level(n)
		if (p.Run.VAETile > 0) != want.tile || p.For(TextEncoder).Placement != want.text || p.For(Transformer).Placement != want.dit {
			t.Errorf("level%d = %+v, want tile %v, text %s, transformer %s", n, p, want.tile, want.text, want.dit)
		}
	}
}

func TestFlagPlan(t *testing.T) {
	tests := []struct {
		flags   []string
		comp    string
		want    residency.ComponentPlan
		wantErr string
	}{
		{[]string{"--dit-layerwise-offload"}, Transformer, residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}, ""},
		{[]string{"--dit-cpu-offload"}, Transformer, residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost}, ""},
		{[]string{"--dit-cpu-offload", "--dit-layerwise-offload"}, Transformer, residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}, ""},
		{[]string{"text-encoder-cpu-offload"}, TextEncoder, residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost}, ""},
		{[]string{"--vae-cpu-offload=true"}, VAE, residency.ComponentPlan{Placement: residency.Onload, Tier: residency.TierHost}, ""},
		{[]string{"--vae-cpu-offload=false"}, VAE, residency.ComponentPlan{Placement: residency.Resident, Tier: residency.TierHost}, ""},
		{[]string{"--pin-cpu-memory", "--image-encoder-cpu-offload"}, Transformer, residency.ComponentPlan{Placement: residency.Resident, Tier: residency.TierHost}, ""},
		{[]string{"--use-fsdp-inference"}, "", residency.ComponentPlan{}, "one device"},
		{[]string{"--warp-drive"}, "", residency.ComponentPlan{}, "dit-layerwise-offload"},
		{[]string{"--vae-cpu-offload=maybe"}, "", residency.ComponentPlan{}, "true or false"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.flags, " "), func(t *testing.T) {
			p, err := FlagPlan(tc.flags)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := p.For(tc.comp)
			if got.Placement != tc.want.Placement || got.Tier != tc.want.Tier || got.Prefetch != tc.want.Prefetch {
				t.Errorf("%s: %+v, want %+v", tc.comp, got, tc.want)
			}
		})
	}
}

func TestGroupOffload(t *testing.T) {
	for _, tc := range []struct {
		n      int
		stream bool
		k      int
	}{{1, false, 0}, {1, true, 1}, {4, false, 3}, {4, true, 7}} {
		p, err := GroupOffload(tc.n, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{TextEncoder, Transformer, VAE} {
			if got := p.For(c); got.Placement != residency.Stream || got.Prefetch != tc.k {
				t.Errorf("group %d stream %v: %s = %+v, want stream with prefetch %d", tc.n, tc.stream, c, got, tc.k)
			}
		}
	}
	if _, err := GroupOffload(-1, false); err == nil {
		t.Error("a negative group size was accepted")
	}
}

// TestPredictOrders checks relations the model must keep: streaming holds
// less than residency, sequential CFG and FFN chunking lower the denoise
// peak, tiling lowers the decode peak, and disk tiers cost time.
func TestPredictOrders(t *testing.T) {
	p := mustBuiltin(t, "wan2.1-t2v-1.3b")
	hw, req := hwprofile.Default(), requestFor("wan2.1-t2v-1.3b")
	stream := residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}
	base := residency.Uniform("base", stream, TextEncoder, Transformer, VAE)
	with := func(f func(p *residency.Plan)) *residency.Plan {
		c := clonePlan(base)
		f(c)
		return c
	}
	predict := func(plan *residency.Plan) (Prediction, phaseStats) {
		pr, ph, err := simulate(p, hw, plan, req, Budgets{}, simMode{phaseEmpty: true})
		if err != nil {
			t.Fatal(err)
		}
		return pr, ph
	}
	basePred, basePh := predict(base)
	resPred, _ := predict(&residency.Plan{})
	if basePred.PeakDeviceBytes >= resPred.PeakDeviceBytes {
		t.Errorf("streaming peak %d not below resident %d", basePred.PeakDeviceBytes, resPred.PeakDeviceBytes)
	}
	_, seqPh := predict(with(func(p *residency.Plan) { p.Run.CFG = residency.CFGSequential }))
	_, chunkPh := predict(with(func(p *residency.Plan) { p.Run.FFNChunk = 2048 }))
	_, tilePh := predict(with(func(p *residency.Plan) { p.Run.VAETile, p.Run.VAEStride = 256, 192 }))
	if seqPh.dev[1] >= basePh.dev[1] || chunkPh.dev[1] >= basePh.dev[1] {
		t.Errorf("denoise peak: batched %d, sequential %d, chunked %d: want both below batched", basePh.dev[1], seqPh.dev[1], chunkPh.dev[1])
	}
	if tilePh.dev[2] >= basePh.dev[2] {
		t.Errorf("decode peak tiled %d not below untiled %d", tilePh.dev[2], basePh.dev[2])
	}
	diskPred, _ := predict(with(func(p *residency.Plan) {
		c := p.Components[Transformer]
		c.Tier = residency.TierDisk
		p.Components[Transformer] = c
	}))
	if diskPred.TotalS <= basePred.TotalS || diskPred.PeakHostBytes >= basePred.PeakHostBytes {
		t.Errorf("disk tier: %.1fs and host %d, host tier %.1fs and host %d: want slower and less host memory",
			diskPred.TotalS, diskPred.PeakHostBytes, basePred.TotalS, basePred.PeakHostBytes)
	}
	k0, k0Ph := predict(with(func(p *residency.Plan) {
		c := p.Components[Transformer]
		c.Prefetch = 0
		p.Components[Transformer] = c
	}))
	if k0Ph.dev[1] >= basePh.dev[1] || k0.Components[1].StallS <= basePred.Components[1].StallS {
		t.Errorf("prefetch 0: denoise peak %d stall %.2fs; prefetch 1: peak %d stall %.2fs: want less memory and more stall",
			k0Ph.dev[1], k0.Components[1].StallS, basePh.dev[1], basePred.Components[1].StallS)
	}
	// A transformer whose checkpoint sits in the page cache copies faster,
	// with free memory for the run beside the cache...
	budgets := Budgets{}
	predict = func(plan *residency.Plan) (Prediction, phaseStats) {
		pr, ph, err := simulate(p, hw, plan, req, budgets, simMode{phaseEmpty: true})
		if err != nil {
			t.Fatal(err)
		}
		return pr, ph
	}
	coldPred, _ := predict(base)
	p.Component(Transformer).Cached = 1
	cached, _ := predict(base)
	if cached.Components[1].CopyS >= coldPred.Components[1].CopyS || cached.Components[0].CopyS != coldPred.Components[0].CopyS {
		t.Errorf("transformer cached: copy %.2fs (text %.2fs), cold: %.2fs (text %.2fs): want only the transformer's faster",
			cached.Components[1].CopyS, cached.Components[0].CopyS, coldPred.Components[1].CopyS, coldPred.Components[0].CopyS)
	}
	// ...but not where the text encoder's host copies, made first, use
	// up the free memory and the kernel evicts the transformer's pages
	// for them. With page cache the run does not read (ten checkpoints'
	// worth, more than the run's memory), the kernel evicts that instead.
	var all int64
	for _, c := range p.Components {
		all += c.StoredBytes()
	}
	budgets = Budgets{FreeBytes: pageSize, CacheBytes: p.Component(Transformer).StoredBytes()}
	evicted, _ := predict(base)
	budgets.CacheBytes += 10 * all
	spared, _ := predict(base)
	p.Component(Transformer).Cached = 0
	budgets.CacheBytes -= 10 * all
	coldTight, _ := predict(base)
	budgets = Budgets{}
	if got, want := evicted.Components[1].CopyS, coldTight.Components[1].CopyS; math.Abs(got-want) > 1e-9*want {
		t.Errorf("no room for the cache: transformer copy %.4fs, want the uncached %.4fs", got, want)
	}
	if spared.Components[1].CopyS >= evicted.Components[1].CopyS {
		t.Errorf("other page cache to evict: transformer copy %.2fs, want below the evicted %.2fs", spared.Components[1].CopyS, evicted.Components[1].CopyS)
	}
}

func TestPredictOverBudget(t *testing.T) {
	p := mustBuiltin(t, "wan2.1-t2v-1.3b")
	pred, err := Predict(p, hwprofile.Default(), &residency.Plan{Name: "resident"}, requestFor("wan2.1-t2v-1.3b"), Budgets{DeviceBytes: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if pred.Fits || pred.Problem == "" {
		t.Fatalf("everything resident in 4 GiB fits? %+v", pred)
	}
}

// budgetSweep runs Search from the unconstrained peak down to the
// smallest feasible device budget and returns the budgets tried.
func budgetSweep(t *testing.T, p *Profile, req Request, host int64) []Budgets {
	t.Helper()
	hw := hwprofile.Default()
	_, free, err := Search(p, hw, req, Budgets{HostBytes: host})
	if err != nil {
		t.Fatal(err)
	}
	// The bottom budget is the smallest that fits, or 1 MiB when the host
	// budget holds everything (every component computing on the host
	// needs no device memory at all).
	bottom := int64(1 << 20)
	var ie *InfeasibleError
	_, _, err = Search(p, hw, req, Budgets{DeviceBytes: bottom, HostBytes: host})
	switch {
	case errors.As(err, &ie) && ie.MinDeviceBytes > 0:
		bottom = ie.MinDeviceBytes
	case err != nil:
		t.Fatalf("1 MiB device: %v", err)
	}
	// The top budget fits the unconstrained plan with the planner's margin.
	top := max(int64(float64(free.PeakDeviceReservedBytes)*1.05)+4*marginBytes, bottom)
	var out []Budgets
	for i := range 5 {
		d := top - (top-bottom)*int64(i)/4
		out = append(out, Budgets{DeviceBytes: d, HostBytes: host})
	}
	return out
}

func TestSearchRespectsBudgets(t *testing.T) {
	hosts := map[string]int64{"wan-tiny": 0, "wan2.1-t2v-1.3b": 64 << 30, "wan2.1-t2v-14b": 160 << 30}
	for _, name := range BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			p, req, hw := mustBuiltin(t, name), requestFor(name), hwprofile.Default()
			for _, b := range budgetSweep(t, p, req, hosts[name]) {
				plan, pred, err := Search(p, hw, req, b)
				if err != nil {
					t.Fatalf("budget %+v: %v", b, err)
				}
				if pred.PeakDeviceReservedBytes > b.DeviceBytes || (b.HostBytes > 0 && pred.PeakHostBytes > b.HostBytes) || !pred.Fits {
					t.Errorf("budget %+v: plan %s predicts device %d, host %d", b, describe(plan), pred.PeakDeviceReservedBytes, pred.PeakHostBytes)
				}
				again, err := Predict(p, hw, plan, req, b)
				if err != nil || !again.Fits || again.TotalS != pred.TotalS {
					t.Errorf("budget %+v: the returned plan does not predict the same: %v %+v", b, err, again)
				}
				checkNotSlowerThanPresets(t, p, req, b, pred)
				t.Logf("device %d host %d: %s %+v peak %d, %.0fs", b.DeviceBytes, b.HostBytes, describe(plan), plan.Run, pred.PeakDeviceReservedBytes, pred.TotalS)
			}
		})
	}
}

func checkNotSlowerThanPresets(t *testing.T, p *Profile, req Request, b Budgets, auto Prediction) {
	t.Helper()
	hw := hwprofile.Default()
	for _, name := range PresetNames() {
		if name == "auto" {
			continue
		}
		plan, err := Preset(name, PresetOptions{Profile: p, HW: hw, Request: req, Budgets: b})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := Predict(p, hw, plan, req, b)
		if err != nil {
			t.Fatal(err)
		}
		// The search treats plans within 1% of the fastest as equally
		// fast and picks between them by what they cut and hold (pick).
		if pred.Fits && pred.TotalS < auto.TotalS*0.99 {
			t.Errorf("budget %+v: preset %s (%.3fs) beats auto (%.3fs) by more than 1%%", b, name, pred.TotalS, auto.TotalS)
		}
	}
}

func TestInfeasibleNamesMinimum(t *testing.T) {
	p, req, hw := mustBuiltin(t, "wan2.1-t2v-1.3b"), requestFor("wan2.1-t2v-1.3b"), hwprofile.Default()
	// 4 GiB of host cannot hold every component computing there (the
	// text encoder alone is 8.6 GiB), so some device memory is needed.
	b := Budgets{DeviceBytes: 4 << 20, HostBytes: 4 << 30}
	_, _, err := Search(p, hw, req, b)
	var ie *InfeasibleError
	if !errors.As(err, &ie) {
		t.Fatalf("4 MiB device, 4 GiB host: err %v, want an InfeasibleError", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "--device-mem") {
		t.Errorf("message %q: want one line naming --device-mem", msg)
	}
	if ie.MinDeviceBytes <= b.DeviceBytes {
		t.Fatalf("smallest device %d is not above the budget %d that failed", ie.MinDeviceBytes, b.DeviceBytes)
	}
	b.DeviceBytes = ie.MinDeviceBytes
	if _, pred, err := Search(p, hw, req, b); err != nil || pred.PeakDeviceReservedBytes > b.DeviceBytes {
		t.Errorf("at the named minimum %d: %v (peak %d)", b.DeviceBytes, err, pred.PeakDeviceReservedBytes)
	}
}

func TestOutputs(t *testing.T) {
	p := mustBuiltin(t, "wan-tiny")
	_, pred, err := Search(p, hwprofile.Default(), requestFor("wan-tiny"), Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, pred); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{"peak_device_bytes": float64(pred.PeakDeviceBytes), "peak_host_bytes": float64(pred.PeakHostBytes),
		"peak_rss_bytes": float64(pred.PeakRSSBytes), "total_s": pred.TotalS, "step_s": pred.StepS} {
		if got, ok := m[key].(float64); !ok || got != want {
			t.Errorf("json %s = %v, want %v", key, m[key], want)
		}
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, pred); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{TextEncoder, Transformer, VAE, "peak device", "peak host", "peak RSS", "total"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/plan.yaml"
	data, err := level(3).YAML()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec, want, wantErr string
	}{
		{"level2", "level2", ""},
		{path, "level3", ""},
		{dir + "/missing.yaml", "", "neither a preset"},
	} {
		p, err := Resolve(tc.spec, PresetOptions{})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p.Name != tc.want {
			t.Errorf("%s: plan %v, err %v; want %s", tc.spec, p, err, tc.want)
		}
	}
}

// TestPickBetweenEqualPlans: the fastest plan wins by more than 1%;
// within 1% of the fastest, the one that cuts its products less, then the
// one that holds less host memory; and the band is measured from the
// fastest, so a chain of plans each within 1% of the next does not drift.
func TestPickBetweenEqualPlans(t *testing.T) {
	plan := func(name string) *residency.Plan { return &residency.Plan{Name: name} }
	chunk := residency.RunOptions{FFNChunk: 256}
	for _, tc := range []struct {
		name string
		cs   []choice
		want string
	}{
		{"whole over chunked within 1%", []choice{
			{plan("chunked"), Prediction{TotalS: 99.5, Run: chunk}},
			{plan("whole"), Prediction{TotalS: 100}}}, "whole"},
		{"chunked when 10% faster", []choice{
			{plan("whole"), Prediction{TotalS: 100}},
			{plan("chunked"), Prediction{TotalS: 90, Run: chunk}}}, "chunked"},
		{"less host memory within 1%", []choice{
			{plan("host-tier"), Prediction{TotalS: 100, PeakHostBytes: 12 << 30}},
			{plan("disk-tier"), Prediction{TotalS: 100.5, PeakHostBytes: 3 << 30}}}, "disk-tier"},
		{"no drift along a chain", []choice{
			{plan("a"), Prediction{TotalS: 100, PeakHostBytes: 3 << 30}},
			{plan("b"), Prediction{TotalS: 100.9, PeakHostBytes: 2 << 30}},
			{plan("c"), Prediction{TotalS: 101.8, PeakHostBytes: 1 << 30}}}, "b"},
	} {
		if got := pick(tc.cs).plan.Name; got != tc.want {
			t.Errorf("%s: picked %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestConvFlopsSplit: convolution flops go to the probes around their
// reduction, halfway between two probes half to each (in log2), at a probe
// all to it, outside the probes all to the end one; nothing is lost.
func TestConvFlopsSplit(t *testing.T) {
	for _, c := range []struct {
		k    int
		want [4]float64
	}{
		{27, [4]float64{1, 0, 0, 0}},
		{216, [4]float64{1, 0, 0, 0}},
		{432, [4]float64{0.5, 0.5, 0, 0}},
		{864, [4]float64{0, 1, 0, 0}},
		{2592, [4]float64{0, 0, 1, 0}},
		{5184, [4]float64{0, 0, 0.5, 0.5}},
		{10368, [4]float64{0, 0, 0, 1}},
		{1 << 20, [4]float64{0, 0, 0, 1}},
	} {
		got := convFlops(1, c.k)
		sum := 0.0
		for i := range got {
			sum += got[i]
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Errorf("k=%d: split %v, want %v", c.k, got, c.want)
				break
			}
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("k=%d: split %v sums to %g", c.k, got, sum)
		}
	}
}

// TestReadTimeFollowsThePageCache: a block's first read finds the
// component's cached fraction, its second finds what the first left, later
// ones nothing: the executor drops a disk-tier block's pages from its
// second read on.
func TestReadTimeFollowsThePageCache(t *testing.T) {
	hw := hwprofile.Default()
	hw.DiskGBps, hw.PageCacheGBps = 1, 100
	const raw = 1e9
	disk, cache := raw/1e9, raw/100e9
	s := newSim(hw, Budgets{})
	x := &simBlock{comp: &simComp{unread: raw, cachedUnread: raw / 4}, rawBytes: raw}
	for i, want := range []float64{0.75*disk + 0.25*cache, cache, disk} {
		if got := readSum(s, x, 0); math.Abs(got-want) > 1e-12 {
			t.Errorf("read %d: %.4gs, want %.4gs", i+1, got, want)
		}
	}
}

// TestEvictionOrder: once free memory runs out, the kernel evicts the page
// cache the run does not read first, then the cached pages of blocks not
// read yet in the order the run reads its components, and last what the
// run's own reads left; each read finds what is left of its pages.
func TestEvictionOrder(t *testing.T) {
	hw := hwprofile.Default()
	hw.DiskGBps, hw.PageCacheGBps, hw.ReclaimTouchUsPerPage = 1, 100, 2
	const page = pageSize
	// Past free memory each uncached page read evicts a cached one.
	read := func(uncached, cached float64) float64 {
		return uncached*page/1e9 + cached*page/100e9 + uncached*2e-6
	}
	s := newSim(hw, Budgets{FreeBytes: 10 * page, CacheBytes: 250 * page})
	var blocks []*simBlock
	for range 2 {
		c := &simComp{unread: 100 * page, cachedUnread: 100 * page}
		s.comps = append(s.comps, c)
		s.spare -= c.cachedUnread
		blocks = append(blocks, &simBlock{comp: c, rawBytes: 100 * page})
	}
	a, b := blocks[0], blocks[1]
	s.touchTime(130*page, 0) // 10 free, then 50 spare and 70 of a's
	if s.spare != 0 || a.comp.cachedUnread != 30*page || b.comp.cachedUnread != 100*page {
		t.Fatalf("after 130 pages past 10 free: spare %d, a %d, b %d pages cached", s.spare/page, a.comp.cachedUnread/page, b.comp.cachedUnread/page)
	}
	for _, c := range []struct {
		name             string
		x                *simBlock
		uncached, cached float64
	}{
		{"a, first read", a, 70, 30}, // its 70 pages from disk evict 70 of b's
		{"b, first read", b, 70, 30}, // its 70 from disk evict 70 of what a's read left
		{"a, second read", a, 35, 65},
	} {
		if got, want := readSum(s, c.x, 0), read(c.uncached, c.cached); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: %.4gs, want %.4gs (%g pages from disk, %g cached)", c.name, got, want, c.uncached, c.cached)
		}
	}
}

// readSum is a read's whole time: the disk's and the page cache's fill.
func readSum(s *sim, x *simBlock, at float64) float64 {
	read, fill := s.readTime(x, at)
	return read + fill
}

// TestReadFillsThePageCache: the pages a read of uncached checkpoint bytes
// fills cost the warm rate where a drop freed them less than fillWarmLife
// seconds before, the first-touch rate out of the rest of free memory,
// and the reclaim rate past it; nothing where free memory is unknown.
func TestReadFillsThePageCache(t *testing.T) {
	hw := hwprofile.Default()
	hw.FirstTouchUsPerPage, hw.WarmTouchUsPerPage, hw.ReclaimTouchUsPerPage = 10, 1, 3
	hw.DiskGBps, hw.PageCacheGBps = 1, 100
	hw.DiskSustainedGBps = 0
	const page = pageSize
	disk := func(pages float64) float64 { return pages * page / 1e9 }
	us := func(pages, rate float64) float64 { return pages * rate * 1e-6 }
	// block is a resident component's block, read once: it keeps its pages.
	block := func() *simBlock { return &simBlock{comp: &simComp{unread: 100 * page}, rawBytes: 100 * page} }
	check := func(name string, s *sim, x *simBlock, at, want float64) {
		t.Helper()
		if got := readSum(s, x, at); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: %.4gs, want %.4gs", name, got, want)
		}
	}

	s := newSim(hw, Budgets{FreeBytes: 150 * page})
	check("into free memory", s, block(), 0, disk(100)+us(100, 10))
	check("past free memory", s, block(), 1, disk(100)+us(50, 10)+us(50, 3))

	s = newSim(hw, Budgets{FreeBytes: 1000 * page})
	s.freed(100*page, 0) // a drop
	check("8 s after a drop", s, block(), 8, disk(100)+us(100, 1))
	s.freed(100*page, 10)
	check("past fillWarmLife after a drop", s, block(), 10+fillWarmLife+1, disk(100)+us(100, 10))

	s = newSim(hw, Budgets{})
	check("free memory unknown", s, block(), 0, disk(100))
}

// TestTouchPastFreeMemory: fresh pages cost the calibrated first touch
// while the kernel has free memory and the reclaim rate past it; reads of
// uncached checkpoint pages use up free memory too (the page cache grows),
// and an unknown free memory never runs out.
func TestTouchPastFreeMemory(t *testing.T) {
	hw := hwprofile.Default()
	hw.FirstTouchUsPerPage, hw.ReclaimTouchUsPerPage = 1, 10
	hw.DiskGBps, hw.PageCacheGBps = 1, 100
	const page = pageSize

	s := newSim(hw, Budgets{FreeBytes: 100 * page})
	if got, want := s.touchTime(60*page, 0), touchSeconds(60*page, 1); math.Abs(got-want) > 1e-12 {
		t.Errorf("60 pages of 100 free: %.3g s, want %.3g", got, want)
	}
	if got, want := s.touchTime(60*page, 0), touchSeconds(40*page, 1)+touchSeconds(20*page, 10); math.Abs(got-want) > 1e-12 {
		t.Errorf("60 more pages with 40 free: %.3g s, want %.3g", got, want)
	}

	s = newSim(hw, Budgets{FreeBytes: 100 * page})
	readSum(s, &simBlock{comp: &simComp{unread: 120 * page, cachedUnread: 60 * page}, rawBytes: 120 * page}, 0) // 60 pages from disk
	if got, want := s.touchTime(60*page, 0), touchSeconds(40*page, 1)+touchSeconds(20*page, 10); math.Abs(got-want) > 1e-12 {
		t.Errorf("after reading 60 uncached pages, 60 fresh: %.3g s, want %.3g", got, want)
	}

	s = newSim(hw, Budgets{})
	if got, want := s.touchTime(1000*page, 0), touchSeconds(1000*page, 1); math.Abs(got-want) > 1e-12 {
		t.Errorf("free memory unknown: %.3g s, want %.3g", got, want)
	}
}

// TestTouchWarmAfterUnmap: memory the run gave back (a segment unmapped
// under a budget) costs the warm rate when it is mapped again, as much of
// it as was given back; past that, fresh pages cost the cold rate.
func TestTouchWarmAfterUnmap(t *testing.T) {
	hw := hwprofile.Default()
	hw.FirstTouchUsPerPage, hw.WarmTouchUsPerPage = 10, 1
	const seg = 4 << 20 // a large segment of its own
	s := newSim(hw, Budgets{DeviceBytes: seg})
	a := s.dev.alloc(seg)
	if got, want := s.touchTime(s.dev.Mapped, 0), touchSeconds(seg, 10); math.Abs(got-want) > 1e-12 {
		t.Fatalf("first mapping: %.4gs, want %.4gs", got, want)
	}
	s.dev.release(a)
	mapped := s.dev.Mapped
	if s.dev.alloc(seg/2) == nil { // another size class: the cached segment is unmapped for it
		t.Fatal("allocation under the budget failed")
	}
	if got, want := s.touchTime(s.dev.Mapped-mapped, 0), touchSeconds(s.dev.Mapped-mapped, 1); math.Abs(got-want) > 1e-12 {
		t.Errorf("mapping again after an unmap: %.4gs, want %.4gs (warm)", got, want)
	}
	if got, want := s.touchTime(seg, 0), touchSeconds(seg/2, 1)+touchSeconds(seg/2, 10); len(s.warm) != 0 || math.Abs(got-want) > 1e-12 {
		t.Errorf("past what was given back: %.4gs, want %.4gs (half warm, half cold); %v warm left", got, want, s.warm)
	}
}

// TestHostCopyReadThenTouch: a host-tier block's first load reads the
// checkpoint into fresh host pages, and the kernel faults each in during
// the copy, so the read costs the disk's time plus the first touch's (not
// the larger of the two), before the upload into fresh device pages.
func TestHostCopyReadThenTouch(t *testing.T) {
	hw := hwprofile.Default()
	hw.FirstTouchUsPerPage, hw.DiskGBps, hw.H2DF32GBps = 10, 1, 1
	const pages = 1024 // 4 MiB: a whole number of the allocator model's segments
	s := newSim(hw, Budgets{})
	comp := &ComponentProfile{Name: "c", Storage: dtype.F32, Blocks: []BlockProfile{{Name: "c.0", Tensors: []int64{pages * pageSize / 4}}}}
	plan := residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}
	if err := s.register(comp, plan, dtype.F32); err != nil {
		t.Fatal(err)
	}
	s.startLoad(s.comps[0].blocks[0], 0)
	st := s.comps[0].stats
	bytes := float64(pages * pageSize)
	read, touch := bytes/1e9, pages*10e-6
	if math.Abs(st.read-read) > 1e-12 || math.Abs(st.touch-touch) > 1e-12 {
		t.Fatalf("read %.4gs, touch %.4gs; want %.4gs, %.4gs", st.read, st.touch, read, touch)
	}
	// The upload: the copy at 1 GB/s and the device pages' first touch.
	if want := read + touch + (bytes/1e9 + touch); math.Abs(st.copy-want) > 1e-12 {
		t.Errorf("copy %.4gs, want read %.4g + touch %.4g + upload %.4g", st.copy, read, touch, want-read-touch)
	}
}

// TestDiskBurstThenSustained: uncached reads run at the probed rate while
// the disk's burst lasts, then at the sustained rate; without a sustained
// figure every byte runs at the probed rate.
func TestDiskBurstThenSustained(t *testing.T) {
	hw := hwprofile.Default()
	hw.DiskGBps, hw.PageCacheGBps = 2, 100
	read := func(s *sim, raw int64) float64 {
		return readSum(s, &simBlock{comp: &simComp{unread: raw}, rawBytes: raw}, 0)
	}
	s := newSim(hw, Budgets{})
	if got, want := read(s, 3e9), 1.5; math.Abs(got-want) > 1e-12 {
		t.Errorf("no sustained figure: %.4gs, want %.4gs", got, want)
	}
	hw.DiskSustainedGBps, hw.DiskBurstGB = 0.5, 1.5
	s = newSim(hw, Budgets{})
	for i, want := range []float64{1.0 / 2, 0.5/2 + 1.5/0.5, 1 / 0.5} {
		if got := read(s, []int64{1e9, 2e9, 1e9}[i]); math.Abs(got-want) > 1e-12 {
			t.Errorf("read %d: %.4gs, want %.4gs", i+1, got, want)
		}
	}
}

// TestDroppedPagesAreWarm: from a disk-tier block's second load on, the
// executor drops its pages after reading them; the next fresh pages reuse
// that memory at the warm rate for warmLife seconds, then at the cold one.
func TestDroppedPagesAreWarm(t *testing.T) {
	hw := hwprofile.Default()
	hw.FirstTouchUsPerPage, hw.WarmTouchUsPerPage = 10, 1
	hw.DiskGBps, hw.PageCacheGBps = 1, 100
	const page = pageSize
	s := newSim(hw, Budgets{FreeBytes: 1000 * page})
	c := &simComp{plan: residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk}, unread: 100 * page}
	x := &simBlock{comp: c, rawBytes: 100 * page}

	readSum(s, x, 0) // the first load keeps its pages
	if got, want := s.touchTime(50*page, 1), touchSeconds(50*page, 10); math.Abs(got-want) > 1e-12 {
		t.Errorf("after a first read: %.4gs, want %.4gs (cold)", got, want)
	}
	at := 2 + readSum(s, x, 2) // the second drops them when it is done
	if got, want := s.touchTime(60*page, at), touchSeconds(60*page, 1); math.Abs(got-want) > 1e-12 {
		t.Errorf("after a second read: %.4gs, want %.4gs (warm)", got, want)
	}
	if got, want := s.touchTime(60*page, at+1), touchSeconds(40*page, 1)+touchSeconds(20*page, 10); math.Abs(got-want) > 1e-12 {
		t.Errorf("past what it dropped: %.4gs, want %.4gs (40 pages warm, 20 cold)", got, want)
	}
	at = 10 + readSum(s, x, 10)
	if got, want := s.touchTime(10*page, at+warmLife+1), touchSeconds(10*page, 10); math.Abs(got-want) > 1e-12 {
		t.Errorf("%gs after a drop: %.4gs, want %.4gs (cold again)", warmLife+1, got, want)
	}
}

// TestDiskTierSteadyStep: a transformer streamed from the disk tier reads
// its cached checkpoint in the first two steps; the executor drops each
// block's pages after its second load, so from step 3 on every step reads
// the whole transformer from the disk, and the steady step prices that.
func TestDiskTierSteadyStep(t *testing.T) {
	p := mustBuiltin(t, "wan-tiny")
	p.Component(Transformer).Cached = 1
	hw := hwprofile.Default()
	hw.DiskGBps, hw.PageCacheGBps = 1e-5, 100 // reads dwarf compute
	req := requestFor("wan-tiny")
	req.Steps = 5
	plan := residency.Uniform("disk", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk, Prefetch: 1},
		TextEncoder, Transformer, VAE)
	pr, err := Predict(p, hw, plan, req, Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	read := float64(p.Component(Transformer).StoredBytes()) / (hw.DiskGBps * 1e9)
	if pr.StepS < read {
		t.Errorf("steady step %.3gs, want at least the transformer's read from disk, %.3gs", pr.StepS, read)
	}
	if pr.FirstStepS > read/10 {
		t.Errorf("first step %.3gs, want the page cache's speed (the disk would take %.3gs)", pr.FirstStepS, read)
	}
	// Steps 1 and 2 read from the page cache, but for the embedding's
	// third load (it runs twice a step): less than one step from the disk.
	if pr.DenoiseS < 3*pr.StepS || pr.DenoiseS > 4*pr.StepS {
		t.Errorf("denoise %.3gs, want steps 3-5 from the disk (3 x %.3gs) and steps 1-2 mostly from the page cache", pr.DenoiseS, pr.StepS)
	}
}

// TestFragmentsFirst: where the profile measured 4 KiB pages from the
// kernel's fragmented free memory cheaper by half, a segment the fragments
// hold (with arena.FragmentMargin) is touched at their rate, the next one
// past them at the cold rate; unmapping a fragment segment gives it back
// to the fragments, not to the warm list. Without the measurement, every
// segment is cold.
func TestFragmentsFirst(t *testing.T) {
	const mib = 1 << 20
	hw := hwprofile.Default()
	hw.FirstTouchUsPerPage, hw.WarmTouchUsPerPage, hw.FragmentTouchUsPerPage = 10, 0.5, 1
	touch := func(s *sim, n int64) (float64, *mblock) {
		mapped := s.dev.Mapped
		b := s.dev.alloc(n)
		if b == nil || s.dev.Mapped-mapped != n {
			t.Fatalf("alloc %d: mapped %d", n, s.dev.Mapped-mapped)
		}
		return s.touchTime(s.dev.Mapped-mapped, 0), b
	}
	s := newSim(hw, Budgets{FragmentedBytes: 100 * mib})
	got, a := touch(s, 64*mib)
	if want := touchSeconds(64*mib, 1); math.Abs(got-want) > 1e-12 {
		t.Errorf("64 MiB in 100 MiB of fragments: %.4gs, want %.4gs (fragment rate)", got, want)
	}
	if got, _ := touch(s, 32*mib); math.Abs(got-touchSeconds(32*mib, 10)) > 1e-12 {
		t.Errorf("32 MiB past the fragments (36 MiB left, 16 of them the margin): %.4gs, want %.4gs (cold)", got, touchSeconds(32*mib, 10))
	}
	s.dev.release(a)
	s.dev.releaseEmpty()
	if len(s.warm) != 0 || s.frag != 100*mib {
		t.Errorf("after unmapping the fragment segment: %d bytes of fragments, %v warm; want 100 MiB and none", s.frag, s.warm)
	}
	if got, _ := touch(s, 48*mib); math.Abs(got-touchSeconds(48*mib, 1)) > 1e-12 {
		t.Errorf("48 MiB after it was given back: %.4gs, want %.4gs (fragment rate)", got, touchSeconds(48*mib, 1))
	}

	hw.FragmentTouchUsPerPage = 6 // not cheaper by half: huge pages
	s = newSim(hw, Budgets{FragmentedBytes: 100 * mib})
	if got, _ := touch(s, 64*mib); math.Abs(got-touchSeconds(64*mib, 10)) > 1e-12 {
		t.Errorf("fragments not cheaper by half: %.4gs, want %.4gs (cold)", got, touchSeconds(64*mib, 10))
	}
}

// touchSeconds is the first touch of bytes at usPerPage µs per 4 KiB page.
func touchSeconds(bytes int64, usPerPage float64) float64 {
	return float64(bytes) / pageSize * usPerPage * 1e-6
}

// A runtime kept for more requests (ferry serve) is planned for the warm
// ones: with room for every weight, Search keeps the text encoder and the
// transformer where a second request finds them (a cold request's plan
// reads them from the checkpoint every time), and the plan it returns is
// the fastest warm one, as the cold search's is the fastest cold one.
func TestSearchRepeatedPlansForWarmRequests(t *testing.T) {
	p, hw := mustBuiltin(t, "wan2.1-t2v-1.3b"), hwprofile.Default()
	req := Request{Batch: 1, Frames: 17, Height: 256, Width: 256, TextLen: 512, Steps: 4, Guidance: 5}
	b := Budgets{DeviceBytes: 20 << 30, HostBytes: 8 << 30}
	coldPlan, cold, err := Search(p, hw, req, b)
	if err != nil {
		t.Fatal(err)
	}
	req.Repeated = true
	warmPlan, warm, err := Search(p, hw, req, b)
	if err != nil {
		t.Fatal(err)
	}
	if !warm.Fits || warm.LoadS <= 0 {
		t.Fatalf("warm plan %s: fits %v, load %.1fs", describe(warmPlan), warm.Fits, warm.LoadS)
	}
	for _, c := range []string{TextEncoder, Transformer} {
		if warmPlan.For(c).FromDisk() {
			t.Errorf("the warm plan %s reads %s from the checkpoint every request", describe(warmPlan), c)
		}
	}
	coldAsWarm, err := Predict(p, hw, coldPlan, req, b)
	if err != nil {
		t.Fatal(err)
	}
	if warm.cost() > coldAsWarm.cost() {
		t.Errorf("warm request: %.1fs under the warm plan %s, %.1fs under the cold plan %s", warm.cost(), describe(warmPlan), coldAsWarm.cost(), describe(coldPlan))
	}
	if cold.TotalS > warm.TotalS*1.01 {
		t.Errorf("cold request: %.1fs under the cold plan, %.1fs under the warm one", cold.TotalS, warm.TotalS)
	}
	t.Logf("cold plan %s: %.1fs cold, %.1fs warm; warm plan %s: %.1fs cold, %.1fs warm",
		describe(coldPlan), cold.TotalS, coldAsWarm.cost(), describe(warmPlan), warm.TotalS, warm.cost())
}

// TestSoloEstimateForWarmRequests: for a server (Request.Repeated) the
// search's per-component estimates are a warm job's, less what loading the
// option's kept weights costs, so that the candidates verified first are
// the warm objective's, not the cold one's.
func TestSoloEstimateForWarmRequests(t *testing.T) {
	p, hw := mustBuiltin(t, "wan2.1-t2v-1.3b"), hwprofile.Default()
	req := Request{Batch: 1, Frames: 17, Height: 256, Width: 256, TextLen: 512, Steps: 4, Guidance: 5}.normalized()
	resident := residency.ComponentPlan{Placement: residency.Resident}
	cold := &searcher{p: p, hw: hw, req: req}
	c, err := cold.soloRun(TextEncoder, 0, resident, residency.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req.Repeated = true
	warm := &searcher{p: p, hw: hw, req: req}
	w, err := warm.soloRun(TextEncoder, 0, resident, residency.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plan := residency.Uniform("", offPlan, TextEncoder, Transformer, VAE)
	plan.Components[TextEncoder] = resident
	pred, err := Predict(p, hw, plan, req, Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	if pred.LoadS <= 0 {
		t.Fatalf("a resident text encoder loads nothing: %.3gs", pred.LoadS)
	}
	if want := max(0, c.seconds-pred.LoadS); math.Abs(w.seconds-want) > 1e-9 {
		t.Errorf("warm estimate %.4gs, want the cold %.4gs less the load %.4gs", w.seconds, c.seconds, pred.LoadS)
	}
}

// TestLoadSecondsOfHostCopies: a warm request does not pay the checkpoint
// read that filled a component's host-tier copies (read once, at the
// disk's rate here, and the page cache it fills, out of cold free memory
// where the free memory is known), nor a resident component's whole copy;
// it still pays the uploads from the host copies.
func TestLoadSecondsOfHostCopies(t *testing.T) {
	p, hw := mustBuiltin(t, "wan-tiny"), hwprofile.Default()
	hw.DiskGBps, hw.DiskSustainedGBps = 0.5, 0
	plan := residency.Uniform("", residency.ComponentPlan{Placement: residency.Resident}, TextEncoder, VAE)
	plan.Components[Transformer] = residency.ComponentPlan{Placement: residency.Onload, Tier: residency.TierHost}
	for _, free := range []int64{0, 16 << 30} {
		pred, err := Predict(p, hw, plan, requestFor("wan-tiny"), Budgets{FreeBytes: free})
		if err != nil {
			t.Fatal(err)
		}
		want := 0.0
		for _, c := range pred.Components {
			if c.Name == Transformer {
				fill := 0.0
				if free > 0 { // uncached, into cold free memory
					fill = float64(c.StoredBytes) / pageSize * hw.FirstTouchUsPerPage * 1e-6
				}
				want += float64(c.StoredBytes)/0.5e9 + fill // uncached: the disk
				if math.Abs(c.FillS-fill) > 1e-9 {
					t.Errorf("%d bytes free: transformer fill %.4gs, want %.4gs", free, c.FillS, fill)
				}
				if c.CopyS <= c.ReadS+c.FillS {
					t.Errorf("transformer: copies %.4gs, the read alone %.4gs: the uploads are missing", c.CopyS, c.ReadS+c.FillS)
				}
			} else {
				want += c.CopyS
			}
		}
		if math.Abs(pred.LoadS-want) > 1e-9*want {
			t.Errorf("%d bytes free: load %.6gs, want %.6gs", free, pred.LoadS, want)
		}
	}
}

// TestSearchConcurrentMatchesSequential: the search predicts its options
// and candidates concurrently; one worker (GOMAXPROCS 1) runs the
// one-by-one loops. Both must return the same plan and prediction, and
// the same InfeasibleError when nothing fits.
func TestSearchConcurrentMatchesSequential(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one CPU: the search runs sequentially anyway")
	}
	type result struct {
		plan string
		pred Prediction
		err  string
	}
	search := func(p *Profile, req Request, b Budgets, procs int) result {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		plan, pred, err := Search(p, hwprofile.Default(), req, b)
		if err != nil {
			return result{err: err.Error()}
		}
		return result{plan: fmt.Sprintf("%s %+v", describe(plan), plan.Run), pred: pred}
	}
	for _, name := range []string{"wan-tiny", "wan-tiny-i2v", "wan-tiny-moe"} {
		p, req := mustBuiltin(t, name), requestFor("wan-tiny")
		for _, b := range []Budgets{{}, {DeviceBytes: 24 << 20}, {DeviceBytes: 8 << 20}, {DeviceBytes: 1 << 20, HostBytes: 1 << 20}} {
			one, two := search(p, req, b, 1), search(p, req, b, 2)
			if !reflect.DeepEqual(one, two) {
				t.Errorf("%s, budgets %+v: one worker %+v\ntwo workers %+v", name, b, one, two)
			}
		}
	}
}
