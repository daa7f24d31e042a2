package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/pipeline/wan"
	"ferry/synth"
)

// ferry runs the CLI in-process and returns exit code, stdout and stderr.
func ferry(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// ferryJSON runs the CLI with args (a --json command) and decodes its
// output into v; a non-zero exit or output that is not v's JSON fails t.
func ferryJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	code, out, stderr := ferry(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

var (
	models   = map[string]string{}
	modelsMu sync.Mutex
	modelDir string
)

// synthModel synthesises an architecture once per test binary.
func synthModel(t *testing.T, arch string) string {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if dir, ok := models[arch]; ok {
		return dir
	}
	a, err := synth.Lookup(arch)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(modelDir, arch)
	if err := synth.Write(dir, a, synth.Options{Seed: 1, DType: dtype.BF16}); err != nil {
		t.Fatal(err)
	}
	models[arch] = dir
	return dir
}

// openWan opens the Wan pipeline folder dir, closed when the test ends.
func openWan(t *testing.T, dir string) *wan.Pipeline {
	t.Helper()
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p, err := wan.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-cli-test-*")
	if err != nil {
		panic(err)
	}
	modelDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestUserErrors drives the CLI through every user error: each is one line
// on stderr naming the problem and the fix, exit code 2, and no output file.
func TestUserErrors(t *testing.T) {
	syn := synthModel(t, "synthetic")
	tiny := synthModel(t, "wan-tiny")
	notLayout := t.TempDir()
	os.WriteFile(filepath.Join(notLayout, "weights.safetensors"), []byte("x"), 0o644)
	out := func(name string) string { return filepath.Join(t.TempDir(), name) }
	for _, tc := range []struct {
		name string
		args []string
		want string // in the message
	}{
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{"generate", "--modle", syn}, "flag provided but not defined"},
		{"missing path", []string{"generate", "--model", "/nonexistent/model", "--prompt", "x", "--out", out("a.png")}, "no such folder"},
		{"not a diffusers folder", []string{"generate", "--model", notLayout, "--prompt", "x", "--out", out("a.png")}, "model_index.json"},
		{"unknown architecture", []string{"synth", "--arch", "sdxl", "--out", out("m")}, "unknown architecture"},
		{"bad size", []string{"generate", "--model", syn, "--prompt", "x", "--device-mem", "12XB", "--out", out("a.png")}, "bad size"},
		{"unknown preset", []string{"generate", "--model", syn, "--prompt", "x", "--plan", "turbo", "--out", out("a.png")}, "unknown plan"},
		{"bad plan file", []string{"generate", "--model", syn, "--prompt", "x", "--plan", writeFile(t, "p.yaml", "components: {transformer: {placement: teleport}}"), "--out", out("a.png")}, "unknown placement"},
		{"invalid size", []string{"generate", "--model", tiny, "--prompt", "x", "--frames", "5", "--height", "30", "--width", "32", "--out", out("a.gif")}, "nearest valid: 32x32"},
		{"budget too small", []string{"generate", "--model", syn, "--prompt", "x", "--plan", "stream", "--device-mem", "64KiB", "--out", out("a.png")}, "budget"},
		{"unsupported extension", []string{"generate", "--model", syn, "--prompt", "x", "--out", out("a.webm")}, "unknown output extension"},
		{"png for many frames", []string{"generate", "--model", tiny, "--prompt", "x", "--frames", "5", "--height", "32", "--width", "32", "--out", out("a.png")}, "folder path ending in /"},
		{"missing output folder", []string{"generate", "--model", syn, "--prompt", "x", "--out", "/nonexistent/dir/a.png"}, "output directory"},
		{"guidance not a number", []string{"generate", "--model", tiny, "--prompt", "x", "--guidance", "NaN", "--out", out("a.gif")}, "want a number"},
		{"strength infinite", []string{"generate", "--model", tiny, "--prompt", "x", "--strength", "Inf", "--out", out("a.gif")}, "want a number"},
		{"latents of the wrong shape", []string{"generate", "--model", tiny, "--prompt", "x", "--latents", latentsFile(t, 1, 4, 2, 4, 4), "--out", out("a.gif")}, "latents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := ferry(t, tc.args...)
			if code != ExitUsage {
				t.Errorf("exit code %d, want %d; stderr %q", code, ExitUsage, stderr)
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", len(lines), stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", stderr, tc.want)
			}
			if strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
				t.Errorf("stack trace on stderr: %q", stderr)
			}
		})
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGenerateSynthetic runs the synthetic pipeline end to end through the
// CLI and checks the output and report exist and nothing else is left.
func TestGenerateSynthetic(t *testing.T) {
	dir := t.TempDir()
	png, rep := filepath.Join(dir, "a.png"), filepath.Join(dir, "r.json")
	code, _, stderr := ferry(t, "generate", "--model", synthModel(t, "synthetic"), "--prompt", "a boat",
		"--height", "16", "--width", "16", "--steps", "2", "--plan", "stream", "--out", png, "--report", rep, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if names := dirNames(t, dir); names != "a.png,r.json" {
		t.Errorf("output folder holds %s", names)
	}
}

// dirNames is the names in dir, sorted and joined by commas.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// latentsFile writes a zero "latents" tensor of the given shape.
func latentsFile(t *testing.T, shape ...int) string {
	t.Helper()
	n := 1
	for _, d := range shape {
		n *= d
	}
	p := filepath.Join(t.TempDir(), "latents.safetensors")
	raw := checkpoint.RawTensor{Name: "latents", DType: dtype.F32, Shape: shape, Data: make([]byte, 4*n)}
	if err := checkpoint.WriteFile(p, []checkpoint.RawTensor{raw}, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInterrupt: a cancelled run (Ctrl-C) exits 130 and writes nothing.
func TestInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"generate", "--model", synthModel(t, "synthetic"), "--prompt", "x", "--height", "16", "--width", "16",
		"--out", filepath.Join(dir, "a.png"), "--report", filepath.Join(dir, "r.json")}, &out, &errb)
	if code != ExitInterrupt {
		t.Errorf("exit %d, want %d; stderr %q", code, ExitInterrupt, errb.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("interrupted run left %d files", len(entries))
	}
}

func TestInspect(t *testing.T) {
	code, out, stderr := ferry(t, "inspect", "--model", synthModel(t, "wan-tiny"))
	if code != 0 || !strings.Contains(out, "complete") || !strings.Contains(out, "largest block") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = ferry(t, "inspect", "--model", "wan2.1-t2v-14b", "--json")
	if code != 0 || !strings.Contains(out, `"largest_block"`) {
		t.Errorf("builtin inspect: exit %d, %q", code, out)
	}
	code, _, stderr = ferry(t, "inspect", "--model", "no-such-model")
	if code != ExitUsage || !strings.Contains(stderr, "not a built-in architecture") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
