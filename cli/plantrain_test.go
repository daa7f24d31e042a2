package cli

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTrainReportPredicted: ferry train's report carries the planner's
// prediction beside what it measured, and the device peaks agree within
// 5%, with the knobs auto chose and with savings forced. (Streamed plans
// are compared in planner's TestTrainPeakMatchesStep, whose runner makes
// compute outlast the copies as the prediction assumes; here the tiny
// model's copies lag its compute.)
func TestTrainReportPredicted(t *testing.T) {
	cases := [][]string{
		nil,
		{"--checkpointing", "block", "--activation-tier", "host"},
		{"--checkpointing", "selective", "--ema-decay", "0.9", "--ema-tier", "device"},
	}
	for _, extra := range cases {
		t.Run(strings.Join(extra, " "), func(t *testing.T) {
			dir := t.TempDir()
			rep := filepath.Join(dir, "r.json")
			args := append([]string{"train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--dtype", "fp32",
				"--steps", "2", "--report", rep, "--out", filepath.Join(dir, "l.safetensors"), "--quiet"}, extra...)
			if code, _, stderr := ferry(t, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			r := readReport(t, rep)
			if r.Predicted == nil {
				t.Fatal("the report has no prediction")
			}
			m, p := r.Measured.PeakDeviceBytes, r.Predicted.PeakDeviceBytes
			t.Logf("device peak: predicted %d, measured %d; step predicted %.3f s, measured %.3f s", p, m, r.Predicted.StepS, r.Measured.MeanStepS)
			if d := float64(p-m) / float64(m); d > 0.05 || d < -0.05 {
				t.Errorf("predicted device peak %d, measured %d: off by %+.1f%%", p, m, 100*d)
			}
		})
	}
}

// TestPlanTrain: ferry plan --train prints the peaks, the step time and a
// line per saving; a budget nothing fits is one line naming the smallest.
func TestPlanTrain(t *testing.T) {
	code, out, stderr := ferry(t, "plan", "--train", "--arch", "wan2.1-t2v-1.3b", "--height", "256", "--width", "256", "--frames", "17",
		"--lora-rank", "32", "--device-mem", "8GiB", "--host-mem", "16GiB")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"1280 tokens", "device peak", "step", "activation checkpointing", "activation offload", "streamed weights"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = ferry(t, "plan", "--train", "--arch", "wan2.1-t2v-1.3b", "--height", "256", "--width", "256", "--frames", "17",
		"--device-mem", "200MiB", "--host-mem", "16GiB")
	if code == 0 {
		t.Fatalf("200 MiB fits?\n%s", out)
	}
	if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; lines != 1 || !strings.Contains(stderr, "smallest") {
		t.Errorf("nothing fits: want one line naming the smallest budgets, got %q", stderr)
	}
}

// FuzzBatchFlag: --batch-size takes a positive number or auto and
// nothing else, and a value it takes prints back the same.
func FuzzBatchFlag(f *testing.F) {
	for _, s := range []string{"1", "auto", "AUTO", "0", "-3", "12", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, auto := 7, false
		b := batchFlag{n: &n, auto: &auto}
		err := b.Set(s)
		switch {
		case err != nil && (n != 7 || auto):
			t.Fatalf("%q refused but changed the flag to %d/%v", s, n, auto)
		case err == nil && !auto && n <= 0:
			t.Fatalf("%q accepted as batch %d", s, n)
		case err == nil && auto && !strings.EqualFold(s, "auto"):
			t.Fatalf("%q accepted as auto", s)
		case err == nil && !auto && b.String() != strconv.Itoa(n):
			t.Fatalf("%q prints back as %q", s, b.String())
		}
	})
}
