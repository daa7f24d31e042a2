package hwprofile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// Reclaim probe sizes: the timed touches past free memory, the chunk they
// are made in, and the free memory below which the kernel is taken to be
// reclaiming (its watermarks sit at a few hundred MiB on a 24 GiB machine).
const (
	reclaimProbeBytes = 2 << 30
	reclaimChunkBytes = 256 << 20
	reclaimLowFree    = 512 << 20
)

// ReclaimOptions sets up MeasureReclaim.
type ReclaimOptions struct {
	// Dir holds the files whose pages fill the page cache, a checkpoint
	// folder: the kernel must evict them to hand out the probe's pages.
	Dir string
	// Small probes tiny sizes and does not require the kernel to reclaim
	// (for tests: the figure is then a plain first touch).
	Small bool
	Log   func(format string, args ...any)
}

// MeasureReclaim measures the first touch of fresh pages once the kernel
// has no free memory left and must evict page cache for each, in µs per
// 4 KiB page, and says how. It reads 3 GiB of opts.Dir's files into the
// page cache, takes what free memory is left with pages it touches
// untimed, then times 2 GiB more, each page of which the kernel must evict
// a cached one for. Dir must hold 2.5 GiB of files at least. On the
// reference VM the figure (0.3-1.4 µs per GiB) is far below the cold
// first touch (7-9 µs): evicted pages are pages the host already backs,
// where free memory the balloon reported must be faulted in again.
//
// The probe evicts page cache and holds about the free memory plus 2 GiB
// while it runs (a minute on a 24 GiB machine), so calibrate runs it only
// when asked to.
func MeasureReclaim(opts ReclaimOptions) (usPerPage float64, note string, err error) {
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	probe, chunk, low := int64(reclaimProbeBytes), int64(reclaimChunkBytes), int64(reclaimLowFree)
	if opts.Small {
		probe, chunk, low = 4<<20, 1<<20, 0
	}
	files, err := reclaimFiles(opts.Dir, probe)
	if err != nil {
		return 0, "", err
	}
	logf("reclaim: reading %s into the page cache", opts.Dir)
	read, err := fillCache(files, func(read int64) bool { return read >= probe*3/2 || FreeMemoryBytes() < low })
	if err != nil {
		return 0, "", err
	}

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
	// may keep more than low free).
	logf("reclaim: taking the free memory left (%.1f GiB)", gib(FreeMemoryBytes()))
	need := probe + probe/4
	for !opts.Small && FreeMemoryBytes() > low && meminfo("MemAvailable") > need+chunk {
		t := ops.Empty(dtype.F32, int(chunk/4))
		held = append(held, t)
		touchPages(t.F32(), 1)
	}
	if !opts.Small {
		if avail := meminfo("MemAvailable"); avail < need {
			return 0, "", fmt.Errorf("reclaim probe: only %.1f GiB can be evicted after reading %.1f GiB of %s; the probe needs %.1f GiB: close what holds memory",
				gib(avail), gib(read), opts.Dir, gib(need))
		}
		if free := FreeMemoryBytes(); free > low+probe/2 {
			return 0, "", fmt.Errorf("reclaim probe: the kernel keeps %.1f GiB free; the probe could not push it past its free memory", gib(free))
		}
	}
	logf("reclaim: touching %.1f GiB past free memory", gib(probe))
	var us float64
	for off := int64(0); off < probe; off += chunk {
		t := ops.Empty(dtype.F32, int(chunk/4))
		held = append(held, t)
		us += touchCost(t.F32())
	}
	us /= float64(probe / chunk)
	note = fmt.Sprintf("touched %.1f GiB past free memory, evicting %s from the page cache", gib(probe), opts.Dir)
	return max(us, 0.01), note, nil
}

// CheckReclaimDir says whether MeasureReclaim can use dir (small: at the
// test size), before a calibration spends its minute on other probes.
func CheckReclaimDir(dir string, small bool) error {
	probe := int64(reclaimProbeBytes)
	if small {
		probe = 4 << 20
	}
	_, err := reclaimFiles(dir, probe)
	return err
}

// reclaimFiles lists dir's files and checks that they hold enough page
// cache for the kernel to evict for probe bytes.
func reclaimFiles(dir string, probe int64) ([]string, error) {
	files, total, err := probeFiles(dir)
	if err != nil {
		return nil, err
	}
	if want := probe + probe/4; total < want {
		return nil, fmt.Errorf("reclaim probe: %s holds %.1f GiB of files; the probe evicts %.1f GiB of page cache: name a bigger checkpoint folder",
			dir, gib(total), gib(want))
	}
	return files, nil
}

// probeFiles lists the regular files under dir and their total size.
func probeFiles(dir string) ([]string, int64, error) {
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
		return nil, 0, fmt.Errorf("reclaim probe: %w", err)
	}
	if len(files) == 0 {
		return nil, 0, fmt.Errorf("reclaim probe: %s holds no files: name a checkpoint folder", dir)
	}
	return files, total, nil
}

// fillCache reads files until done says stop or they run out, and returns
// the bytes read.
func fillCache(files []string, done func(read int64) bool) (int64, error) {
	buf := make([]byte, 8<<20)
	var read int64
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return read, fmt.Errorf("reclaim probe: %w", err)
		}
		for !done(read) {
			n, err := f.Read(buf)
			read += int64(n)
			if errors.Is(err, io.EOF) || n == 0 {
				break
			}
			if err != nil {
				f.Close()
				return read, fmt.Errorf("reclaim probe: read %s: %w", path, err)
			}
		}
		f.Close()
		if done(read) {
			break
		}
	}
	return read, nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }
