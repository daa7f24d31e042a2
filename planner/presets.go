package planner

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"ferry/hwprofile"
	"ferry/residency"
)

// PresetOptions carry what some presets need beyond their name.
type PresetOptions struct {
	// Profile, HW, Request and Budgets are needed by "vram-limit" and
	// "auto", which size the plan for a model, machine and request.
	Profile *Profile
	HW      hwprofile.Profile
	Request Request
	Budgets Budgets
	// VRAMLimit is vram-limit's limit in bytes (0: Budgets.DeviceBytes).
	VRAMLimit int64
	// BlocksPerGroup and UseStream are group-offload's
	// num_blocks_per_group (default 1) and use_stream.
	BlocksPerGroup int
	UseStream      bool
}

// VAE tiling the presets use: diffusers' AutoencoderKLWan defaults (256
// pixel tiles every 192).
const (
	presetVAETile   = 256
	presetVAEStride = 192
)

// presetEntry is a named plan builder with its description.
type presetEntry struct {
	name, help string
	build      func(o PresetOptions) (*residency.Plan, error)
}

// presetTable lists the presets (a function, not a variable: "auto" calls
// Search, which evaluates the presets).
func presetTable() []presetEntry {
	return []presetEntry{
		{"auto", "the fastest plan that fits the budgets (Search); the default", autoPreset},
		{"level0", "Smart-Diffusion low_mem_level 0: everything resident", func(PresetOptions) (*residency.Plan, error) { return level(0), nil }},
		{"level1", "level 0 + VAE tiling", func(PresetOptions) (*residency.Plan, error) { return level(1), nil }},
		{"level2", "level 1 + the text encoder computed on the host", func(PresetOptions) (*residency.Plan, error) { return level(2), nil }},
		{"level3", "level 2 + the transformer streamed block by block (prefetch 1), CFG branches one after the other and the feed-forward chunked, in place of activation offload", func(PresetOptions) (*residency.Plan, error) { return level(3), nil }},
		{"resident", "every component resident (level0 without VAE tiling)", func(PresetOptions) (*residency.Plan, error) {
			return named("resident", residency.Uniform("", residency.ComponentPlan{Placement: residency.Resident}, presetComponents()...)), nil
		}},
		{"onload", "every component moved to the device whole when used (model-offload)", func(PresetOptions) (*residency.Plan, error) {
			return named("onload", residency.Uniform("", residency.ComponentPlan{Placement: residency.Onload, Tier: residency.TierHost}, presetComponents()...)), nil
		}},
		{"stream", "every component streamed block by block from host RAM, one block of prefetch", func(PresetOptions) (*residency.Plan, error) {
			return named("stream", residency.Uniform("", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}, presetComponents()...)), nil
		}},
		{"stream-disk", "every component streamed block by block from the checkpoint on disk, one block of prefetch", func(PresetOptions) (*residency.Plan, error) {
			return named("stream-disk", residency.Uniform("", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk, Prefetch: 1}, presetComponents()...)), nil
		}},
		{"model-offload", "diffusers enable_model_cpu_offload: every component moves to the device whole when used and leaves when another needs the room", func(PresetOptions) (*residency.Plan, error) {
			return named("model-offload", residency.Uniform("", residency.ComponentPlan{Placement: residency.Onload, Tier: residency.TierHost}, presetComponents()...)), nil
		}},
		{"sequential-offload", "diffusers enable_sequential_cpu_offload: every block copied in when it runs, nothing prefetched", func(PresetOptions) (*residency.Plan, error) {
			return named("sequential-offload", residency.Uniform("", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost}, presetComponents()...)), nil
		}},
		{"group-offload", "diffusers apply_group_offloading(block_level, num_blocks_per_group=N, use_stream): see GroupOffload", func(o PresetOptions) (*residency.Plan, error) {
			return GroupOffload(o.BlocksPerGroup, o.UseStream)
		}},
		{"vram-limit", "DiffSynth vram_limit: as much resident as fits the limit, the rest streamed", vramLimitPreset},
	}
}

// PresetNames lists the presets' names.
func PresetNames() []string {
	var out []string
	for _, p := range presetTable() {
		out = append(out, p.name)
	}
	return out
}

// PresetHelp describes a preset, "" for an unknown name.
func PresetHelp(name string) string {
	for _, p := range presetTable() {
		if p.name == name {
			return p.help
		}
	}
	return ""
}

// Preset returns the named plan.
func Preset(name string, opts PresetOptions) (*residency.Plan, error) {
	for _, p := range presetTable() {
		if p.name == strings.ToLower(name) {
			plan, err := p.build(opts)
			if err != nil {
				return nil, err
			}
			if err := plan.Validate(); err != nil {
				return nil, fmt.Errorf("preset %s: %w", name, err)
			}
			return plan, nil
		}
	}
	return nil, fmt.Errorf("planner: unknown plan %q (presets: %s; or a plan file)", name, strings.Join(PresetNames(), ", "))
}

func named(name string, p *residency.Plan) *residency.Plan {
	p.Name = name
	return p
}

// level builds Smart-Diffusion's low_mem_level n.
func level(n int) *residency.Plan {
	p := &residency.Plan{Name: fmt.Sprintf("level%d", n), Components: map[string]residency.ComponentPlan{}}
	if n >= 1 {
		p.Run.VAETile, p.Run.VAEStride = presetVAETile, presetVAEStride
	}
	if n >= 2 {
		p.Components[TextEncoder] = residency.ComponentPlan{Placement: residency.Host}
	}
	if n >= 3 {
		p.Components[Transformer] = residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}
		p.Run.CFG = residency.CFGSequential
		p.Run.FFNChunk = 4096
	}
	return p
}

// GroupOffload maps diffusers' block-level group offloading onto the
// executor: every component streams; a group of n blocks moving together
// becomes a prefetch window. Without use_stream a group is loaded when its
// first block runs and nothing beyond it is fetched early: prefetch n-1.
// With use_stream the next group is fetched while this one computes:
// prefetch 2n-1. (The executor's window slides block by block where
// diffusers' jumps group by group; the bytes in flight are the same at the
// group's first block and fewer elsewhere.)
func GroupOffload(blocksPerGroup int, useStream bool) (*residency.Plan, error) {
	if blocksPerGroup == 0 {
		blocksPerGroup = 1
	}
	if blocksPerGroup < 0 {
		return nil, fmt.Errorf("planner: group-offload: --blocks-per-group %d must be >= 1", blocksPerGroup)
	}
	k := blocksPerGroup - 1
	if useStream {
		k = 2*blocksPerGroup - 1
	}
	p := residency.Uniform(fmt.Sprintf("group-offload-%d", blocksPerGroup), residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: k}, presetComponents()...)
	if useStream {
		p.Name += "-stream"
	}
	return p, nil
}

// FastVideo's offload flags, as ferry spells them on the command line.
const (
	FlagDiTLayerwiseOffload    = "dit-layerwise-offload"
	FlagDiTCPUOffload          = "dit-cpu-offload"
	FlagTextEncoderCPUOffload  = "text-encoder-cpu-offload"
	FlagVAECPUOffload          = "vae-cpu-offload"
	FlagImageEncoderCPUOffload = "image-encoder-cpu-offload"
	FlagPinCPUMemory           = "pin-cpu-memory"
	FlagUseFSDPInference       = "use-fsdp-inference"
)

// FlagNames lists FastVideo's flags FlagPlan accepts.
func FlagNames() []string {
	return []string{FlagDiTLayerwiseOffload, FlagDiTCPUOffload, FlagTextEncoderCPUOffload, FlagVAECPUOffload,
		FlagImageEncoderCPUOffload, FlagPinCPUMemory, FlagUseFSDPInference}
}

// FlagPlan builds the plan FastVideo's offload flags describe. Flags are
// "--name", "name", or "--name=true|false". The mapping:
//
//	--dit-layerwise-offload      transformer stream, prefetch 1 (FastVideo
//	                             copies the next layer asynchronously)
//	--dit-cpu-offload            transformer stream, prefetch 0 (FSDP CPU
//	                             offload: each layer fetched when it runs)
//	--text-encoder-cpu-offload   text encoder stream, prefetch 0 (likewise)
//	--vae-cpu-offload            VAE onload (moved in for the decode)
//	--image-encoder-cpu-offload  image encoder computed on the host (an
//	                             image-to-video folder's CLIP tower)
//	--pin-cpu-memory             accepted; the host tier needs no pinning
//	                             on the CPU backend
//	--use-fsdp-inference         an error until multi-device runs exist
func FlagPlan(flags []string) (*residency.Plan, error) {
	p := &residency.Plan{Name: "fastvideo", Components: map[string]residency.ComponentPlan{}}
	var on []string
	for _, f := range flags {
		name, value, hasValue := strings.Cut(strings.TrimLeft(f, "-"), "=")
		enabled := true
		if hasValue {
			switch strings.ToLower(value) {
			case "true", "1", "yes":
			case "false", "0", "no":
				enabled = false
			default:
				return nil, fmt.Errorf("planner: --%s=%s: want true or false", name, value)
			}
		}
		if !enabled {
			continue
		}
		stream := func(k int) residency.ComponentPlan {
			return residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: k}
		}
		switch name {
		case FlagDiTLayerwiseOffload:
			p.Components[Transformer] = stream(1)
		case FlagDiTCPUOffload:
			if _, set := p.Components[Transformer]; !set {
				p.Components[Transformer] = stream(0)
			}
		case FlagTextEncoderCPUOffload:
			p.Components[TextEncoder] = stream(0)
		case FlagVAECPUOffload:
			p.Components[VAE] = residency.ComponentPlan{Placement: residency.Onload, Tier: residency.TierHost}
		case FlagImageEncoderCPUOffload:
			p.Components[ImageEncoder] = residency.ComponentPlan{Placement: residency.Host}
		case FlagPinCPUMemory:
		case FlagUseFSDPInference:
			return nil, errors.New("planner: --use-fsdp-inference shards the model over several GPUs; ferry runs on one device so far — drop the flag (use --dit-layerwise-offload to fit a smaller device)")
		default:
			return nil, fmt.Errorf("planner: unknown flag --%s (FastVideo flags: --%s)", name, strings.Join(FlagNames(), ", --"))
		}
		on = append(on, name)
	}
	sort.Strings(on)
	if len(on) > 0 {
		p.Name = "fastvideo:" + strings.Join(on, ",")
	}
	return p, p.Validate()
}

func needSizing(name string, o PresetOptions) error {
	if o.Profile == nil {
		return fmt.Errorf("planner: preset %s needs the model profile, the hardware profile and the request", name)
	}
	return nil
}

func autoPreset(o PresetOptions) (*residency.Plan, error) {
	if err := needSizing("auto", o); err != nil {
		return nil, err
	}
	plan, _, err := Search(o.Profile, o.HW, o.Request, o.Budgets)
	return plan, err
}

// vramLimitPreset is DiffSynth's vram_limit: starting from everything
// streamed with one block prefetched, it makes the VAE, then the text
// encoder resident when they fit the limit, then keeps as many of the
// transformer's leading blocks resident (persistent) as fit.
func vramLimitPreset(o PresetOptions) (*residency.Plan, error) {
	if err := needSizing("vram-limit", o); err != nil {
		return nil, err
	}
	limit := o.VRAMLimit
	if limit <= 0 {
		limit = o.Budgets.DeviceBytes
	}
	if limit <= 0 {
		return named("vram-limit", &residency.Plan{Components: map[string]residency.ComponentPlan{}}), nil
	}
	b := Budgets{DeviceBytes: limit, HostBytes: o.Budgets.HostBytes}
	stream := residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}
	p := named("vram-limit", residency.Uniform("", stream, presetComponents()...))
	fits := func(p *residency.Plan) (bool, error) {
		pred, err := Predict(o.Profile, o.HW, p, o.Request, b)
		return pred.Fits, err
	}
	for _, c := range []string{VAE, TextEncoder} {
		p.Components[c] = residency.ComponentPlan{Placement: residency.Resident}
		ok, err := fits(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			p.Components[c] = stream
		}
	}
	n := len(o.Profile.Component(Transformer).Blocks)
	lo, hi := 0, n // the largest persistent count that fits lies in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		c := stream
		c.Persistent = mid
		p.Components[Transformer] = c
		ok, err := fits(p)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	c := stream
	c.Persistent = lo
	if lo == n {
		c = residency.ComponentPlan{Placement: residency.Resident}
	}
	p.Components[Transformer] = c
	return p, nil
}

// Resolve turns a --plan argument into a plan: a preset name, or else the
// path of a plan file (JSON or YAML). "" is "auto".
func Resolve(spec string, opts PresetOptions) (*residency.Plan, error) {
	if spec == "" {
		spec = "auto"
	}
	if PresetHelp(strings.ToLower(spec)) != "" {
		return Preset(spec, opts)
	}
	if _, err := os.Stat(spec); err != nil {
		return nil, fmt.Errorf("planner: --plan %q is neither a preset (%s) nor a plan file: %w", spec, strings.Join(PresetNames(), ", "), err)
	}
	return residency.LoadPlan(spec)
}
