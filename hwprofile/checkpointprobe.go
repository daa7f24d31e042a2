package hwprofile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// Checkpoint probe sizes: the read from disk (timed in windows), the timed
// touches past free memory, the chunk they are made in, and the free
// memory below which the kernel is taken to be reclaiming (its watermarks
// sit at a few hundred MiB on a 24 GiB machine).
type checkpointSizes struct {
	read, window, probe, chunk, low int64
}

func checkpointSizesFor(small bool) checkpointSizes {
	if small {
		return checkpointSizes{read: 6 << 20, window: 1 << 20, probe: 4 << 20, chunk: 1 << 20}
	}
	return checkpointSizes{read: 3 << 30, window: 256 << 20, probe: 2 << 30, chunk: 256 << 20, low: 512 << 20}
}

// CheckpointOptions sets up MeasureCheckpoint.
type CheckpointOptions struct {
	// Dir is a checkpoint folder: its files are read from disk, then left
	// in the page cache for the kernel to evict.
	Dir string
	// Small probes tiny sizes and does not require the kernel to reclaim
	// (for tests: the figures then only show that the probes run).
	Small bool
	Log   func(format string, args ...any)
}

// CheckpointFigures are what MeasureCheckpoint measured.
type CheckpointFigures struct {
	// SustainedGBps is the read rate once a burst allowance is spent, and
	// BurstGB how much came faster first (0: none seen).
	SustainedGBps, BurstGB float64
	// ReclaimUsPerPage is the first touch of a fresh page past free memory.
	ReclaimUsPerPage float64
	Note             string
}

// Checkpoint returns the profile's figures that MeasureCheckpoint measures.
func (p Profile) Checkpoint() CheckpointFigures {
	return CheckpointFigures{SustainedGBps: p.DiskSustainedGBps, BurstGB: p.DiskBurstGB, ReclaimUsPerPage: p.ReclaimTouchUsPerPage, Note: p.CheckpointNote}
}

// SetCheckpoint stores figures MeasureCheckpoint measured.
func (p *Profile) SetCheckpoint(f CheckpointFigures) {
	p.DiskSustainedGBps, p.DiskBurstGB, p.ReclaimTouchUsPerPage, p.CheckpointNote = f.SustainedGBps, f.BurstGB, f.ReclaimUsPerPage, f.Note
}

// MeasureCheckpoint runs the probes that need a real checkpoint's files.
//
// The read: it drops opts.Dir's pages from the page cache, reads 3 GiB of
// them in order and times each 256 MiB. A cloud volume or a VM's disk may
// serve a burst fast, then throttle: here the first 256 MiB came at 2.6
// GB/s and the rest at 0.55-0.65, so the 64 MiB that ferry plan reads
// before planning (0.98-1.4 GB/s) priced a cold 9 GB text encoder at half
// its time. The sustained rate is that of the read's second half.
//
// The touch: with those pages in the page cache, it takes what free memory
// is left with pages it touches untimed, then times 2 GiB more, each page
// of which the kernel must evict a cached one for. On the reference VM
// that cost 0.3-1.6 µs per page, far below a cold first touch (7-9 µs):
// evicted pages are pages the host already backs, where free memory the
// balloon reported must be faulted in again.
//
// Dir must hold 3 GiB of files. The probes evict page cache and hold about
// the free memory plus 2 GiB for about a minute, so calibrate runs them
// only when asked to.
func MeasureCheckpoint(opts CheckpointOptions) (CheckpointFigures, error) {
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sz := checkpointSizesFor(opts.Small)
	files, err := checkpointFiles(opts.Dir, sz.read)
	if err != nil {
		return CheckpointFigures{}, err
	}
	var f CheckpointFigures
	logf("checkpoint: reading %s from disk", opts.Dir)
	windows, dropped, err := readWindows(files, sz)
	if err != nil {
		return CheckpointFigures{}, err
	}
	f.SustainedGBps, f.BurstGB = sustainedRate(windows)
	read := fmt.Sprintf("read %s at %.2f GB/s after %.2f GB faster", tensor.FormatBytes(sz.read), f.SustainedGBps, f.BurstGB)
	if !dropped || f.SustainedGBps > SuspectDiskGBps {
		read = fmt.Sprintf("read %s at %.2f GB/s, suspect (served from a cache): not used", tensor.FormatBytes(sz.read), f.SustainedGBps)
		f.SustainedGBps, f.BurstGB = 0, 0
	}
	f.ReclaimUsPerPage, err = measureReclaim(opts, sz, logf)
	if err != nil {
		return CheckpointFigures{}, err
	}
	f.Note = fmt.Sprintf("%s: %s; touched %s past free memory", opts.Dir, read, tensor.FormatBytes(sz.probe))
	return f, nil
}

// window is one timed stretch of a read.
type window struct {
	bytes   int64
	seconds float64
}

// readWindows drops the files' pages from the page cache and reads sz.read
// bytes of them in order, timed per sz.window. dropped says whether the
// kernel took the advice.
func readWindows(files []string, sz checkpointSizes) ([]window, bool, error) {
	dropped := true
	for _, path := range files {
		if info, err := os.Stat(path); err != nil || dropFile(path, info.Size()) != nil {
			dropped = false
		}
	}
	buf := make([]byte, min(8<<20, sz.window))
	var out []window
	cur := window{}
	t0 := time.Now()
	var total int64
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, false, fmt.Errorf("checkpoint probe: %w", err)
		}
		for total < sz.read {
			n, err := f.Read(buf)
			total += int64(n)
			cur.bytes += int64(n)
			if cur.bytes >= sz.window {
				cur.seconds = time.Since(t0).Seconds()
				out = append(out, cur)
				cur, t0 = window{}, time.Now()
			}
			if errors.Is(err, io.EOF) || n == 0 {
				break
			}
			if err != nil {
				f.Close()
				return nil, false, fmt.Errorf("checkpoint probe: read %s: %w", path, err)
			}
		}
		f.Close()
		if total >= sz.read {
			break
		}
	}
	if cur.bytes > 0 {
		cur.seconds = time.Since(t0).Seconds()
		out = append(out, cur)
	}
	return out, dropped, nil
}

// sustainedRate is the rate of the second half of the windows, and the
// burst the bytes that came faster before: the B for which the whole read
// took B at the first window's rate and the rest at the sustained one.
func sustainedRate(ws []window) (gbps, burstGB float64) {
	var late, all window
	for i, w := range ws {
		all.bytes += w.bytes
		all.seconds += w.seconds
		if i >= len(ws)/2 {
			late.bytes += w.bytes
			late.seconds += w.seconds
		}
	}
	if late.seconds <= 0 || len(ws) == 0 || ws[0].seconds <= 0 {
		return 0, 0
	}
	sus := float64(late.bytes) / late.seconds
	first := float64(ws[0].bytes) / ws[0].seconds
	if first <= sus*1.2 {
		return sus / 1e9, 0
	}
	burst := (float64(all.bytes)/sus - all.seconds) / (1/sus - 1/first)
	return sus / 1e9, min(max(burst, 0), float64(all.bytes)) / 1e9
}

// measureReclaim times the first touch of sz.probe bytes past free memory,
// in µs per page, with the checkpoint's pages just read in the page cache
// for the kernel to evict.
func measureReclaim(opts CheckpointOptions, sz checkpointSizes, logf func(string, ...any)) (float64, error) {
	dev := cpu.NewDevice(0)
	ops := tensor.NewOps(cpu.New(dev, gemm.Naive{}))
	defer dev.EmptyCache()
	var held []*tensor.Tensor
	defer func() {
		for _, t := range held {
			t.Free()
		}
	}()
	// Take the free memory that is left, untimed: the timed pages must
	// each come from evicting a cached one. Stop early rather than eat
	// into the page cache the timed pages need (a large machine's kernel
	// may keep more than sz.low free).
	logf("checkpoint: taking the free memory left (%s)", tensor.FormatBytes(ReadMemory().Free))
	need := sz.probe + sz.probe/4
	for !opts.Small {
		if m := ReadMemory(); m.Free <= sz.low || m.Available <= need+sz.chunk {
			break
		}
		t := ops.Empty(dtype.F32, int(sz.chunk/4))
		held = append(held, t)
		touchPages(t.F32(), 1)
	}
	if m := ReadMemory(); !opts.Small {
		switch {
		case m.Available < need:
			return 0, fmt.Errorf("checkpoint probe: only %s can be evicted after reading %s; the probe needs %s: close what holds memory",
				tensor.FormatBytes(m.Available), opts.Dir, tensor.FormatBytes(need))
		case m.Free > sz.low+sz.probe/2:
			return 0, fmt.Errorf("checkpoint probe: the kernel keeps %s free; the probe could not push it past its free memory", tensor.FormatBytes(m.Free))
		}
	}
	logf("checkpoint: touching %s past free memory", tensor.FormatBytes(sz.probe))
	var us float64
	for off := int64(0); off < sz.probe; off += sz.chunk {
		t := ops.Empty(dtype.F32, int(sz.chunk/4))
		held = append(held, t)
		us += touchCost(t.F32())
	}
	return max(us/float64(sz.probe/sz.chunk), 0.01), nil
}

// CheckCheckpointDir says whether MeasureCheckpoint can use dir (small: at
// the test size), before a calibration spends its minute on other probes.
func CheckCheckpointDir(dir string, small bool) error {
	_, err := checkpointFiles(dir, checkpointSizesFor(small).read)
	return err
}

// checkpointFiles lists dir's files and checks that they hold need bytes.
func checkpointFiles(dir string, need int64) ([]string, error) {
	var files []string
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files, total = append(files, path), total+info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint probe: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("checkpoint probe: %s holds no files: name a checkpoint folder", dir)
	}
	if total < need {
		return nil, fmt.Errorf("checkpoint probe: %s holds %s of files; the probes read %s: name a bigger checkpoint folder",
			dir, tensor.FormatBytes(total), tensor.FormatBytes(need))
	}
	return files, nil
}
