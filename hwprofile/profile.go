// Package hwprofile measures how fast this machine moves and computes what
// a diffusion pipeline moves and computes, and stores the result.
//
// The planner turns a model profile (bytes and FLOPs per block) into
// predicted time with these figures: GEMM GFLOP/s per implementation,
// attention and convolution throughput, the host->device copy-and-cast
// bandwidth (on the CPU backend the bf16->f32 upcast), the cost of touching
// fresh pages, disk read bandwidth and how much of a copy hides behind
// compute. Measure takes them (in well under 20 s), Save and Load keep them
// as JSON under the user's config directory, Set overrides one figure by
// its flag name, and Default is what the planner uses when nothing was
// measured.
package hwprofile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"ferry/backend/cpu/gemm"
)

// Version is the layout version of the stored JSON.
const Version = 1

// Profile is one machine's figures. Bandwidths are in GB/s (1e9 bytes per
// second), throughputs in GFLOP/s (1e9 floating-point operations per
// second).
type Profile struct {
	Version int `json:"version"`
	// Source says where the figures come from: "default", "measured", with
	// "+override" appended once a figure was overridden.
	Source     string `json:"source"`
	MeasuredAt string `json:"measured_at,omitempty"` // RFC 3339
	CPU        string `json:"cpu,omitempty"`
	Cores      int    `json:"cores"`
	// Machine is the machine the figures were measured on; LoadOrDefault
	// uses them only on the same kind (nil: a profile written before it
	// was recorded, or the defaults).
	Machine *Machine `json:"machine,omitempty"`
	// Note is the one line LoadOrDefault has for the user about where the
	// figures come from (a profile of another machine set aside, or one
	// that does not say which machine it is from); "" when there is
	// nothing to say. Not stored.
	Note string `json:"-"`
	// MemoryBytes is the machine's RAM (MemTotal), 0 when unknown. On the
	// CPU backend the device and host budgets both come out of it.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`

	// Gemm holds one entry per GEMM implementation measured, fastest first.
	Gemm []GemmRate `json:"gemm"`
	// GemmDefault names the implementation the runtime uses by default
	// (gemm.Best); GEMMGFLOPS without a name returns its rate.
	GemmDefault string `json:"gemm_default"`
	// FMAPeakGFLOPS is the fp32 FMA peak of the instruction set the Go
	// GEMM's kernel uses (FMAPeakISA), on all its threads: a register-only
	// loop (gemm.FMAPeak), the ceiling its rates are judged against. Not
	// used by the planner; 0 where not measured.
	FMAPeakGFLOPS float64 `json:"fma_peak_gflops,omitempty"`
	FMAPeakISA    string  `json:"fma_peak_isa,omitempty"`

	// AttentionGFLOPS counts 4·Lq·Lk·D flops per (batch, head).
	AttentionGFLOPS float64 `json:"attention_gflops"`
	// AttentionSmallGFLOPS is the same at head dimension 32 (128 above).
	// The planner interpolates between the two in log2 of the head size.
	AttentionSmallGFLOPS float64 `json:"attention_small_gflops"`
	// ConvGFLOPS counts 2·O·C·kernel·positions flops of a convolution
	// whose reduction (C·kernel) is large (96 channels, 3×3×3: 2592);
	// ConvWideGFLOPS of one of 384 channels (10368), ConvMidGFLOPS and
	// ConvSmallGFLOPS of 32 and 8 channels (864, 216), where the GEMM under
	// the convolution is far less efficient. The planner interpolates
	// between them in log2 of the reduction.
	ConvGFLOPS      float64 `json:"conv_gflops"`
	ConvWideGFLOPS  float64 `json:"conv_wide_gflops"`
	ConvMidGFLOPS   float64 `json:"conv_mid_gflops"`
	ConvSmallGFLOPS float64 `json:"conv_small_gflops"`
	// ConvPanel is how many output channels the GEMM under a convolution
	// computes at once (the Go GEMM's panel width, 32 with AVX-512; 1
	// where another GEMM runs them): a convolution with fewer, or a
	// remainder, pays for the whole panel. The 8-channel probe above paid
	// for 32 with AVX-512, and the VAE's last convolution, 3 channels out
	// of 16, ran at a tenth of the rate of its 16-channel neighbours.
	// Not measured: a property of the code this machine runs.
	ConvPanel int `json:"conv_panel"`
	// MemGBps is the elementwise streaming rate (bytes read plus written)
	// of norms, adds and activations.
	MemGBps float64 `json:"mem_gbps"`
	// OpOverheadUs is the fixed cost of one kernel call (dispatch to the
	// thread pool, allocation), in microseconds: what dominates small
	// shapes.
	OpOverheadUs float64 `json:"op_overhead_us"`

	// H2DGBps is the host->device copy of bf16 weights into float32 device
	// tensors, in device (output) bytes per second.
	H2DGBps float64 `json:"h2d_gbps"`
	// H2DF32GBps is the same for float32 storage (a plain copy).
	H2DF32GBps float64 `json:"h2d_f32_gbps"`
	// FirstTouchUsPerPage is the extra cost of writing a fresh 4 KiB page
	// of newly reserved device memory, in microseconds, measured cold
	// (memory the OS has not handed out in the last seconds: on a VM that
	// reports free pages to its host, the host faults it in again).
	FirstTouchUsPerPage float64 `json:"first_touch_us_per_page"`
	// WarmTouchUsPerPage is the first touch of a fresh page where the
	// process gave the memory back moments before (a device segment
	// unmapped under a budget, then mapped again): the host still backs
	// it, and only the kernel's fault and zeroing remain (0.17 µs here
	// against 8.7 cold).
	WarmTouchUsPerPage float64 `json:"warm_touch_us_per_page"`
	// ReclaimTouchUsPerPage is the first touch of a fresh page when the
	// kernel has no free memory left and must evict page cache for it.
	// Measured only when asked (`ferry calibrate --checkpoint DIR`, see
	// MeasureCheckpoint; CheckpointNote then says how). The default is of
	// the order measured on the reference VM, 0.5-1.6 µs per page, far
	// below a cold first touch there, because evicted pages are pages the
	// host already backs.
	ReclaimTouchUsPerPage float64 `json:"reclaim_touch_us_per_page"`
	// FragmentTouchUsPerPage is the first touch of a 4 KiB page out of the
	// kernel's free memory too fragmented for huge pages
	// (cpu.FragmentedFree): 1.3 µs on the reference VM, whose host backs
	// those fragments but not the free huge-page blocks its balloon
	// reported. 0: not measured (too few fragments when calibrating).
	FragmentTouchUsPerPage float64 `json:"fragment_touch_us_per_page,omitempty"`

	// DiskGBps is the figure used for reads from checkpoints. When the
	// measurement was served from the page cache (DiskSuspect) it holds a
	// conservative default and DiskMeasuredGBps the suspect figure.
	DiskGBps         float64 `json:"disk_gbps"`
	DiskMeasuredGBps float64 `json:"disk_measured_gbps,omitempty"`
	DiskSuspect      bool    `json:"disk_suspect,omitempty"`
	DiskNote         string  `json:"disk_note,omitempty"`
	// DiskSustainedGBps is the rate of a long read once the disk's burst
	// allowance (DiskBurstGB) is spent: cloud volumes and VM disks serve a
	// burst fast, then throttle. The planner prices the first DiskBurstGB
	// of a run's uncached reads at DiskGBps, the rest at this (0: every
	// byte at DiskGBps). Measured only when asked (`ferry calibrate
	// --checkpoint DIR`).
	DiskSustainedGBps float64 `json:"disk_sustained_gbps,omitempty"`
	DiskBurstGB       float64 `json:"disk_burst_gb,omitempty"`
	// CheckpointNote says how the figures that need a real checkpoint
	// (DiskSustainedGBps, DiskBurstGB, ReclaimTouchUsPerPage) were measured;
	// empty while they are defaults.
	CheckpointNote string `json:"checkpoint_note,omitempty"`
	// PageCacheGBps is the read rate of checkpoint pages the OS already
	// holds in its page cache: the planner prices the cached part of a
	// checkpoint (which it asks the OS about) at this rate.
	PageCacheGBps float64 `json:"page_cache_gbps"`
	// DiskCPU is the fraction of a checkpoint read's time that the cores
	// spend on it, lost to compute running beside it. Not measured: a
	// cold read cannot be provoked here (the VM host caches what was just
	// written). 0.45 is what a traced Wan 1.3B run lost on this machine
	// kind: blocks computed in 0.9 s instead of 0.6 s while 0.65 s reads
	// of the next block ran beside them.
	DiskCPU float64 `json:"disk_cpu"`

	// CopyOverlap is the fraction of a weight copy that hides behind
	// compute when both run at once (1: free, 0: they take turns). On the
	// CPU backend both share the cores.
	CopyOverlap float64 `json:"copy_overlap"`

	// GPU lists accelerators; empty until the CUDA backend exists.
	GPU []GPU `json:"gpu,omitempty"`
}

// GemmRate is one GEMM implementation's throughput: total flops over
// total time of the DiT-shaped products in Shapes.
type GemmRate struct {
	Name   string      `json:"name"`
	GFLOPS float64     `json:"gflops"`
	Shapes []ShapeRate `json:"shapes,omitempty"`
}

// ShapeRate is one measured product: C[M,N] = A[M,K]·B[K,N].
type ShapeRate struct {
	M      int     `json:"m"`
	N      int     `json:"n"`
	K      int     `json:"k"`
	GFLOPS float64 `json:"gflops"`
}

// GPU is the entry the CUDA backend will fill: one per device. It is part
// of the file format now so that profiles written later read the same way;
// nothing measures or uses it yet.
type GPU struct {
	Name            string  `json:"name"`
	MemoryBytes     int64   `json:"memory_bytes"`
	GemmTFLOPS      float64 `json:"gemm_tflops"`      // bf16 tensor-core GEMM at DiT shapes
	AttentionTFLOPS float64 `json:"attention_tflops"` // fused attention
	H2DGBps         float64 `json:"h2d_gbps"`         // pinned host -> device
	D2HGBps         float64 `json:"d2h_gbps"`         // device -> pinned host
	PageableH2DGBps float64 `json:"pageable_h2d_gbps"`
}

// Default is the profile used when nothing was calibrated, for this
// machine's kernels (DefaultFor(ThisMachine())).
func Default() Profile { return DefaultFor(ThisMachine()) }

// DefaultFor is the profile used on m when nothing was calibrated there.
// With the AVX-512 kernels: conservative figures for a 2-core AVX-512
// cloud VM (roughly half of what this class of machine measures when it is
// not shared; calibrated runs here measured 75-410 GFLOP/s GEMM, 15-140
// GFLOP/s attention, 120 GFLOP/s convolution, 17-28 GB/s bf16 upload).
// With the AVX2 ones (or fewer) the compute figures are avx2Rates'. Both
// are scaled by the cores present, with a disk slower than most.
func DefaultFor(m Machine) Profile {
	cores := max(m.Cores, 1)
	scale := float64(min(cores, 64)) / 2 // the figures are for 2 cores
	r := avx512Rates
	if m.Kernels != "avx512" {
		r = avx2Rates
	}
	return Profile{
		Version:               Version,
		Source:                "default",
		Cores:                 cores,
		MemoryBytes:           MemoryBytes(),
		Gemm:                  []GemmRate{{Name: "openblas", GFLOPS: r.openblas * scale}, {Name: "go", GFLOPS: r.goGEMM * scale}, {Name: "naive", GFLOPS: 1}},
		GemmDefault:           gemm.Best().Name(),
		AttentionGFLOPS:       r.attention * scale,
		AttentionSmallGFLOPS:  r.attentionSmall * scale,
		ConvGFLOPS:            r.conv * scale,
		ConvWideGFLOPS:        r.convWide * scale,
		ConvMidGFLOPS:         r.convMid * scale,
		ConvSmallGFLOPS:       r.convSmall * scale,
		ConvPanel:             ConvPanelWidth(),
		MemGBps:               8,
		OpOverheadUs:          80,
		H2DGBps:               8,
		H2DF32GBps:            6,
		FirstTouchUsPerPage:   10,
		WarmTouchUsPerPage:    0.5,
		ReclaimTouchUsPerPage: 1,   // reference VM, `calibrate --checkpoint`: 0.5-1.6
		DiskGBps:              0.2, // cold reads measured here: 76-195 MB/s, 0.19 GB/s through ferry
		PageCacheGBps:         3,
		DiskCPU:               0.45,
		CopyOverlap:           0.3,
	}
}

// computeRates are the default compute figures of one kernel level, in
// GFLOP/s on 2 cores (see Profile for what each measures).
type computeRates struct {
	openblas, goGEMM                   float64
	attention, attentionSmall          float64
	conv, convWide, convMid, convSmall float64
}

// avx512Rates: the AVX-512 defaults (see DefaultFor).
var avx512Rates = computeRates{
	openblas: 200, goGEMM: 180,
	attention: 60, attentionSmall: 25,
	conv: 80, convWide: 90, convMid: 50, convSmall: 8,
}

// avx2Rates: the AVX2 + FMA defaults. The GEMMs are what issue 23 measured
// on a quiet 2-core Zen 3 VM with `ferry calibrate --json` (OpenBLAS 141,
// our Go GEMM's AVX2 kernel 114 GFLOP/s; the peak of two Zen 3 cores'
// FMAs is about 190-220). Attention and convolutions are what `ferry
// calibrate` measured on another 2-core Zen 3 VM (the slower of two runs,
// 2026-11-29: Go GEMM 148.6, attention 117.9 and 65.1 small, convolutions
// 107.6, 145.5 wide, 58.3 mid, 16.5 small), scaled by the GEMM's 114/148.6
// so that they keep their measured ratios to it, rounded down. They stand
// above the AVX-512 defaults for attention and convolutions, which were
// set from early calibrations (15-140 GFLOP/s attention) and not revisited:
// the AVX-512 figures are the more conservative, not the AVX2 kernels the
// faster.
var avx2Rates = computeRates{
	openblas: 141, goGEMM: 114,
	attention: 90, attentionSmall: 49,
	conv: 82, convWide: 110, convMid: 44, convSmall: 12,
}

// ConvPanelWidth is the output channels the default GEMM computes at once
// in a convolution: its panel width when it packs weights in panels (the
// CPU backend's convolutions then multiply by packed weights), else 1.
func ConvPanelWidth() int {
	if pp, ok := gemm.Best().(gemm.PanelPacker); ok {
		return pp.PanelWidth()
	}
	return 1
}

// DiskGBpsPastBurst is the rate of a run's uncached reads past the first
// DiskBurstGB: the sustained rate where calibrate measured one, never above
// DiskGBps (a disk probed slower than that is slow now), and DiskGBps where
// there is none.
func (p Profile) DiskGBpsPastBurst() float64 {
	if p.DiskSustainedGBps <= 0 {
		return p.DiskGBps
	}
	return min(p.DiskGBps, p.DiskSustainedGBps)
}

// SmallPagesFirst reports whether device memory should come out of the
// kernel's fragmented free memory in 4 KiB pages before huge pages are
// asked for (cpu.Device.SmallPagesFirst): where such a page was measured
// less than half as dear to touch as a cold huge page's 4 KiB. The GEMMs
// over 4 KiB pages lose 2-4% to the TLB, so a small gain is not taken.
func (p Profile) SmallPagesFirst() bool {
	return p.FragmentTouchUsPerPage > 0 && 2*p.FragmentTouchUsPerPage < p.FirstTouchUsPerPage
}

// Memory is one reading of /proc/meminfo, in bytes; zeros where there is
// none.
type Memory struct {
	Total int64 // MemTotal
	// Free is MemFree: what the kernel hands out now without evicting.
	Free int64
	// Available is MemAvailable: free memory plus what it can evict.
	Available int64
	// FileCache is the page cache the kernel can evict: the file pages on
	// its LRU lists (Active(file) + Inactive(file)).
	FileCache int64
}

// ReadMemory reads /proc/meminfo once.
func ReadMemory() Memory {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return Memory{}
	}
	var m Memory
	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var kb int64
		if _, err := fmt.Sscanf(rest, "%d kB", &kb); err != nil {
			continue
		}
		switch key {
		case "MemTotal":
			m.Total = kb << 10
		case "MemFree":
			m.Free = kb << 10
		case "MemAvailable":
			m.Available = kb << 10
		case "Active(file)", "Inactive(file)":
			m.FileCache += kb << 10
		}
	}
	return m
}

// MemoryBytes is this machine's RAM (MemTotal); 0 where unknown.
func MemoryBytes() int64 { return ReadMemory().Total }

// BF16Slower says calibrate measured the bf16 GEMM ("go-bf16") slower
// than the float32 one ("go") on this machine: bf16 compute then buys
// nothing but rounding, and is not the default. False where either was
// not measured (the built-in defaults measure neither).
func (p Profile) BF16Slower() bool {
	var f32, bf16 float64
	for _, g := range p.Gemm {
		switch g.Name {
		case "go":
			f32 = g.GFLOPS
		case "go-bf16":
			bf16 = g.GFLOPS
		}
	}
	return f32 > 0 && bf16 > 0 && bf16 < f32
}

// GEMMGFLOPS returns the rate of the named implementation ("" for
// GemmDefault); an unknown name falls back to the default's rate, then to
// the fastest measured.
func (p Profile) GEMMGFLOPS(name string) float64 {
	if name == "" {
		name = p.GemmDefault
	}
	for _, g := range p.Gemm {
		if g.Name == name {
			return g.GFLOPS
		}
	}
	for _, g := range p.Gemm {
		if g.Name == p.GemmDefault {
			return g.GFLOPS
		}
	}
	if len(p.Gemm) > 0 {
		return p.Gemm[0].GFLOPS
	}
	return Default().Gemm[0].GFLOPS
}

// Validate reports figures that would make predictions meaningless.
func (p Profile) Validate() error {
	for _, f := range fields() {
		if f.get == nil || f.name == "copy-overlap" || f.name == "disk-cpu" {
			continue
		}
		if v := *f.get(&p); f.optional && v == 0 {
			continue // not measured: the planner goes without it
		}
		if v := *f.get(&p); !(v > 0) {
			return fmt.Errorf("hardware profile: %s is %g, want > 0 (measure with `ferry calibrate` or set --%s)", f.name, v, f.name)
		}
	}
	if p.CopyOverlap < 0 || p.CopyOverlap > 1 {
		return fmt.Errorf("hardware profile: copy-overlap %g must be within [0, 1]", p.CopyOverlap)
	}
	if p.DiskCPU < 0 || p.DiskCPU > 1 {
		return fmt.Errorf("hardware profile: disk-cpu %g must be within [0, 1]", p.DiskCPU)
	}
	if len(p.Gemm) == 0 {
		return errors.New("hardware profile: no GEMM rate (measure with `ferry calibrate` or set --gemm-gflops)")
	}
	if p.ConvPanel < 1 {
		return fmt.Errorf("hardware profile: conv_panel %d, want >= 1 (delete the file and run `ferry calibrate` again)", p.ConvPanel)
	}
	return nil
}

// field is one overridable figure, named as its command-line flag.
type field struct {
	name, help string
	get        func(p *Profile) *float64
	optional   bool // 0 means not measured
}

func fields() []field {
	return []field{
		// gemm-gflops has no single field: Set writes the default
		// implementation's entry of Gemm.
		{"gemm-gflops", "GEMM GFLOP/s of the default implementation", nil, false},
		{"attention-gflops", "attention GFLOP/s at head dim 128", func(p *Profile) *float64 { return &p.AttentionGFLOPS }, false},
		{"attention-small-gflops", "attention GFLOP/s at head dim 32", func(p *Profile) *float64 { return &p.AttentionSmallGFLOPS }, false},
		{"conv-gflops", "convolution GFLOP/s, large reductions (96 channels)", func(p *Profile) *float64 { return &p.ConvGFLOPS }, false},
		{"conv-wide-gflops", "convolution GFLOP/s, 384 channels", func(p *Profile) *float64 { return &p.ConvWideGFLOPS }, false},
		{"conv-mid-gflops", "convolution GFLOP/s, 32 channels", func(p *Profile) *float64 { return &p.ConvMidGFLOPS }, false},
		{"conv-small-gflops", "convolution GFLOP/s, 8 channels", func(p *Profile) *float64 { return &p.ConvSmallGFLOPS }, false},
		{"mem-gbps", "elementwise memory bandwidth, GB/s", func(p *Profile) *float64 { return &p.MemGBps }, false},
		{"op-overhead-us", "fixed cost of one kernel call, µs", func(p *Profile) *float64 { return &p.OpOverheadUs }, false},
		{"h2d-gbps", "host->device bf16->f32 copy, device GB/s", func(p *Profile) *float64 { return &p.H2DGBps }, false},
		{"h2d-f32-gbps", "host->device f32 copy, GB/s", func(p *Profile) *float64 { return &p.H2DF32GBps }, false},
		{"first-touch-us", "first touch of a fresh 4 KiB page, µs", func(p *Profile) *float64 { return &p.FirstTouchUsPerPage }, false},
		{"warm-touch-us", "first touch of a 4 KiB page the process gave back moments before, µs", func(p *Profile) *float64 { return &p.WarmTouchUsPerPage }, false},
		{"reclaim-touch-us", "first touch of a fresh 4 KiB page once free memory is used up, µs", func(p *Profile) *float64 { return &p.ReclaimTouchUsPerPage }, false},
		{"fragment-touch-us", "first touch of a 4 KiB page from free memory too fragmented for huge pages, µs", func(p *Profile) *float64 { return &p.FragmentTouchUsPerPage }, true},
		{"disk-gbps", "checkpoint read bandwidth, GB/s", func(p *Profile) *float64 { return &p.DiskGBps }, false},
		{"disk-sustained-gbps", "checkpoint read bandwidth once the disk's burst is spent, GB/s", func(p *Profile) *float64 { return &p.DiskSustainedGBps }, true},
		{"disk-burst-gb", "how much of a run's checkpoint reads the disk serves at --disk-gbps before --disk-sustained-gbps, GB", func(p *Profile) *float64 { return &p.DiskBurstGB }, true},
		{"page-cache-gbps", "read bandwidth of checkpoint pages in the page cache, GB/s", func(p *Profile) *float64 { return &p.PageCacheGBps }, false},
		{"disk-cpu", "fraction of a checkpoint read's time taken from compute, 0..1", func(p *Profile) *float64 { return &p.DiskCPU }, false},
		{"copy-overlap", "fraction of a copy hidden behind compute, 0..1", func(p *Profile) *float64 { return &p.CopyOverlap }, false},
	}
}

// Flag is an overridable figure: its flag name (without dashes) and help.
type Flag struct{ Name, Help string }

// Flags lists the figures Set accepts, for the CLI to register.
func Flags() []Flag {
	var out []Flag
	for _, f := range fields() {
		out = append(out, Flag{Name: f.name, Help: f.help})
	}
	return out
}

// MinDiskProbeBytes is the least a read of the checkpoint itself must
// cover before its rate replaces the profile's disk figure.
const MinDiskProbeBytes = 8 << 20

// UseCheckpointRead prices uncached checkpoint reads at a rate measured
// by reading the checkpoint's own uncached pages (bytes of them; direct:
// bypassing the page cache, the disk's time alone, as the planner wants
// it, for it prices the page cache a read fills apart): it is the disk the
// weights are on, and it shows what no residency query can (a virtual
// machine's host may cache the file). Reads too short to trust leave the
// profile as it is; --disk-gbps, applied after, overrides it.
func (p *Profile) UseCheckpointRead(bytes int64, gbps float64, direct bool) {
	if bytes < MinDiskProbeBytes || !(gbps > 0) {
		return
	}
	how := "through the page cache"
	if direct {
		how = "bypassing the page cache"
	}
	p.DiskGBps, p.DiskSuspect = gbps, false
	p.DiskNote = fmt.Sprintf("read %d MiB of the checkpoint outside the page cache at %.2f GB/s, %s", bytes>>20, gbps, how)
}

// Set overrides one figure by its flag name, e.g. Set("disk-gbps", 1.5).
func (p *Profile) Set(name string, v float64) error {
	name = strings.TrimLeft(name, "-")
	fraction := name == "copy-overlap" || name == "disk-cpu"
	if !(v > 0) && !(fraction && v == 0) {
		return fmt.Errorf("hardware profile: --%s %g must be > 0", name, v)
	}
	if fraction && v > 1 {
		return fmt.Errorf("hardware profile: --%s %g must be within [0, 1]", name, v)
	}
	if name == "gemm-gflops" {
		p.setGemm(v)
		p.markOverride()
		return nil
	}
	for _, f := range fields() {
		if f.name == name && f.get != nil {
			*f.get(p) = v
			if name == "disk-gbps" {
				p.DiskSuspect, p.DiskNote = false, "set by --disk-gbps"
			}
			p.markOverride()
			return nil
		}
	}
	var names []string
	for _, f := range Flags() {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return fmt.Errorf("hardware profile: no figure %q (have %s)", name, strings.Join(names, ", "))
}

func (p *Profile) setGemm(v float64) {
	if p.GemmDefault == "" {
		p.GemmDefault = "openblas"
	}
	for i := range p.Gemm {
		if p.Gemm[i].Name == p.GemmDefault {
			p.Gemm[i].GFLOPS = v
			return
		}
	}
	p.Gemm = append([]GemmRate{{Name: p.GemmDefault, GFLOPS: v}}, p.Gemm...)
}

func (p *Profile) markOverride() {
	if !strings.HasSuffix(p.Source, "+override") {
		p.Source += "+override"
	}
}

// Path is where Save writes by default:
// os.UserConfigDir()/ferry/hardware.json.
func Path() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("hardware profile: no config directory: %w", err)
	}
	return filepath.Join(dir, "ferry", "hardware.json"), nil
}

// Save writes p as JSON to path ("" for Path()), creating the directory,
// through a temp file and a rename so that a reader never sees half a file.
func Save(p Profile, path string) error {
	if path == "" {
		var err error
		if path, err = Path(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("save hardware profile: %w", err)
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("save hardware profile: %w", err)
	}
	return writeAtomic(path, append(data, '\n'))
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save hardware profile: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("save hardware profile %s: %w", path, werr)
	}
	return nil
}

// Load reads a profile from path ("" for Path()).
func Load(path string) (Profile, error) {
	if path == "" {
		var err error
		if path, err = Path(); err != nil {
			return Profile{}, err
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("load hardware profile: %w", err)
	}
	// Figures added after a file was written keep their defaults.
	p := Default()
	if err := json.Unmarshal(data, &p); err != nil {
		return Profile{}, fmt.Errorf("load hardware profile %s: %w", path, err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err == nil {
		if _, ok := keys["conv_wide_gflops"]; !ok {
			// Measured before the 384-channel probe: scale the measured
			// 96-channel rate as the defaults relate them, rather than
			// pricing wide convolutions at an uncalibrated default.
			d := Default()
			p.ConvWideGFLOPS = p.ConvGFLOPS * d.ConvWideGFLOPS / d.ConvGFLOPS
		}
	}
	if p.Version != Version {
		return Profile{}, fmt.Errorf("load hardware profile %s: version %d, want %d (run `ferry calibrate` again)", path, p.Version, Version)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
