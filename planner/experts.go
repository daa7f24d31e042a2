package planner

import (
	"encoding/json"
	"fmt"
	"slices"

	"ferry/residency"
	"ferry/sampler"
)

// Wan 2.2 A14B runs two experts of one architecture: the transformer
// while the timestep is at or above the boundary, transformer_2 after it,
// under one scheduler. For the plan the switch is a residency event known
// before anything runs: its step is a function of the steps, the shift and
// the boundary (SwitchStep). At the switch pipeline/wan retires the first
// expert (it leaves the device and the host tier), and during the last
// pass before it the first expert's prefetch runs on into the second's
// first blocks (residency.Executor.Handoff), so that they are ready.

// TwoExperts says the profile is Wan 2.2 A14B's.
func (p *Profile) TwoExperts() bool { return p.Boundary > 0 && p.Component(Transformer2) != nil }

// AddExpert makes p a two-expert profile: transformer_2, a copy of the
// transformer's blocks (the experts share the architecture), runs below
// boundary · num_train_timesteps.
func (p *Profile) AddExpert(boundary float64) error {
	if boundary <= 0 || boundary > 1 {
		return fmt.Errorf("planner: boundary_ratio %g: want a number in (0, 1]", boundary)
	}
	tr := p.Component(Transformer)
	if tr == nil {
		return fmt.Errorf("planner: profile %s has no transformer", p.Name)
	}
	if p.Component(Transformer2) == nil {
		c := &ComponentProfile{Name: Transformer2, Storage: tr.Storage, Cached: tr.Cached}
		for _, b := range tr.Blocks {
			nb := b
			nb.Name = Transformer2 + b.Name[len(Transformer):]
			nb.Tensors, nb.Matrix = slices.Clone(b.Tensors), slices.Clone(b.Matrix)
			c.Blocks = append(c.Blocks, nb)
		}
		i := slices.Index(p.Components, tr)
		p.Components = slices.Insert(p.Components, i+1, c)
	}
	p.Boundary = boundary
	return nil
}

// SwitchStep is the first step the low-noise expert runs for a request of
// steps steps with the scheduler's shift overridden by flowShift (0: the
// config's): the first whose timestep is below boundary ·
// num_train_timesteps, compared in float32 as torch compares them. It is
// steps when the boundary is never crossed, and for one transformer.
func (p *Profile) SwitchStep(steps int, flowShift float64) (int, error) {
	if !p.TwoExperts() {
		return steps, nil
	}
	raw := p.Scheduler
	if raw == nil {
		var err error
		if raw, err = json.Marshal(sampler.WanUniPCConfig(3)); err != nil {
			return 0, err
		}
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return 0, fmt.Errorf("planner: scheduler config: %w", err)
	}
	if _, ok := m["_class_name"]; !ok {
		m["_class_name"] = sampler.ClassUniPC // Wan's, as the built-in profiles give it
	}
	if flowShift > 0 {
		key := "flow_shift"
		if m["_class_name"] == sampler.ClassFlowMatchEuler {
			key = "shift" // FlowMatchEulerDiscreteScheduler's name for it
		}
		m[key] = flowShift
	}
	numTrain := 1000.0
	if n, ok := m["num_train_timesteps"].(float64); ok {
		numTrain = n
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	sched, err := sampler.FromConfig(raw)
	if err != nil {
		return 0, fmt.Errorf("planner: %w", err)
	}
	if err := sched.SetTimesteps(steps); err != nil {
		return 0, fmt.Errorf("planner: %w", err)
	}
	boundary := float32(p.Boundary * numTrain)
	for i, t := range sched.Timesteps() {
		if t < boundary {
			return i, nil
		}
	}
	return steps, nil
}

// Complete returns plan with transformer_2 placed as the transformer is
// when the plan does not name it (the experts are the same size and run
// one after the other); plan itself when nothing is missing.
func Complete(p *Profile, plan *residency.Plan) *residency.Plan {
	plan = completeImage(p, plan)
	if plan == nil || p == nil || p.Component(Transformer2) == nil {
		return plan
	}
	if _, ok := plan.Components[Transformer2]; ok {
		return plan
	}
	c, ok := plan.Components[Transformer]
	if !ok {
		return plan // both default to resident
	}
	out := clonePlan(plan)
	if c.Blocks != nil {
		c.Blocks = renameBlocks(c.Blocks)
	}
	out.Components[Transformer2] = c
	return out
}

// renameBlocks maps single-block placements of the transformer onto the
// same blocks of transformer_2.
func renameBlocks(m map[string]residency.Placement) map[string]residency.Placement {
	out := map[string]residency.Placement{}
	for name, pl := range m {
		if len(name) > len(Transformer) && name[:len(Transformer)+1] == Transformer+"." {
			out[Transformer2+name[len(Transformer):]] = pl
		}
	}
	return out
}

// setTransformer places both experts (the search keeps them alike).
func setTransformer(p *Profile, plan *residency.Plan, c residency.ComponentPlan) {
	plan.Components[Transformer] = c
	if p.Component(Transformer2) != nil {
		plan.Components[Transformer2] = c
	}
}
