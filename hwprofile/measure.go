package hwprofile

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/arena"
	"ferry/backend/cpu/gemm"
	"ferry/backend/cpu/parallel"
	"ferry/dtype"
	"ferry/tensor"
)

// Options size a measurement.
type Options struct {
	// Small measures tiny problems (for tests): the figures are then
	// dominated by overheads and only show that every probe runs.
	Small bool
	// TempDir holds the disk probe's file ("" for os.TempDir()).
	TempDir string
	// Gemm restricts the GEMM probe to these implementations (nil: every
	// one gemm.Available lists except the naive reference).
	Gemm []string
	// Log, when set, is told what is being measured.
	Log func(format string, args ...any)
}

// SuspectDiskGBps is the read rate above which the disk figure is taken to
// come from the page cache rather than the device.
const SuspectDiskGBps = 2.0

// sizes are the probe dimensions.
type sizes struct {
	gemm             [][3]int // m, n, k of Linear(x[m,k], w[n,k])
	attnL, attnHeads int
	convC            [4]int // channels of the large, wide, mid and small probes
	convT, convHW    int
	streamElems      int // elementwise and upload probes
	touchBytes       int64
	settle           time.Duration // before the first-touch probe
	diskBytes        int64
	minTime          time.Duration // per probe
}

func sizesFor(small bool) sizes {
	if small {
		return sizes{gemm: [][3]int{{64, 64, 64}}, attnL: 64, attnHeads: 1, convC: [4]int{4, 8, 2, 1}, convT: 2, convHW: 8,
			streamElems: 1 << 14, touchBytes: 1 << 20, diskBytes: 1 << 20, minTime: time.Millisecond}
	}
	// DiT shapes at the 1.3B model's width: attention projections, the
	// feed-forward up and down projections, 1024 tokens at a time.
	return sizes{gemm: [][3]int{{1024, 1536, 1536}, {1024, 8960, 1536}, {1024, 1536, 8960}},
		attnL: 1024, attnHeads: 4, convC: [4]int{96, 384, 32, 8}, convT: 3, convHW: 64,
		streamElems: 8 << 20, touchBytes: 256 << 20, settle: 15 * time.Second, diskBytes: 256 << 20, minTime: 250 * time.Millisecond}
}

// Measure probes this machine. Every probe runs through the CPU backend
// the pipelines use, so the figures include its overheads.
func Measure(opts Options) (Profile, error) {
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sz := sizesFor(opts.Small)
	p := Default()
	m := ThisMachine()
	p.Source, p.MeasuredAt, p.CPU, p.Cores = "measured", time.Now().UTC().Format(time.RFC3339), m.Model, m.Cores
	p.Machine = &m
	p.MemoryBytes = MemoryBytes()

	// First, before any probe has freed memory (see measureFirstTouch).
	logf("first touch of fresh memory")
	p.FirstTouchUsPerPage, p.WarmTouchUsPerPage = measureFirstTouch(sz)
	p.FragmentTouchUsPerPage = measureFragmentTouch(sz)

	impls, err := gemmImpls(opts.Gemm, opts.Small)
	if err != nil {
		return Profile{}, err
	}
	p.Gemm = nil
	for _, impl := range impls {
		logf("gemm %s", impl.Name())
		p.Gemm = append(p.Gemm, measureGemm(impl, sz))
	}
	if len(opts.Gemm) == 0 {
		logf("gemm go-bf16")
		p.Gemm = append(p.Gemm, measureGemmBF16(sz))
	}
	sort.SliceStable(p.Gemm, func(i, j int) bool { return p.Gemm[i].GFLOPS > p.Gemm[j].GFLOPS })
	p.GemmDefault = gemm.Best().Name()
	logf("fma peak")
	peakTime := 200 * time.Millisecond
	if opts.Small {
		peakTime = 20 * time.Millisecond
	}
	p.FMAPeakGFLOPS, p.FMAPeakISA = gemm.FMAPeak(parallel.Default().Workers(), peakTime)
	if p.FMAPeakGFLOPS == 0 {
		p.FMAPeakISA = ""
	}

	be := cpu.New(cpu.NewDevice(0), gemm.Best())
	logf("attention, convolution, elementwise")
	p.AttentionGFLOPS = measureAttention(be, sz, 128)
	p.AttentionSmallGFLOPS = measureAttention(be, sz, 32)
	p.ConvGFLOPS = measureConv(be, sz, sz.convC[0])
	p.ConvWideGFLOPS = measureConv(be, sz, sz.convC[1])
	p.ConvMidGFLOPS = measureConv(be, sz, sz.convC[2])
	p.ConvSmallGFLOPS = measureConv(be, sz, sz.convC[3])
	p.MemGBps = measureStream(be, sz)
	p.OpOverheadUs = measureOverhead(be, sz)
	logf("host->device copy")
	p.H2DGBps = measureUpload(be, sz, dtype.BF16)
	p.H2DF32GBps = measureUpload(be, sz, dtype.F32)
	logf("copy-compute overlap")
	// One probe swings between 0 and 1 on a busy 2-core machine: keep the
	// median of three.
	p.CopyOverlap = median3(func() float64 { return measureOverlap(be, sz) })
	logf("disk")
	if err := measureDisk(&p, opts.TempDir, sz); err != nil {
		return Profile{}, err
	}
	return p, p.Validate()
}

func gemmImpls(names []string, small bool) ([]gemm.Impl, error) {
	if len(names) == 0 {
		var out []gemm.Impl
		for _, impl := range gemm.Available() {
			if impl.Name() != "naive" || small {
				out = append(out, impl)
			}
		}
		return out, nil
	}
	var out []gemm.Impl
	for _, n := range names {
		impl, err := gemm.Select(n)
		if err != nil {
			return nil, fmt.Errorf("calibrate: %w", err)
		}
		out = append(out, impl)
	}
	return out, nil
}

// timeIt runs fn once to warm up, then until minTime has passed (at least
// three times), and returns the median seconds per run.
func timeIt(minTime time.Duration, fn func()) float64 {
	fn()
	var runs []float64
	start := time.Now()
	for len(runs) < 3 || time.Since(start) < minTime {
		t0 := time.Now()
		fn()
		runs = append(runs, time.Since(t0).Seconds())
		if len(runs) >= 50 {
			break
		}
	}
	sort.Float64s(runs)
	return max(runs[len(runs)/2], 1e-9)
}

func measureGemm(impl gemm.Impl, sz sizes) GemmRate {
	ops := tensor.NewOps(cpu.New(cpu.NewDevice(0), impl))
	r := GemmRate{Name: impl.Name()}
	var flops, secs float64
	for _, s := range sz.gemm {
		m, n, k := s[0], s[1], s[2]
		x, w := ops.Zeros(m, k), ops.Zeros(n, k)
		sec := timeIt(sz.minTime/time.Duration(len(sz.gemm)), func() { ops.Linear(x, w, nil).Free() })
		tensor.Free(x, w)
		g := 2 * float64(m) * float64(n) * float64(k) / sec / 1e9
		r.Shapes = append(r.Shapes, ShapeRate{M: m, N: n, K: k, GFLOPS: g})
		flops += 2 * float64(m) * float64(n) * float64(k)
		secs += sec
	}
	// The rate of the whole mix (total flops over total time), which is
	// what a transformer block's products add up to.
	r.GFLOPS = flops / secs / 1e9
	// The next probe would lose a core to OpenBLAS's spinning threads (the
	// Go GEMM measured after it ran at 228 against 470 GFLOP/s).
	gemm.Settle(impl)
	return r
}

// measureGemmBF16 times the bf16 path as a pipeline uses it: weights bf16
// on the device, the backend computing in bf16 ("go-bf16").
func measureGemmBF16(sz sizes) GemmRate {
	be := cpu.New(cpu.NewDevice(0), gemm.Best())
	r := GemmRate{Name: "go-bf16"}
	if be.SetComputeDType(dtype.BF16) != nil {
		return r
	}
	ops := tensor.NewOps(be)
	var flops, secs float64
	for _, s := range sz.gemm {
		m, n, k := s[0], s[1], s[2]
		x, w32 := ops.Zeros(m, k), ops.Zeros(n, k)
		w := ops.Cast(w32, dtype.BF16)
		sec := timeIt(sz.minTime/time.Duration(len(sz.gemm)), func() { ops.Linear(x, w, nil).Free() })
		tensor.Free(x, w32, w)
		g := 2 * float64(m) * float64(n) * float64(k) / sec / 1e9
		r.Shapes = append(r.Shapes, ShapeRate{M: m, N: n, K: k, GFLOPS: g})
		flops += 2 * float64(m) * float64(n) * float64(k)
		secs += sec
	}
	r.GFLOPS = flops / secs / 1e9
	return r
}

// measureAttention times self-attention at head dimension d, with as many
// heads as make sz.attnHeads heads of 128.
func measureAttention(be *cpu.Backend, sz sizes, d int) float64 {
	ops := tensor.NewOps(be)
	heads := max(1, sz.attnHeads*128/d)
	q := ops.Zeros(1, sz.attnL, heads, d)
	defer q.Free()
	sec := timeIt(sz.minTime, func() { ops.Attention(q, q, q, nil, 0.1).Free() })
	return 4 * float64(sz.attnL) * float64(sz.attnL) * float64(heads*d) / sec / 1e9
}

func measureConv(be *cpu.Backend, sz sizes, c int) float64 {
	ops := tensor.NewOps(be)
	t, hw := sz.convT, sz.convHW
	x := ops.Zeros(1, c, t, hw, hw)
	w := ops.Zeros(c, c, 3, 3, 3)
	defer tensor.Free(x, w)
	sec := timeIt(sz.minTime/2, func() { ops.Conv(x, w, nil, []int{1, 1, 1}, []int{1, 1, 1}).Free() })
	return 2 * float64(c*c*27) * float64(t*hw*hw) / sec / 1e9
}

// measureStream times an out-of-place affine: one read and one write per
// element, as norms and activations stream.
func measureStream(be *cpu.Backend, sz sizes) float64 {
	ops := tensor.NewOps(be)
	x := ops.Zeros(sz.streamElems)
	y := ops.Zeros(sz.streamElems)
	defer tensor.Free(x, y)
	sec := timeIt(sz.minTime, func() { _ = be.Affine(y, x, 1.5, 0.5) })
	return 8 * float64(sz.streamElems) / sec / 1e9
}

// measureOverhead times a layer norm over a small tensor (256 rows of
// 64): too little work for bandwidth to matter, so its time is the cost of
// a kernel call.
func measureOverhead(be *cpu.Backend, sz sizes) float64 {
	ops := tensor.NewOps(be)
	x := ops.Zeros(256, 64)
	defer x.Free()
	sec := timeIt(sz.minTime/4, func() { ops.LayerNorm(x, nil, nil, 1e-6).Free() })
	return sec * 1e6
}

// measureUpload times Backend.Upload of src-typed host bytes into a float32
// device tensor, in device bytes per second.
func measureUpload(be *cpu.Backend, sz sizes, src dtype.DType) float64 {
	ops := tensor.NewOps(be)
	dst := ops.Zeros(sz.streamElems)
	defer dst.Free()
	raw := make([]byte, sz.streamElems*src.Size())
	sec := timeIt(sz.minTime, func() { _ = be.Upload(dst, raw, src) })
	return 4 * float64(sz.streamElems) / sec / 1e9
}

// measureFirstTouch writes one float per page of fresh device memory,
// twice, on one thread (the copy worker reads host copies into fresh pages
// on one): the first pass pays the page faults, the second does not. Then
// it gives the memory back (munmap), maps as much again and does the same:
// the warm figure, for memory a run unmaps and maps again.
//
// The first figure is of cold memory, as a run meets it. On virtual
// machines whose balloon reports free memory to the host (virtio-balloon
// free page reporting), the host takes back pages that stay free for a
// few seconds, and must fault each in again when the guest next touches
// it: on the reference VM a fresh page cost 5-10 µs (huge pages, 15 with
// 4 KiB ones) where a page freed a moment before cost 0.2-0.3. A run
// starts on memory freed long before, so calibrate probes first thing,
// after waiting settle for what the process before it freed (a build,
// another run) to go cold: 4 GiB freed at once were cold after 15 s here,
// and with a 4 s wait, calibrate run right after a request that had
// streamed 15 GB measured 2.94 µs where a cold page cost 8.9 (Zen 5 kind,
// 2026-11-27).
func measureFirstTouch(sz sizes) (cold, warm float64) {
	time.Sleep(sz.settle)
	dev := cpu.NewDevice(0)
	defer dev.EmptyCache()
	cold = touchFresh(dev, sz.touchBytes)
	dev.EmptyCache()
	warm = min(touchFresh(dev, sz.touchBytes), cold)
	return cold, warm
}

// measureFragmentTouch times the first touch of 4 KiB pages the device
// maps out of the kernel's fragmented free memory (SmallPagesFirst): up to
// touchBytes of it, half of what there is. It returns 0 (not measured)
// where there are too few fragments to trust a figure: less than 16 MiB to
// touch.
func measureFragmentTouch(sz sizes) float64 {
	n := min(sz.touchBytes, cpu.FragmentedFree()/2-arena.FragmentMargin) &^ (arena.PageSize - 1)
	if n < min(sz.touchBytes, 16<<20) {
		return 0
	}
	dev := cpu.NewDevice(0)
	dev.SmallPagesFirst(cpu.FragmentedFree)
	defer dev.EmptyCache()
	return touchFresh(dev, n)
}

// touchFresh allocates bytes on dev, times their first touch (touchCost)
// and frees them, leaving the segment in dev's cache.
func touchFresh(dev *cpu.Device, bytes int64) float64 {
	t := tensor.NewOps(cpu.New(dev, gemm.Naive{})).Empty(dtype.F32, int(bytes/4))
	defer t.Free()
	return touchCost(t.F32())
}

// touchCost writes fresh memory once per 4 KiB page, twice: the first pass
// pays the page faults, the second does not. It returns the difference in
// µs per page.
func touchCost(data []float32) float64 {
	pass := func(v float32) time.Duration {
		t0 := time.Now()
		touchPages(data, v)
		return time.Since(t0)
	}
	first := pass(1)
	second := pass(2)
	pages := float64(len(data) * 4 / 4096)
	return max(0.01, (first-second).Seconds()*1e6/pages)
}

// touchPages writes v once per 4 KiB page of data.
func touchPages(data []float32, v float32) {
	for i := 0; i < len(data); i += 1024 {
		data[i] = v
	}
}

// measureOverlap runs GEMMs alone, uploads alone, then both at once, and
// reports the fraction of the upload time that the concurrent run hid.
func measureOverlap(be *cpu.Backend, sz sizes) float64 {
	ops := tensor.NewOps(be)
	s := sz.gemm[0]
	x, w := ops.Zeros(s[0], s[2]), ops.Zeros(s[1], s[2])
	dst := ops.Zeros(sz.streamElems)
	defer tensor.Free(x, w, dst)
	raw := make([]byte, sz.streamElems*2)
	compute := func(n int) {
		for range n {
			ops.Linear(x, w, nil).Free()
		}
	}
	upload := func(n int) {
		for range n {
			_ = be.Upload(dst, raw, dtype.BF16)
		}
	}
	nc, nu := 8, 8
	if sz.minTime < 10*time.Millisecond {
		nc, nu = 2, 2
	}
	compute(1)
	tc := timeIt(0, func() { compute(nc) })
	tu := timeIt(0, func() { upload(nu) })
	both := timeIt(0, func() {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); upload(nu) }()
		compute(nc)
		wg.Wait()
	})
	hidden := (tc + tu - both) / tu
	return min(1, max(0, hidden))
}

// measureDisk writes a file, reads it back from the page cache, asks the
// kernel to drop its pages, and reads it again. A rate above SuspectDiskGBps means the pages came from memory;
// the profile then keeps a conservative figure.
func measureDisk(p *Profile, dir string, sz sizes) error {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "ferry-calibrate-*")
	if err != nil {
		return fmt.Errorf("calibrate disk: %w", err)
	}
	path := f.Name()
	defer os.Remove(path)
	chunk := make([]byte, min(sz.diskBytes, 8<<20))
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	for off := int64(0); off < sz.diskBytes; off += int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return fmt.Errorf("calibrate disk: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("calibrate disk: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("calibrate disk: %w", err)
	}
	// Just written, the pages are cached: this read is the page cache's rate.
	if p.PageCacheGBps, err = readRate(path, chunk); err != nil {
		return err
	}
	dropped := dropFile(path, sz.diskBytes) == nil
	gbps, err := readRate(path, chunk)
	if err != nil {
		return err
	}
	p.DiskMeasuredGBps = gbps
	p.DiskGBps = gbps
	p.DiskSuspect, p.DiskNote = false, fmt.Sprintf("read %s from %s", formatMiB(sz.diskBytes), filepath.Dir(path))
	if gbps > SuspectDiskGBps || !dropped {
		why := "served from the page cache"
		if !dropped {
			why = "the page cache could not be dropped"
		}
		p.DiskSuspect = true
		p.DiskGBps = Default().DiskGBps
		p.DiskNote = fmt.Sprintf("measured %.2f GB/s, suspect (%s); using %.2f GB/s — set --disk-gbps to override", gbps, why, p.DiskGBps)
	}
	return nil
}

func readRate(path string, buf []byte) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("calibrate disk: %w", err)
	}
	defer f.Close()
	t0 := time.Now()
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err != nil || k == 0 {
			break
		}
	}
	sec := max(time.Since(t0).Seconds(), 1e-9)
	return float64(n) / sec / 1e9, nil
}

func formatMiB(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

func dropFile(path string, n int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return dropCache(f, n)
}

// median3 runs a probe three times and returns the median.
func median3(probe func() float64) float64 {
	v := []float64{probe(), probe(), probe()}
	sort.Float64s(v)
	return v[1]
}
