package cli

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/model/modeltest"
)

// TestTrainKnobsKeepTheGoldenLoRA: the golden LoRA run (fp32, two steps
// with EMA) writes the same LoRA and EMA, bit for bit, under every
// checkpointing mode, with the activations on the host and the EMA on the
// device; the report accounts for what each knob kept and freed.
func TestTrainKnobsKeepTheGoldenLoRA(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, knobs ...string) (string, trainReport) {
		t.Helper()
		out, rep := filepath.Join(dir, name+".safetensors"), filepath.Join(dir, name+".json")
		args := append([]string{"train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--dtype", "fp32",
			"--lora-rank", "4", "--lora-alpha", "8", "--lora-init", filepath.Join(trainGolden, "lora_init.safetensors"),
			"--steps", "2", "--lr", "1e-3", "--ema-decay", "0.9", "--report", rep, "--out", out, "--quiet"}, knobs...)
		code, _, stderr := ferry(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		return out, readReport(t, rep)
	}
	base, baseRep := run("base")
	tot := baseRep.Memory.TapeTotal
	if tot.Saved <= 0 || tot.Kept != tot.Saved || baseRep.Memory.CheckpointingFreedBytes != 0 {
		t.Errorf("checkpointing none: tape %+v, freed %d", tot, baseRep.Memory.CheckpointingFreedBytes)
	}
	trainable := 4 * baseRep.TrainableParams // float32
	if baseRep.Memory.EMAHostFreedBytes != trainable {
		t.Errorf("EMA on the host frees %d bytes, want the trainable bytes %d", baseRep.Memory.EMAHostFreedBytes, trainable)
	}
	if a := baseRep.Memory.AttentionWeightsComputed; a.Self <= 0 || a.Tape != 2*(a.Self+a.Cross) {
		t.Errorf("attention weights avoided: %+v", a)
	}
	for _, c := range []struct {
		name  string
		knobs []string
	}{
		{"block", []string{"--checkpointing", "block"}},
		{"selective-host", []string{"--checkpointing", "selective", "--activation-tier", "host"}},
		{"none-host-ema-device", []string{"--activation-tier", "host", "--ema-tier", "device"}},
	} {
		out, rep := run(c.name, c.knobs...)
		for _, p := range [][2]string{{base, out}, {emaPath(base), emaPath(out)}} {
			if !lorasEqual(t, p[0], p[1]) {
				t.Errorf("%s: %s differs from the default knobs' run", c.name, filepath.Base(p[1]))
			}
		}
		m := rep.Memory
		if m.TapeTotal.Saved != tot.Saved || m.CheckpointingFreedBytes != m.TapeTotal.Saved-m.TapeTotal.Kept {
			t.Errorf("%s: tape %+v, freed %d", c.name, m.TapeTotal, m.CheckpointingFreedBytes)
		}
		if slices.Contains(c.knobs, "block") && m.TapeTotal.Kept != 0 {
			t.Errorf("%s: block checkpointing kept %d bytes besides the inputs", c.name, m.TapeTotal.Kept)
		}
		if slices.Contains(c.knobs, "host") && (m.ActivationsOnHost == nil || m.ActivationsOnHost.ToHostBytes == 0) {
			t.Errorf("%s: nothing went to the host: %+v", c.name, m.ActivationsOnHost)
		}
		if slices.Contains(c.knobs, "--ema-tier") && m.EMADeviceBytes != trainable {
			t.Errorf("%s: the EMA takes %d device bytes, want the trainable bytes %d", c.name, m.EMADeviceBytes, trainable)
		}
	}
}

// TestTrainKnobErrors: a bad knob is one line naming the flag.
func TestTrainKnobErrors(t *testing.T) {
	dir := t.TempDir()
	base := []string{"train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--out", filepath.Join(dir, "x.safetensors"), "--steps", "1"}
	for _, c := range [][2]string{
		{"--checkpointing", "some"}, {"--dtype", "fp16"}, {"--activation-tier", "disk"}, {"--ema-tier", "gpu"},
	} {
		code, _, stderr := ferry(t, append(slices.Clone(base), c[0], c[1])...)
		if code != 2 || !strings.Contains(stderr, c[0]) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%s %s: exit %d, %q", c[0], c[1], code, stderr)
		}
	}
}

// TestTrainBF16Full: full fine-tuning with --dtype bf16 on the golden
// batch (bf16 GEMM weights on the device, bf16 saved activations) gives a
// loss within 1% of the fp32 reference, and the report counts the bytes
// the bf16 tape saved: about half of what it kept.
func TestTrainBF16Full(t *testing.T) {
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	code, _, stderr := ferry(t, "train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--full", "--dtype", "bf16",
		"--steps", "1", "--report", rep, "--out", filepath.Join(dir, "full.safetensors"), "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := readReport(t, rep)
	ref := openSet(t, filepath.Join(trainGolden, "outputs_full.safetensors"))
	want, _ := modeltest.TensorOf(t, ref, "loss")
	if len(r.Steps) != 1 || math.Abs(float64(r.Steps[0].Loss-want[0])) > 1e-2*math.Abs(float64(want[0])) {
		t.Errorf("bf16 loss %v, fp32 reference %g (within 1%%)", r.Steps, want[0])
	}
	m := r.Memory
	if r.Request.DType != "bf16" || m.BF16FreedBytes <= m.TapeTotal.Kept/3 || m.BF16FreedBytes >= m.TapeTotal.Kept/2 {
		t.Errorf("dtype %s: bf16 freed %d bytes of the %d kept", r.Request.DType, m.BF16FreedBytes, m.TapeTotal.Kept)
	}
}

// TestTrainKnobsWanTiny: five LoRA steps of wan-tiny on a cache (batch 2,
// EMA) end with the same LoRA and EMA bit for bit with and without
// checkpointing and with the activations offloaded to the host (fp32).
func TestTrainKnobsWanTiny(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	tinyCache(t, cache)
	run := func(name string, knobs ...string) string {
		out := filepath.Join(dir, name+".safetensors")
		args := append([]string{"train", "--model", model, "--data", cache, "--batch-size", "2", "--out", out, "--steps", "5",
			"--lora-rank", "4", "--lr", "1e-3", "--ema-decay", "0.5", "--seed", "4", "--dtype", "fp32", "--quiet"}, knobs...)
		if code, _, stderr := ferry(t, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		return out
	}
	base := run("base")
	for name, knobs := range map[string][]string{
		"block-host":     {"--checkpointing", "block", "--activation-tier", "host"},
		"selective":      {"--checkpointing", "selective", "--ema-tier", "device"},
		"none-host":      {"--activation-tier", "host"},
		"selective-host": {"--checkpointing", "selective", "--activation-tier", "host"},
	} {
		out := run(name, knobs...)
		if !lorasEqual(t, base, out) || !lorasEqual(t, emaPath(base), emaPath(out)) {
			t.Errorf("%s: the LoRA or its EMA differs from checkpointing none on the device", name)
		}
	}
}
