package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"ferry/catalog"
	"ferry/dtype"
	"ferry/synth"
)

// moeReport is what TestMoEWithinBudgets reads of a run's report.
type moeReport struct {
	Measured struct {
		PeakDevice         int64 `json:"peak_device_bytes"`
		PeakDeviceReserved int64 `json:"peak_device_reserved_bytes"`
		PeakHost           int64 `json:"peak_host_bytes"`
	} `json:"measured"`
	Predicted struct {
		PeakDevice int64 `json:"peak_device_bytes"`
		PeakHost   int64 `json:"peak_host_bytes"`
		Switch     *struct {
			Step int `json:"step"`
		} `json:"switch"`
	} `json:"predicted"`
}

// TestMoEWithinBudgets runs a small synthetic two-expert model (each
// expert 17 MiB in bf16, 34 MiB on the device in fp32) with a device
// budget smaller than one expert and a host budget smaller than both:
// the planner's own plan (the experts stream from disk) and one that
// keeps the experts on the host tier, which fits only because the
// high-noise expert's host copies are freed at the switch. Both complete
// within the budgets, with the device and host peaks predicted exactly:
// the low-noise expert's first host copy, prefetched across the switch,
// is taken when it is queued, as the planner replays it.
func TestMoEWithinBudgets(t *testing.T) {
	w := catalog.WanTinyMoE()
	w.Transformer.NumAttentionHeads, w.Transformer.AttentionHeadDim = 4, 64
	w.Transformer.FFNDim, w.Transformer.NumLayers = 1024, 8
	arch, err := synth.Wan(w)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "moe")
	if err := synth.Write(model, arch, synth.Options{DType: dtype.BF16, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	const device, host = 14 << 20, 32 << 20
	expert := dirBytes(t, filepath.Join(model, "transformer"))
	if 2*expert <= host || 2*expert <= device {
		t.Fatalf("the experts (%d bytes each in bf16) do not frame the budgets: want a host budget below both, a device budget below one in fp32", expert)
	}
	hostPlan := writeFile(t, "experts-host.yaml", "name: experts-host\ncomponents:\n"+
		"  text_encoder: {placement: stream, tier: host, prefetch: 1}\n"+
		"  transformer: {placement: stream, tier: host, prefetch: 1}\n"+
		"  vae: {placement: stream, tier: host, prefetch: 1}\n")
	for _, plan := range []string{"auto", hostPlan} {
		t.Run(filepath.Base(plan), func(t *testing.T) {
			dir := t.TempDir()
			report := filepath.Join(dir, "report.json")
			code, _, stderr := ferry(t, "generate", "--model", model, "--prompt", "a red kite", "--height", "32", "--width", "32",
				"--frames", "1", "--steps", "4", "--max-sequence-length", "16", "--dtype", "fp32", "--plan", plan,
				"--device-mem", "14MiB", "--host-mem", "32MiB", "--out", filepath.Join(dir, "v.png"), "--report", report, "--quiet")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var r moeReport
			raw, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			m, p := r.Measured, r.Predicted
			if m.PeakDeviceReserved > device || m.PeakHost > host {
				t.Errorf("peaks device %d, host %d: over the budgets %d, %d", m.PeakDeviceReserved, m.PeakHost, device, host)
			}
			if p.Switch == nil || p.Switch.Step != 2 {
				t.Errorf("predicted switch %+v, want after step 2 of 4", p.Switch)
			}
			if p.PeakDevice != m.PeakDevice || p.PeakHost != m.PeakHost {
				t.Errorf("peaks device, host: predicted %d, %d; measured %d, %d", p.PeakDevice, p.PeakHost, m.PeakDevice, m.PeakHost)
			}
		})
	}
}

// dirBytes is the size of the safetensors files in dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no weights in %s", dir)
	}
	var n int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}
