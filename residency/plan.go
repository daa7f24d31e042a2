package residency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Placement says where a component's weights live while the pipeline runs.
type Placement string

// The placements.
const (
	// Resident: on the device for the whole run, loaded at first use.
	Resident Placement = "resident"
	// Onload: model-level offload. The whole component moves to the device
	// when one of its blocks first runs and moves out when another
	// component needs the room.
	Onload Placement = "onload"
	// Stream: block by block. Before a block runs its weights are on the
	// device; the next Prefetch blocks are copied while it computes; the
	// first Persistent blocks stay. Prefetch 0 is sequential offload.
	Stream Placement = "stream"
	// Host: the component computes on the host CPU from host memory and
	// never occupies the device (on the CPU backend, the host budget pays).
	Host Placement = "host"
)

// Tier is where the copy of a non-resident component lives between uses.
type Tier string

// The tiers.
const (
	// TierHost keeps the weights in host RAM in their storage dtype (counted
	// against the host budget), read from disk once.
	TierHost Tier = "host"
	// TierDisk reads the weights from the checkpoint every time they move,
	// and drops the page cache after.
	TierDisk Tier = "disk"
)

// Plan is a residency schedule: a placement for every component (and
// optionally for single blocks). It is a plain value, written as JSON or
// YAML.
type Plan struct {
	Name       string                   `json:"name,omitempty" yaml:"name,omitempty"`
	Components map[string]ComponentPlan `json:"components" yaml:"components"`
	// Run holds the activation-side choices that come with a schedule.
	Run RunOptions `json:"run,omitempty" yaml:"run,omitempty"`
}

// CFG modes: how the conditional and unconditional branches of
// classifier-free guidance are computed.
const (
	// CFGBatched runs both branches as one batch of 2 (faster, twice the
	// activations).
	CFGBatched = "batched"
	// CFGSequential runs them one after the other (half the activations).
	CFGSequential = "sequential"
)

// RunOptions are the activation-side parts of a plan. Apart from VAE
// tiling (which blends overlapping tiles, as diffusers' tiled decode does)
// none of them changes the result.
type RunOptions struct {
	// FFNChunk is the number of tokens the transformer's feed-forward
	// processes at a time; 0 processes all at once.
	FFNChunk int `json:"ffn_chunk,omitempty" yaml:"ffn_chunk,omitempty"`
	// CFG is CFGBatched (default) or CFGSequential.
	CFG string `json:"cfg,omitempty" yaml:"cfg,omitempty"`
	// VAETile is the VAE's spatial tile in output pixels (square), 0 for
	// untiled; VAEStride is the tile stride (default 3/4 of the tile).
	VAETile   int `json:"vae_tile,omitempty" yaml:"vae_tile,omitempty"`
	VAEStride int `json:"vae_stride,omitempty" yaml:"vae_stride,omitempty"`
}

// ComponentPlan places one component.
type ComponentPlan struct {
	Placement Placement `json:"placement" yaml:"placement"`
	// Tier of the non-resident copy (onload, stream). Default host.
	Tier Tier `json:"tier,omitempty" yaml:"tier,omitempty"`
	// Prefetch is k, the number of blocks copied ahead (stream).
	Prefetch int `json:"prefetch,omitempty" yaml:"prefetch,omitempty"`
	// Persistent is n, the number of leading blocks kept resident (stream).
	Persistent int `json:"persistent,omitempty" yaml:"persistent,omitempty"`
	// Blocks overrides the placement of single blocks by name, e.g. pin one
	// block resident inside a streamed component. Only Resident and Stream
	// are meaningful here.
	Blocks map[string]Placement `json:"blocks,omitempty" yaml:"blocks,omitempty"`
}

// Moves says the component's weights move to the compute location for use
// and leave it after (onload, stream), from a copy on their tier.
func (c ComponentPlan) Moves() bool { return c.Placement == Stream || c.Placement == Onload }

// FromHostCopy says the weights move from a host-tier copy, read from the
// checkpoint at the first load.
func (c ComponentPlan) FromHostCopy() bool { return c.Moves() && c.Tier != TierDisk }

// FromDisk says the weights are read from the checkpoint at every load;
// from a block's second load on, the executor drops the pages it read.
func (c ComponentPlan) FromDisk() bool { return c.Moves() && c.Tier == TierDisk }

// For returns the plan for a component; components the plan does not name
// are resident.
func (p *Plan) For(component string) ComponentPlan {
	if p != nil {
		if c, ok := p.Components[component]; ok {
			if c.Tier == "" {
				c.Tier = TierHost
			}
			return c
		}
	}
	return ComponentPlan{Placement: Resident, Tier: TierHost}
}

// Validate checks every field and says what is wrong and how to fix it.
func (p *Plan) Validate() error {
	if err := p.Run.validate(); err != nil {
		return err
	}
	names := make([]string, 0, len(p.Components))
	for n := range p.Components {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := p.Components[n]
		switch c.Placement {
		case Resident, Onload, Stream, Host:
		case "":
			return fmt.Errorf("plan: component %q has no placement (want resident, onload, stream or host)", n)
		default:
			return fmt.Errorf("plan: component %q has unknown placement %q (want resident, onload, stream or host)", n, c.Placement)
		}
		switch c.Tier {
		case "", TierHost, TierDisk:
		default:
			return fmt.Errorf("plan: component %q has unknown tier %q (want host or disk)", n, c.Tier)
		}
		if c.Prefetch < 0 || c.Persistent < 0 {
			return fmt.Errorf("plan: component %q: prefetch and persistent must be >= 0", n)
		}
		if c.Placement != Stream && (c.Prefetch != 0 || c.Persistent != 0) {
			return fmt.Errorf("plan: component %q: prefetch/persistent only apply to placement stream", n)
		}
		for b, bp := range c.Blocks {
			if bp != Resident && bp != Stream {
				return fmt.Errorf("plan: block %q of %q: placement %q (a single block can be resident or stream)", b, n, bp)
			}
		}
	}
	return nil
}

// ParsePlan reads a plan from JSON or YAML (JSON is YAML, but JSON input
// gets JSON's stricter error messages).
func ParsePlan(data []byte) (*Plan, error) {
	var p Plan
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("plan: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
	}
	if p.Components == nil {
		p.Components = map[string]ComponentPlan{}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// LoadPlan reads a plan file.
func LoadPlan(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	p, err := ParsePlan(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// YAML renders the plan as YAML.
func (p *Plan) YAML() ([]byte, error) { return yaml.Marshal(p) }

// Uniform returns a plan placing every named component the same way.
func Uniform(name string, c ComponentPlan, components ...string) *Plan {
	p := &Plan{Name: name, Components: map[string]ComponentPlan{}}
	for _, n := range components {
		p.Components[n] = c
	}
	return p
}

func (r RunOptions) validate() error {
	switch r.CFG {
	case "", CFGBatched, CFGSequential:
	default:
		return fmt.Errorf("plan: run.cfg %q (want %s or %s)", r.CFG, CFGBatched, CFGSequential)
	}
	if r.FFNChunk < 0 {
		return fmt.Errorf("plan: run.ffn_chunk %d must be >= 0", r.FFNChunk)
	}
	if r.VAETile < 0 || r.VAEStride < 0 {
		return fmt.Errorf("plan: run.vae_tile and run.vae_stride must be >= 0")
	}
	if r.VAETile > 0 && (r.VAETile%8 != 0 || r.VAEStride%8 != 0) {
		return fmt.Errorf("plan: run.vae_tile %d and run.vae_stride %d must be multiples of 8 (the VAE's scale)", r.VAETile, r.VAEStride)
	}
	if r.VAEStride > r.VAETile {
		return fmt.Errorf("plan: run.vae_stride %d exceeds run.vae_tile %d (tiles would leave gaps)", r.VAEStride, r.VAETile)
	}
	return nil
}

// JSON renders the plan as indented JSON.
func (p *Plan) JSON() ([]byte, error) { return json.MarshalIndent(p, "", "  ") }
