package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/trace"
)

// TestTrainPlansKeepTheGoldenLoRA trains the golden LoRA under streamed
// plans: the saved LoRA is byte for byte the resident run's, the report
// splits the streaming figures by pass, and --trace writes both passes.
func TestTrainPlansKeepTheGoldenLoRA(t *testing.T) {
	dir := t.TempDir()
	run := func(plan string) (string, trainReport, string) {
		out, rep, tr := filepath.Join(dir, plan+".safetensors"), filepath.Join(dir, plan+".json"), filepath.Join(dir, plan+".trace.json")
		code, _, stderr := ferry(t, "train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--lora-rank", "4",
			"--dtype", "fp32", "--steps", "2", "--plan", plan, "--report", rep, "--trace", tr, "--out", out, "--quiet")
		if code != 0 {
			t.Fatalf("--plan %s: exit %d: %s", plan, code, stderr)
		}
		return out, readReport(t, rep), tr
	}
	refOut, refRep, _ := run("resident")
	if refRep.Streaming.Placement != "resident" {
		t.Errorf("resident run reports placement %q", refRep.Streaming.Placement)
	}
	want, err := os.ReadFile(refOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, plan := range []string{"stream", "stream-disk", "sequential-offload"} {
		out, rep, tr := run(plan)
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("--plan %s: the LoRA differs from the resident run's", plan)
		}
		s := rep.Streaming
		if !strings.HasPrefix(s.Placement, "stream") || s.Forward.Loads == 0 || s.Backward.Loads == 0 {
			t.Errorf("--plan %s: placement %q, loads forward %d backward %d", plan, s.Placement, s.Forward.Loads, s.Backward.Loads)
		}
		if s.Forward.Loads+s.Backward.Loads != s.Loads || s.Forward.CopyS <= 0 || s.Backward.CopyS <= 0 {
			t.Errorf("--plan %s: streaming figures do not add up: %+v", plan, s)
		}
		raw, err := os.ReadFile(tr)
		if err != nil {
			t.Fatal(err)
		}
		c, err := trace.ReadChrome(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("--trace: %v", err)
		}
		phases := map[string]int{}
		copies := 0
		for _, sp := range c.Spans {
			switch sp.Kind {
			case trace.Phase:
				phases[sp.Name]++
			case trace.Copy:
				copies++
			}
		}
		if phases["forward"] != 2 || phases["backward"] != 2 || copies != s.Loads {
			t.Errorf("--plan %s: trace has phases %v and %d copies, want 2 forward, 2 backward and %d", plan, phases, copies, s.Loads)
		}
	}
}

func TestTrainPlanErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--plan", "no-such-plan"}, "no-such-plan"},
		{[]string{"--plan", "vram-limit"}, "inference request"},
		{[]string{"--plan", "stream", "--device-mem", "16KiB"}, "raise the budget"},
	}
	for _, tc := range cases {
		args := append([]string{"train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--steps", "1",
			"--out", filepath.Join(dir, "x.safetensors"), "--quiet"}, tc.args...)
		code, _, stderr := ferry(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}
