package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/hwprofile"
)

func init() {
	register("calibrate", "measure this machine (GEMM, attention, conv, copies, disk) for the planner", runCalibrate)
}

// calibration is what --json prints: the stored profile, plus the GEMM
// rates by implementation name for a quick comparison.
type calibration struct {
	hwprofile.Profile
	GemmGFLOPS map[string]float64 `json:"gemm_gflops"`
	Path       string             `json:"path"`
}

func runCalibrate(e *env, args []string) error {
	fs := newFlags(e, "calibrate", "[--json] [--FIGURE VALUE ...]")
	asJSON := fs.Bool("json", false, "print the profile as JSON")
	small := fs.Bool("quick", false, "tiny probes (seconds, figures dominated by overheads)")
	ckptDir := fs.String("checkpoint", "", "also run the probes that need a model `folder` of 3 GiB or more: a sustained read of it from disk, then the first touch past free memory, evicting its pages (a minute; holds the free memory plus 2 GiB)")
	overrides := map[string]*float64{}
	for _, f := range hwprofile.Flags() {
		overrides[f.Name] = fs.Float64(f.Name, 0, "use this instead of measuring: "+f.Help)
	}
	if err := e.parse(fs, args); err != nil {
		return err
	}
	log := func(format string, a ...any) { fmt.Fprintf(e.stderr, "calibrate: "+format+"\n", a...) }
	if *asJSON {
		log = nil
	}
	if *ckptDir != "" {
		if err := hwprofile.CheckCheckpointDir(*ckptDir, *small); err != nil {
			return asUser(err)
		}
	}
	p, err := hwprofile.Measure(hwprofile.Options{Small: *small, Log: log})
	if err != nil {
		return err
	}
	if err := checkpointFigures(&p, *ckptDir, *small, log); err != nil {
		return err
	}
	for name, v := range overrides {
		if *v != 0 {
			if err := p.Set(name, *v); err != nil {
				return asUser(err)
			}
		}
	}
	if err := hwprofile.Save(p, ""); err != nil {
		return err
	}
	path, _ := hwprofile.Path()
	if *asJSON {
		c := calibration{Profile: p, GemmGFLOPS: map[string]float64{}, Path: path}
		for _, g := range p.Gemm {
			c.GemmGFLOPS[g.Name] = g.GFLOPS
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	if m := p.Machine; m != nil {
		fmt.Fprintf(e.stdout, "machine %s (flags: %s)\n", m, strings.Join(m.Flags, " "))
	}
	for _, g := range p.Gemm {
		fmt.Fprintf(e.stdout, "gemm %-9s %7.1f GFLOP/s\n", g.Name, g.GFLOPS)
	}
	if p.FMAPeakGFLOPS > 0 {
		fmt.Fprintf(e.stdout, "fma peak (%s) %.1f GFLOP/s: gemm go at %.0f%% of it\n",
			p.FMAPeakISA, p.FMAPeakGFLOPS, 100*p.GEMMGFLOPS("go")/p.FMAPeakGFLOPS)
	}
	fmt.Fprintf(e.stdout, "attention %.1f GFLOP/s, conv %.1f GFLOP/s, elementwise %.1f GB/s\n", p.AttentionGFLOPS, p.ConvGFLOPS, p.MemGBps)
	fmt.Fprintf(e.stdout, "host->device %.2f GB/s (bf16->f32), disk %.2f GB/s, page cache %.2f GB/s\n", p.H2DGBps, p.DiskGBps, p.PageCacheGBps)
	fmt.Fprintf(e.stdout, "first touch of fresh memory %.2f µs per 4 KiB page (%.2f µs where the process unmapped it moments before)\n", p.FirstTouchUsPerPage, p.WarmTouchUsPerPage)
	fmt.Fprintln(e.stdout, fragmentLine(p))
	if p.CheckpointNote != "" {
		fmt.Fprintf(e.stdout, "disk sustained %.2f GB/s after a %.2f GB burst, first touch past free memory %.2f µs per 4 KiB page (%s)\n",
			p.DiskSustainedGBps, p.DiskBurstGB, p.ReclaimTouchUsPerPage, p.CheckpointNote)
	}
	fmt.Fprintf(e.stdout, "saved %s\n", path)
	return nil
}

// fragmentLine says what a 4 KiB page out of fragmented free memory cost
// and whether devices will use those pages first.
func fragmentLine(p hwprofile.Profile) string {
	if p.FragmentTouchUsPerPage == 0 {
		return "4 KiB pages from fragmented free memory: not measured (too little of it free now); devices use huge pages"
	}
	use := "devices use huge pages (not cheaper by half)"
	if p.SmallPagesFirst() {
		use = "devices use them before huge pages"
	}
	return fmt.Sprintf("4 KiB pages from fragmented free memory %.2f µs per page: %s", p.FragmentTouchUsPerPage, use)
}

// checkpointFigures runs the probes that need a checkpoint when dir names
// one. Otherwise it keeps what an earlier calibrate measured with one,
// since those probes run only when asked.
func checkpointFigures(p *hwprofile.Profile, dir string, small bool, log func(string, ...any)) error {
	if dir == "" {
		if old, found, err := hwprofile.LoadOrDefault(""); err == nil && found && old.CheckpointNote != "" {
			p.SetCheckpoint(old.Checkpoint())
		}
		return nil
	}
	f, err := hwprofile.MeasureCheckpoint(hwprofile.CheckpointOptions{Dir: dir, Small: small, Log: log})
	if err != nil {
		return asUser(err)
	}
	p.SetCheckpoint(f)
	return nil
}

var hardwareNoteOnce sync.Once

// noteHardware prints to stderr, once per process, the hardware profile's
// note (hwprofile.LoadOrDefault's one line on a profile it set aside or
// cannot place), a FERRY_CPU value the CPU backend ignored and a FERRY_GEMM
// the GEMM selection could not honour.
func noteHardware(p hwprofile.Profile) { writeHardwareNote(os.Stderr, p, &hardwareNoteOnce) }

// writeHardwareNote is noteHardware to w, once per once.
func writeHardwareNote(w io.Writer, p hwprofile.Profile, once *sync.Once) {
	once.Do(func() {
		for _, s := range []string{cpu.ISAWarning(), gemm.EnvWarning(), p.Note} {
			if s != "" {
				fmt.Fprintf(w, "ferry: note: %s\n", s)
			}
		}
	})
}
