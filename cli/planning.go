package cli

import (
	"ferry/backend/cpu"
	"flag"
	"fmt"
	"strings"

	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
)

// planFlags choose a plan: --plan NAME|FILE, the FastVideo flags, and the
// options some presets take.
type planFlags struct {
	spec           string
	blocksPerGroup int
	useStream      bool
	vramLimit      sizeFlag
	force          bool
	dtype          string
	fastVideo      map[string]*bool
	hwOverrides    map[string]*float64
}

// fastVideoHelp says what each FastVideo flag becomes in a ferry plan, as
// the README's table of flags from other tools does.
var fastVideoHelp = map[string]string{
	planner.FlagDiTLayerwiseOffload:    "the transformer streamed block by block, prefetch 1",
	planner.FlagDiTCPUOffload:          "the transformer streamed block by block, prefetch 0",
	planner.FlagTextEncoderCPUOffload:  "the text encoder streamed block by block, prefetch 0",
	planner.FlagVAECPUOffload:          "the VAE moved to the device whole for the decode",
	planner.FlagImageEncoderCPUOffload: "the image encoder computed on the host",
	planner.FlagPinCPUMemory:           "accepted; the CPU's host tier needs no pinning",
	planner.FlagUseFSDPInference:       "an error: ferry runs on one device so far",
}

func (p *planFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&p.spec, "plan", "", "residency plan: a preset ("+strings.Join(planner.PresetNames(), ", ")+") or a plan file (.json/.yaml); default auto, the fastest plan predicted to fit the budgets. level0..level3 are Smart-Diffusion's low_mem_level; model-offload, sequential-offload and group-offload diffusers' offload modes; vram-limit DiffSynth's vram_limit")
	fs.StringVar(&p.dtype, "dtype", "auto", "compute dtype of the GEMMs: bf16 (weights stay bf16, activations rounded at the GEMM input) or fp32; auto: bf16 where the CPU has AVX512-BF16 and ferry calibrate did not measure it slower than fp32 here")
	fs.BoolVar(&p.force, "force", false, "run a plan even when it is predicted not to fit the budgets")
	fs.IntVar(&p.blocksPerGroup, "blocks-per-group", 1, "with --plan group-offload: blocks per group (diffusers' num_blocks_per_group)")
	fs.BoolVar(&p.useStream, "use-stream", false, "with --plan group-offload: fetch the next group while this one computes (diffusers' use_stream)")
	fs.Var(&p.vramLimit, "vram-limit", "with --plan vram-limit (DiffSynth's vram_limit): as much resident as fits this, the rest streamed (default --device-mem)")
	p.fastVideo = map[string]*bool{}
	for _, name := range planner.FlagNames() {
		p.fastVideo[name] = fs.Bool(name, false, "FastVideo's --"+name+": "+fastVideoHelp[name])
	}
	p.hwOverrides = map[string]*float64{}
	for _, f := range hwprofile.Flags() {
		p.hwOverrides[f.Name] = fs.Float64(f.Name, 0, "override the calibrated "+f.Help)
	}
}

// fastVideoSet lists the FastVideo flags given.
func (p *planFlags) fastVideoSet() []string {
	var on []string
	for _, name := range planner.FlagNames() {
		if *p.fastVideo[name] {
			on = append(on, "--"+name)
		}
	}
	return on
}

// hardware is the calibrated profile (or the built-in default), with the
// read rate measured on the model's checkpoint (planner.MeasureFolder;
// none for a model the planner does not profile, prof nil) and then the
// command line's overrides.
func (p *planFlags) hardware(prof *planner.Profile) (hwprofile.Profile, error) {
	hw, _, err := hwprofile.LoadOrDefault("")
	if err != nil {
		return hw, asUser(fmt.Errorf("%w (run ferry calibrate again)", err))
	}
	noteHardware(hw)
	if prof != nil {
		hw.UseCheckpointRead(prof.DiskRead.Bytes, prof.DiskRead.GBps(), prof.DiskRead.Direct)
	}
	for name, v := range p.hwOverrides {
		if *v != 0 {
			if err := hw.Set(name, *v); err != nil {
				return hw, asUser(err)
			}
		}
	}
	return hw, nil
}

// planningBudgets are the budgets the planner plans for: the host budget
// defaults to this machine's memory less the device budget and 1 GiB for
// the process itself.
func planningBudgets(device, host int64) planner.Budgets {
	m := hwprofile.ReadMemory()
	if host == 0 && m.Total > 0 {
		host = max(m.Total-device-1<<30, 1<<30)
	}
	return planner.Budgets{DeviceBytes: device, HostBytes: host, RSSBytes: m.Total, FreeBytes: m.Free, CacheBytes: m.FileCache,
		FragmentedBytes: cpu.FragmentedFree()}
}

// planned is a plan with its prediction.
type planned struct {
	plan *residency.Plan
	pred *planner.Prediction
	// smallPages: the devices take 4 KiB pages out of fragmented free
	// memory first, as the hardware profile says (and the prediction
	// prices).
	smallPages bool
}

// computeDType parses --dtype; auto is resolved once (it reads the
// hardware profile) and kept as the dtype it chose.
func (p *planFlags) computeDType() (dtype.DType, error) {
	dt, err := parseComputeDType(p.dtype)
	if err == nil {
		p.dtype = strings.ToLower(dt.String())
	}
	return dt, err
}

// parseComputeDType reads a --dtype value: bf16, fp32 or auto (bf16 where
// the CPU multiplies bf16 natively, unless this machine's hardware profile
// measured the bf16 GEMM slower than the float32 one).
func parseComputeDType(s string) (dtype.DType, error) {
	dt, err := pipeline.ParseComputeDType(s, func() bool {
		hw, _, err := hwprofile.LoadOrDefault("")
		return err == nil && hw.BF16Slower()
	})
	if err != nil {
		return 0, userf("--dtype %v", err)
	}
	return dt, nil
}

// resolve builds the plan the flags ask for and predicts it.
func (p *planFlags) resolve(prof *planner.Profile, req planner.Request, b planner.Budgets) (planned, error) {
	hw, err := p.hardware(prof)
	if err != nil {
		return planned{}, err
	}
	if prof.Compute, err = p.computeDType(); err != nil {
		return planned{}, err
	}
	var plan *residency.Plan
	if on := p.fastVideoSet(); len(on) > 0 {
		if p.spec != "" {
			return planned{}, userf("give either --plan or FastVideo flags (%s), not both", strings.Join(on, " "))
		}
		if plan, err = planner.FlagPlan(on); err != nil {
			return planned{}, asUser(err)
		}
	} else {
		opts := planner.PresetOptions{Profile: prof, HW: hw, Request: req, Budgets: b,
			VRAMLimit: p.vramLimit.bytes, BlocksPerGroup: p.blocksPerGroup, UseStream: p.useStream}
		if plan, err = planner.Resolve(p.spec, opts); err != nil {
			// An unknown preset, a bad plan file or a budget no plan fits:
			// each is the user's to fix, and each error says how.
			return planned{}, asUser(err)
		}
	}
	// transformer_2 (Wan 2.2 A14B) is placed as the transformer where the
	// plan does not name it.
	plan = planner.Complete(prof, plan)
	pred, err := planner.Predict(prof, hw, plan, req, b)
	if err != nil {
		return planned{}, asUser(err)
	}
	if !pred.Fits && !p.force {
		return planned{}, userf("plan %s is predicted not to fit: %s (raise --device-mem/--host-mem, use --plan auto, or --force to run it anyway)", planName(plan), pred.Problem)
	}
	return planned{plan: plan, pred: &pred, smallPages: hw.SmallPagesFirst()}, nil
}

func planName(p *residency.Plan) string {
	if p.Name != "" {
		return p.Name
	}
	return describePlan(p)
}
