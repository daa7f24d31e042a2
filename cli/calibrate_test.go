package cli

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"ferry/backend/cpu"
	"ferry/hwprofile"
)

// TestCalibrateRecordsMachine: the saved profile says which machine it
// was measured on (model, ISA flags, cores, the kernels that ran), which
// is what later commands check before using it, and the text output
// names it.
func TestCalibrateRecordsMachine(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	var c struct {
		Machine *hwprofile.Machine `json:"machine"`
	}
	ferryJSON(t, &c, "calibrate", "--quick", "--json")
	here := hwprofile.ThisMachine()
	if c.Machine == nil || c.Machine.Kernels != cpu.KernelISA() || c.Machine.Model != here.Model || c.Machine.Cores != here.Cores {
		t.Fatalf("machine %+v, want this one: %+v", c.Machine, here)
	}
	p, found, err := hwprofile.LoadOrDefault("")
	if err != nil || !found || p.Note != "" {
		t.Fatalf("the profile just measured: found %v, note %q, err %v; want it used silently", found, p.Note, err)
	}
}

// TestHardwareNote: the profile's note is printed once, as one line.
func TestHardwareNote(t *testing.T) {
	var once sync.Once
	var buf bytes.Buffer
	p := hwprofile.Profile{Note: "hardware profile x: measured on another machine"}
	writeHardwareNote(&buf, p, &once)
	writeHardwareNote(&buf, p, &once)
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "ferry: note: hardware profile x") {
		t.Fatalf("printed %q, want the note once", got)
	}
}
