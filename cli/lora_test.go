package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/lora"
	"ferry/lora/loratest"
	"ferry/model/modeltest"
	"ferry/model/wan"
	pipewan "ferry/pipeline/wan"
	"ferry/tensor"
)

// tinyLoRA writes a rank-2 LoRA on every default target of the wan-tiny
// transformer in dir; zeroB makes B zero (the adapters then add exactly
// nothing).
func tinyLoRA(t *testing.T, model, name string, zeroB bool) (string, []lora.Adapter) {
	t.Helper()
	ads := loratest.Adapters(t, model, 0)
	if zeroB {
		for i := range ads {
			clear(ads[i].B)
		}
	}
	p := filepath.Join(t.TempDir(), name)
	loratest.Write(t, p, ads)
	return p, ads
}

// generateVideo runs generate on wan-tiny with extra flags and returns the
// video's exact floats and the report.
func generateVideo(t *testing.T, model string, extra ...string) ([]float32, map[string]any) {
	t.Helper()
	dir := t.TempDir()
	out, rep := filepath.Join(dir, "v.safetensors"), filepath.Join(dir, "r.json")
	args := append([]string{"generate", "--model", model, "--prompt", "a red fox", "--height", "32", "--width", "32",
		"--frames", "5", "--steps", "2", "--seed", "3", "--out", out, "--report", rep, "--quiet"}, extra...)
	code, _, stderr := ferry(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s, err := checkpoint.OpenSet(out)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	video, _ := modeltest.TensorOf(t, s, "video")
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var report map[string]any
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	return video, report
}

// TestGenerateLoRA: through `generate --lora`, adapters whose B is zero
// give the same video as none, bit for bit (the base weights are
// untouched and the adapters add exact zeros), and real adapters change
// it; the report records each file with its scale and the planner's
// request the adapters' device bytes.
func TestGenerateLoRA(t *testing.T) {
	tiny := synthModel(t, "wan-tiny")
	zero, _ := tinyLoRA(t, tiny, "zero.safetensors", true)
	real, ads := tinyLoRA(t, tiny, "real.safetensors", false)

	base, _ := generateVideo(t, tiny)
	same, _ := generateVideo(t, tiny, "--lora", zero)
	if !slices.Equal(base, same) {
		t.Error("a LoRA with B = 0 changed the video")
	}
	changed, rep := generateVideo(t, tiny, "--lora", zero+":3", "--lora", real+":0.5")
	if slices.Equal(base, changed) {
		t.Error("a LoRA with random A and B left the video unchanged")
	}

	req, _ := rep["request"].(map[string]any)
	loras, _ := req["loras"].([]any)
	if len(loras) != 2 {
		t.Fatalf("report request.loras = %v, want both files", req["loras"])
	}
	if l, _ := loras[1].(map[string]any); l["file"] != real || l["scale"] != 0.5 {
		t.Errorf("report records %v, want %s at scale 0.5", l, real)
	}
	pred, _ := rep["predicted"].(map[string]any)
	preq, _ := pred["request"].(map[string]any)
	want := pipewan.LoRABytes([]pipewan.LoRA{{Adapters: ads}, {Adapters: ads}})
	if got, _ := preq["adapter_bytes"].(float64); int64(got) != want {
		t.Errorf("planner request adapter_bytes = %v, want %d", preq["adapter_bytes"], want)
	}
}

// TestGenerateLoRAErrors: a LoRA that does not fit the model, or cannot be
// read, is one user error line naming the file.
func TestGenerateLoRAErrors(t *testing.T) {
	tiny := synthModel(t, "wan-tiny")
	good, ads := tinyLoRA(t, tiny, "good.safetensors", false)
	write := func(name string, ads []lora.Adapter) string {
		p := filepath.Join(t.TempDir(), name)
		if err := lora.Write(p, ads, nil); err != nil {
			t.Fatal(err)
		}
		return p
	}
	far := slices.Clone(ads[:1])
	far[0].Module = "blocks.97.attn1.to_q"
	wide := slices.Clone(ads[:1])
	wide[0].In *= 2
	wide[0].A = append(slices.Clone(wide[0].A), wide[0].A...)
	garbage := writeFile(t, "garbage.safetensors", "not a LoRA")
	out := filepath.Join(t.TempDir(), "v.png")
	for _, tc := range []struct {
		name, arg, want string
		model           string
	}{
		{"module the model lacks", write("far.safetensors", far), "blocks.97.attn1.to_q", tiny},
		{"wrong size", write("wide.safetensors", wide), "features", tiny},
		{"not safetensors", garbage, "garbage.safetensors", tiny},
		{"missing file", filepath.Join(t.TempDir(), "none.safetensors"), "none.safetensors", tiny},
		{"bad scale", good + ":inf", "finite", tiny},
		{"not a Wan pipeline", good, "no Wan transformer", synthModel(t, "synthetic")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := ferry(t, "generate", "--model", tc.model, "--prompt", "x", "--height", "32", "--width", "32",
				"--steps", "1", "--lora", tc.arg, "--out", out)
			t.Log(strings.TrimSpace(stderr))
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if code != ExitUsage || len(lines) != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "-lora") {
				t.Errorf("exit %d, stderr %q; want exit %d and one line with -lora and %q", code, stderr, ExitUsage, tc.want)
			}
		})
	}
}

func TestLoRAFlag(t *testing.T) {
	var l loraFlag
	for _, v := range []string{"a.safetensors", "b.safetensors:0.5", "dir:x/c.safetensors", "d.safetensors:-1"} {
		if err := l.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	want := loraFlag{{"a.safetensors", 1}, {"b.safetensors", 0.5}, {"dir:x/c.safetensors", 1}, {"d.safetensors", -1}}
	if !slices.Equal(l, want) {
		t.Errorf("parsed %v, want %v", l, want)
	}
	for _, v := range []string{":2", "e.safetensors:NaN"} {
		if err := l.Set(v); err == nil {
			t.Errorf("Set(%q) accepted", v)
		}
	}
}

// TestGenerateLoRAExperts: on a two-expert folder --lora adapts the
// high-noise expert and --lora-2 the low-noise one, each while it
// denoises: each changes the video, differently, both together differ
// from either, a zero-B low-noise adapter changes nothing, the planner is
// told the low-noise adapters' bytes, and --lora-2 on a one-transformer
// folder is one line.
func TestGenerateLoRAExperts(t *testing.T) {
	moe := synthModel(t, "wan-tiny-moe")
	zero, _ := tinyLoRA(t, moe, "zero.safetensors", true)
	real, ads := tinyLoRA(t, moe, "real.safetensors", false)
	steps := []string{"--steps", "6"} // both experts run (the switch is mid-schedule)

	base, _ := generateVideo(t, moe, steps...)
	high, _ := generateVideo(t, moe, append(steps, "--lora", real)...)
	low, rep := generateVideo(t, moe, append(steps, "--lora-2", real)...)
	both, _ := generateVideo(t, moe, append(steps, "--lora", real, "--lora-2", real)...)
	same, _ := generateVideo(t, moe, append(steps, "--lora-2", zero)...)
	switch {
	case !slices.Equal(base, same):
		t.Error("a low-noise LoRA with B = 0 changed the video")
	case slices.Equal(base, high), slices.Equal(base, low):
		t.Error("a LoRA on one expert left the video unchanged")
	case slices.Equal(high, low):
		t.Error("the same LoRA on either expert gave the same video: it is not applied per expert")
	case slices.Equal(both, high), slices.Equal(both, low):
		t.Error("LoRAs on both experts gave the video of one")
	}
	pred, _ := rep["predicted"].(map[string]any)
	preq, _ := pred["request"].(map[string]any)
	want := pipewan.LoRABytes([]pipewan.LoRA{{Adapters: ads}})
	if got, _ := preq["adapter_bytes_2"].(float64); int64(got) != want || preq["adapter_bytes"] != nil {
		t.Errorf("planner request adapter_bytes %v, adapter_bytes_2 %v; want none and %d", preq["adapter_bytes"], preq["adapter_bytes_2"], want)
	}

	tiny := synthModel(t, "wan-tiny")
	code, _, stderr := ferry(t, "generate", "--model", tiny, "--prompt", "x", "--height", "32", "--width", "32",
		"--steps", "1", "--lora-2", real, "--out", filepath.Join(t.TempDir(), "v.png"))
	if lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n"); code != ExitUsage || len(lines) != 1 || !strings.Contains(stderr, "--lora-2") {
		t.Errorf("--lora-2 on one transformer: exit %d, stderr %q; want exit %d and one line naming --lora-2", code, stderr, ExitUsage)
	}
}

// TestGenerateLoRAPeaksPredicted: with a LoRA, every plan's measured peaks
// (device allocated and reserved, host) equal the predicted ones: the
// planner replays each adapter's intermediates (x·Aᵀ and the row blocks
// of its product) where model/wan makes them.
func TestGenerateLoRAPeaksPredicted(t *testing.T) {
	tiny := synthModel(t, "wan-tiny")
	real, _ := tinyLoRA(t, tiny, "real.safetensors", false)
	for _, c := range []struct{ plan, mem string }{
		{"auto", "6MiB"}, {"auto", ""}, {"resident", ""}, {"stream", ""}, {"onload", ""}, {"level3", ""}, {"sequential-offload", ""},
	} {
		args := []string{"--lora", real + ":0.5", "--plan", c.plan}
		if c.mem != "" {
			args = append(args, "--device-mem", c.mem)
		}
		_, rep := generateVideo(t, tiny, args...)
		m, _ := rep["measured"].(map[string]any)
		p, _ := rep["predicted"].(map[string]any)
		for _, k := range []string{"peak_device_bytes", "peak_device_reserved_bytes", "peak_host_bytes"} {
			if m[k] == nil || m[k] != p[k] {
				t.Errorf("plan %s, device budget %q: %s measured %v, predicted %v", c.plan, c.mem, k, m[k], p[k])
			}
		}
	}
}

// TestGenerateLoRADiffB: a LoRA file in the original Wan names carrying the
// bias differences (diff_b) and norm and weight differences of
// ComfyUI-style distillation LoRAs loads through `generate --lora` as
// diffusers loads it: with zero biases and a zero lora_up it gives the
// base video bit for bit (the differences diffusers drops are dropped),
// and a nonzero diff_b changes the video.
func TestGenerateLoRADiffB(t *testing.T) {
	tiny := synthModel(t, "wan-tiny")
	cfg, err := wan.ReadConfig(filepath.Join(tiny, "transformer"))
	if err != nil {
		t.Fatal(err)
	}
	_, shapes := cfg.LinearShapes()
	q, f2 := shapes["blocks.0.attn1.to_q"], shapes["blocks.0.ffn.net.2"]
	values := func(n int, v float32) []byte {
		data := make([]float32, n)
		for i := range data {
			data[i] = v
		}
		return tensor.FromF32(data, n).Raw()
	}
	write := func(name string, bias float32) string {
		dm := "diffusion_model.blocks.0."
		rts := []checkpoint.RawTensor{
			{Name: dm + "self_attn.q.lora_down.weight", DType: dtype.F32, Shape: []int{2, q[1]}, Data: values(2*q[1], 0.5)},
			{Name: dm + "self_attn.q.lora_up.weight", DType: dtype.F32, Shape: []int{q[0], 2}, Data: values(2*q[0], 0)},
			{Name: dm + "self_attn.q.alpha", DType: dtype.F32, Data: values(1, 2)},
			{Name: dm + "self_attn.q.diff_b", DType: dtype.F32, Shape: []int{q[0]}, Data: values(q[0], bias)},
			{Name: dm + "ffn.2.diff_b", DType: dtype.F32, Shape: []int{f2[0]}, Data: values(f2[0], bias)},
			{Name: dm + "norm3.diff", DType: dtype.F32, Shape: []int{q[0]}, Data: values(q[0], 1)},
			{Name: dm + "self_attn.k.diff", DType: dtype.F32, Shape: []int{q[0], q[1]}, Data: values(q[0]*q[1], 1)},
		}
		p := filepath.Join(t.TempDir(), name)
		if err := checkpoint.WriteFile(p, rts, nil); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base, _ := generateVideo(t, tiny)
	same, _ := generateVideo(t, tiny, "--lora", write("zero.safetensors", 0))
	if !slices.Equal(base, same) {
		t.Error("zero biases and a zero lora_up changed the video: a dropped difference was applied")
	}
	moved, _ := generateVideo(t, tiny, "--lora", write("moved.safetensors", 0.25))
	if slices.Equal(base, moved) {
		t.Error("nonzero diff_b biases left the video unchanged")
	}
}
