package hwprofile

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "hardware.json")
	p := Default()
	p.Source, p.CPU = "measured", "test cpu"
	p.Gemm = append(p.Gemm, GemmRate{Name: "x", GFLOPS: 7, Shapes: []ShapeRate{{M: 1, N: 2, K: 3, GFLOPS: 7}}})
	p.GPU = []GPU{{Name: "none yet", MemoryBytes: 1}}
	if err := Save(p, path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip changed the profile:\n got %+v\nwant %+v", got, p)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	if len(left) != 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
}

func TestLoadOrDefault(t *testing.T) {
	dir := t.TempDir()
	p, found, err := LoadOrDefault(filepath.Join(dir, "missing.json"))
	if err != nil || found || p.Source != "default" {
		t.Fatalf("missing file: got %v found=%v err=%v, want the default", p.Source, found, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrDefault(bad); err == nil {
		t.Fatal("a broken file loaded without error")
	}
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, []byte(`{"version": 0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(old); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("old version: err %v, want a version error", err)
	}
}

func TestSet(t *testing.T) {
	tests := []struct {
		name    string
		value   float64
		check   func(p Profile) float64
		wantErr string
	}{
		{"disk-gbps", 1.25, func(p Profile) float64 { return p.DiskGBps }, ""},
		{"--h2d-gbps", 3, func(p Profile) float64 { return p.H2DGBps }, ""},
		{"gemm-gflops", 123, func(p Profile) float64 { return p.GEMMGFLOPS("") }, ""},
		{"attention-gflops", 9, func(p Profile) float64 { return p.AttentionGFLOPS }, ""},
		{"copy-overlap", 0, func(p Profile) float64 { return p.CopyOverlap }, ""},
		{"copy-overlap", 2, nil, "within"},
		{"disk-cpu", 0, func(p Profile) float64 { return p.DiskCPU }, ""},
		{"disk-cpu", 1.5, nil, "within"},
		{"page-cache-gbps", 9, func(p Profile) float64 { return p.PageCacheGBps }, ""},
		{"disk-gbps", -1, nil, "> 0"},
		{"warp-speed", 1, nil, "have"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Default()
			p.DiskSuspect = true
			err := p.Set(tc.name, tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.check(p); got != tc.value {
				t.Fatalf("after Set got %g, want %g", got, tc.value)
			}
			if !strings.HasSuffix(p.Source, "+override") {
				t.Fatalf("source %q does not record the override", p.Source)
			}
			if tc.name == "disk-gbps" && p.DiskSuspect {
				t.Fatal("an explicit disk figure is still marked suspect")
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidateRejectsZero(t *testing.T) {
	p := Default()
	p.H2DGBps = 0
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "h2d-gbps") {
		t.Fatalf("err %v, want one naming h2d-gbps", err)
	}
}

func TestMeasureSmall(t *testing.T) {
	p, err := Measure(Options{Small: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/meminfo"); err == nil && p.MemoryBytes <= 0 {
		t.Errorf("memory %d bytes on a machine with /proc/meminfo", p.MemoryBytes)
	}
	if p.Source != "measured" || p.MeasuredAt == "" || len(p.Gemm) == 0 {
		t.Fatalf("profile %+v lacks measured fields", p)
	}
	for _, g := range p.Gemm {
		if !(g.GFLOPS > 0) || len(g.Shapes) == 0 {
			t.Fatalf("gemm %s: %+v", g.Name, g)
		}
	}
	for name, v := range map[string]float64{"attention": p.AttentionGFLOPS, "conv": p.ConvGFLOPS, "conv wide": p.ConvWideGFLOPS, "conv mid": p.ConvMidGFLOPS, "conv small": p.ConvSmallGFLOPS, "mem": p.MemGBps, "op overhead": p.OpOverheadUs,
		"h2d": p.H2DGBps, "h2d f32": p.H2DF32GBps, "disk": p.DiskGBps, "first touch": p.FirstTouchUsPerPage} {
		if !(v > 0) {
			t.Errorf("%s = %g, want > 0", name, v)
		}
	}
	if kernel := gemm.DefaultGo().Kernel(); (kernel == "portable") != (p.FMAPeakGFLOPS == 0) || (p.FMAPeakGFLOPS > 0 && p.FMAPeakISA != kernel) {
		t.Errorf("FMA peak %g GFLOP/s measured for %q; the Go GEMM runs the %s kernel", p.FMAPeakGFLOPS, p.FMAPeakISA, kernel)
	}
	if p.DiskSuspect != (p.DiskMeasuredGBps > SuspectDiskGBps) && p.DiskNote == "" {
		t.Errorf("disk suspect flag %v does not match the measured %g GB/s", p.DiskSuspect, p.DiskMeasuredGBps)
	}
	if p.FragmentTouchUsPerPage < 0 {
		t.Errorf("fragment touch %g µs, want >= 0 (0: not measured)", p.FragmentTouchUsPerPage)
	}
	if p.DiskSuspect && p.DiskGBps != Default().DiskGBps {
		t.Errorf("suspect disk figure kept: %g", p.DiskGBps)
	}
}

// TestLoadFillsNewFigures loads a profile saved before page_cache_gbps,
// disk_cpu and conv_wide_gflops existed: they take their defaults (the
// last scaled from the file's conv_gflops) instead of failing validation.
func TestLoadFillsNewFigures(t *testing.T) {
	data, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "page_cache_gbps")
	delete(m, "disk_cpu")
	delete(m, "conv_wide_gflops")
	m["h2d_gbps"] = 12.5
	m["conv_gflops"] = 240.0
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hardware.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if p.PageCacheGBps != d.PageCacheGBps || p.DiskCPU != d.DiskCPU || p.H2DGBps != 12.5 {
		t.Errorf("loaded page cache %g, disk cpu %g, h2d %g; want %g, %g (defaults) and 12.5 (from the file)",
			p.PageCacheGBps, p.DiskCPU, p.H2DGBps, d.PageCacheGBps, d.DiskCPU)
	}
	// A missing wide-convolution rate follows the file's measured
	// 96-channel rate, not the uncalibrated default.
	if want := 240 * d.ConvWideGFLOPS / d.ConvGFLOPS; math.Abs(p.ConvWideGFLOPS-want) > 1e-9 {
		t.Errorf("loaded conv wide %g, want %g (conv 240 scaled as the defaults)", p.ConvWideGFLOPS, want)
	}
}

// TestUseCheckpointRead takes a rate measured on the checkpoint only from
// a read long enough to trust, and --disk-gbps set after it wins.
func TestUseCheckpointRead(t *testing.T) {
	p := Default()
	p.DiskSuspect = true
	p.UseCheckpointRead(MinDiskProbeBytes-1, 3, true)
	if p.DiskGBps != Default().DiskGBps || !p.DiskSuspect {
		t.Fatalf("a read of %d bytes replaced the disk figure: %g GB/s", MinDiskProbeBytes-1, p.DiskGBps)
	}
	p.UseCheckpointRead(64<<20, 3, true)
	if p.DiskGBps != 3 || p.DiskSuspect || !strings.Contains(p.DiskNote, "64 MiB of the checkpoint") || !strings.Contains(p.DiskNote, "bypassing") {
		t.Fatalf("after a 64 MiB read at 3 GB/s: %g GB/s, suspect %v, note %q", p.DiskGBps, p.DiskSuspect, p.DiskNote)
	}
	if err := p.Set("disk-gbps", 0.5); err != nil || p.DiskGBps != 0.5 {
		t.Fatalf("--disk-gbps after the probe: %g GB/s, %v", p.DiskGBps, err)
	}
}

// TestReadMemory: one reading of /proc/meminfo holds consistent figures.
func TestReadMemory(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo here")
	}
	m := ReadMemory()
	if m.Total <= 0 || m.Free <= 0 || m.Free > m.Total || m.Available < m.Free || m.Available > m.Total || m.FileCache < 0 || m.FileCache > m.Total {
		t.Fatalf("%+v: want 0 < free <= available <= total and 0 <= file cache <= total", m)
	}
	// Fragments are free memory; the two files are read a moment apart,
	// so allow what a busy machine frees meanwhile.
	if frag := cpu.FragmentedFree(); frag < 0 || frag > m.Free+64<<20 {
		t.Errorf("fragmented %d bytes, free %d: want 0 <= fragmented <= free", frag, m.Free)
	}
	if MemoryBytes() != m.Total {
		t.Errorf("MemoryBytes %d, want MemTotal %d", MemoryBytes(), m.Total)
	}
}

func TestSmallPagesFirst(t *testing.T) {
	for _, tc := range []struct {
		first, fragment float64
		want            bool
	}{
		{8, 0, false},     // not measured
		{8, 1.3, true},    // the reference VM
		{8, 4, false},     // not cheaper by half
		{0.4, 0.3, false}, // bare metal: huge pages as cheap
	} {
		p := Default()
		p.FirstTouchUsPerPage, p.FragmentTouchUsPerPage = tc.first, tc.fragment
		if got := p.SmallPagesFirst(); got != tc.want {
			t.Errorf("first touch %g µs, fragments %g µs: SmallPagesFirst %v, want %v", tc.first, tc.fragment, got, tc.want)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("fragments %g: %v", tc.fragment, err)
		}
	}
}
