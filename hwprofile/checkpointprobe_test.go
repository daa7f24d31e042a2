package hwprofile

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMeasureCheckpointSmall runs the checkpoint probes at their test size
// over a folder with enough files: they read them, touch fresh pages and
// say which folder they read.
func TestMeasureCheckpointSmall(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.safetensors"), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "b.safetensors"), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := MeasureCheckpoint(CheckpointOptions{Dir: dir, Small: true})
	if err != nil {
		t.Fatal(err)
	}
	if !(f.ReclaimUsPerPage > 0) || f.SustainedGBps < 0 || f.BurstGB < 0 || !strings.Contains(f.Note, dir) {
		t.Fatalf("figures %+v: want a positive touch figure and a note naming %s", f, dir)
	}
}

// TestMeasureCheckpointRefuses: a folder too small to read, an empty one
// and a missing one each get an error that says what is wrong, and so does
// the check calibrate makes before its other probes.
func TestMeasureCheckpointRefuses(t *testing.T) {
	small := t.TempDir()
	if err := os.WriteFile(filepath.Join(small, "a.safetensors"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{small, "bigger checkpoint folder"},
		{t.TempDir(), "holds no files"},
		{filepath.Join(small, "missing"), "no such file"},
	} {
		_, err := MeasureCheckpoint(CheckpointOptions{Dir: c.dir, Small: true})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line saying %q", c.dir, err, c.want)
		}
		if err := CheckCheckpointDir(c.dir, true); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check %s: error %v, want %q", c.dir, err, c.want)
		}
	}
}

// TestSustainedRate: the rate of the read's second half, and the burst
// that explains the rest of its time at the first window's rate.
func TestSustainedRate(t *testing.T) {
	const mb = 1e6
	w := func(mbs, seconds float64) window { return window{bytes: int64(mbs * mb), seconds: seconds} }
	for _, c := range []struct {
		name        string
		ws          []window
		gbps, burst float64
	}{
		// 400 MB at 2 GB/s, then 1.2 GB at 0.5: the first window is all burst.
		{"burst", []window{w(400, 0.2), w(400, 0.8), w(400, 0.8), w(400, 0.8)}, 0.5, 0.4},
		// A window half burst, half throttled (200 MB at 2 GB/s, 200 at 0.5):
		// the read's time is that of 400 MB at the first window's 0.8 GB/s.
		{"burst inside a window", []window{w(400, 0.5), w(400, 0.8), w(400, 0.8), w(400, 0.8)}, 0.5, 0.4},
		{"steady", []window{w(400, 0.4), w(400, 0.4), w(400, 0.4), w(400, 0.4)}, 1, 0},
		{"nothing timed", nil, 0, 0},
	} {
		gbps, burst := sustainedRate(c.ws)
		if math.Abs(gbps-c.gbps) > 1e-9 || math.Abs(burst-c.burst) > 1e-9 {
			t.Errorf("%s: %.4g GB/s after %.4g GB, want %.4g after %.4g", c.name, gbps, burst, c.gbps, c.burst)
		}
	}
}
