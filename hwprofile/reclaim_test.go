package hwprofile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMeasureReclaimSmall runs the reclaim probe at its test size over a
// folder with enough files: it reads them, touches fresh pages and says
// which folder it evicted.
func TestMeasureReclaimSmall(t *testing.T) {
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
	us, note, err := MeasureReclaim(ReclaimOptions{Dir: dir, Small: true})
	if err != nil {
		t.Fatal(err)
	}
	if !(us > 0) || !strings.Contains(note, dir) {
		t.Fatalf("figure %g µs, note %q: want a positive figure and a note naming %s", us, note, dir)
	}
}

// TestMeasureReclaimRefuses: a folder too small to evict from, an empty one
// and a missing one each get an error that says what is wrong.
func TestMeasureReclaimRefuses(t *testing.T) {
	small := t.TempDir()
	if err := os.WriteFile(filepath.Join(small, "a.safetensors"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{small, "bigger checkpoint folder"},
		{t.TempDir(), "holds no files"},
		{filepath.Join(small, "missing"), "no such file"},
	} {
		_, _, err := MeasureReclaim(ReclaimOptions{Dir: c.dir, Small: true})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line saying %q", c.dir, err, c.want)
		}
	}
}
