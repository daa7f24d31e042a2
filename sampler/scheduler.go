// Package sampler holds the noise schedulers that drive a diffusion denoising
// loop, written to match diffusers numerically: UniPCMultistepScheduler as
// WanPipeline configures it (flow prediction, flow sigmas) and
// FlowMatchEulerDiscreteScheduler (static or resolution-dependent shift).
//
// The names follow diffusers (sigmas, timesteps, step index, solver order) so
// the Python source can be read side by side with this code. Where diffusers
// computes with torch float32 tensors this package rounds to float32 after
// every operation, and where it computes with Python floats or float64 numpy
// arrays this package stays in float64; the golden vectors in testdata check
// that the two agree.
//
// Latents are host []float32 of any shape; the schedulers work element-wise.
// A Step writes the new sample over the sample it is given and allocates
// nothing after the first step (the history buffers are sized then).
package sampler

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Scheduler is one diffusers scheduler: it owns the sigma schedule and turns
// each model output into the next latent sample.
//
// Use: SetTimesteps (or SetTimestepsWith), then for i := range Timesteps():
// run the model at Timesteps()[i] and call Step. Reset starts the same
// schedule again (a second request) without recomputing it.
type Scheduler interface {
	// SetTimesteps computes the schedule for n inference steps and resets
	// the stepping state.
	SetTimesteps(n int) error
	// SetTimestepsWith is SetTimesteps with diffusers' optional arguments
	// (custom sigmas, the dynamic-shift mu). n may be 0 when opts.Sigmas is set.
	SetTimestepsWith(n int, opts ScheduleOptions) error
	// Timesteps returns the timesteps as the denoiser receives them (the Wan
	// and Flux transformers take the timestep as a float32 tensor). One per step.
	Timesteps() []float32
	// IntTimesteps returns the exact int64 timesteps where diffusers stores
	// them as int64 (UniPC); ok is false for schedulers with float timesteps.
	IntTimesteps() (ts []int64, ok bool)
	// Sigmas returns the float32 sigma schedule, one more than the steps
	// (the final sigma, usually 0).
	Sigmas() []float32
	// StepIndex returns the index of the next Step (diffusers' step_index).
	StepIndex() int
	// SetBeginIndex makes the next Step start at index i instead of 0
	// (diffusers' set_begin_index, for image-to-image). Call it after
	// SetTimesteps or Reset and before the first Step.
	SetBeginIndex(i int) error
	// Step advances one step: it reads the model output for the current
	// timestep and overwrites sample with the next sample. Both slices must
	// have the same length, which must not change within a schedule.
	Step(modelOutput, sample []float32) error
	// NoiseScales returns the factors that noise a clean sample to step i,
	// alpha_t * sample + sigma_t * noise (diffusers' add_noise, or
	// scale_noise for flow matching).
	NoiseScales(i int) (alpha, sigma float32)
	// Order is diffusers' scheduler.order: model evaluations per Step (1 for
	// both schedulers here; UniPC's multistep order is its SolverOrder).
	Order() int
	// Reset forgets the stepping state (history, step index) and keeps the
	// schedule.
	Reset()
}

// Noisy is a scheduler whose steps may draw noise (FlowMatchEuler with
// stochastic_sampling): when Stochastic, SetNoise must be called before
// the first Step.
type Noisy interface {
	Stochastic() bool
	SetNoise(fill func(dst []float32))
}

// ScheduleOptions are set_timesteps' optional arguments.
type ScheduleOptions struct {
	// Sigmas replaces the default unshifted sigma schedule (FluxPipeline passes
	// linspace(1, 1/n, n)); the shift is still applied. Nil means the default.
	Sigmas []float64
	// Mu is the resolution-dependent shift (see CalculateShift). Required,
	// and only accepted, when the config has use_dynamic_shifting.
	Mu *float64
}

// ErrNotSet is returned by Step before SetTimesteps.
var ErrNotSet = errors.New("sampler: SetTimesteps must be called before Step")

// ErrDone is returned by Step after the last step of the schedule.
var ErrDone = errors.New("sampler: all steps of the schedule are done (call Reset or SetTimesteps)")

// Class names as diffusers writes them in scheduler_config.json.
const (
	ClassUniPC          = "UniPCMultistepScheduler"
	ClassFlowMatchEuler = "FlowMatchEulerDiscreteScheduler"
)

// FromConfig builds the scheduler named by the `_class_name` of a diffusers
// scheduler_config.json.
func FromConfig(raw []byte) (Scheduler, error) {
	var head struct {
		ClassName string `json:"_class_name"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("sampler: scheduler config: %w", err)
	}
	switch head.ClassName {
	case ClassUniPC:
		cfg, err := ParseUniPCConfig(raw)
		if err != nil {
			return nil, err
		}
		return NewUniPC(cfg)
	case ClassFlowMatchEuler:
		cfg, err := ParseFlowMatchEulerConfig(raw)
		if err != nil {
			return nil, err
		}
		return NewFlowMatchEuler(cfg)
	case "":
		return nil, errors.New("sampler: scheduler config has no _class_name")
	default:
		return nil, fmt.Errorf("sampler: scheduler class %q is not supported (supported: %s, %s)",
			head.ClassName, ClassUniPC, ClassFlowMatchEuler)
	}
}

// CalculateShift is FluxPipeline's calculate_shift: the dynamic-shift mu for
// an image of imageSeqLen latent tokens, interpolated linearly between
// (baseSeqLen, baseShift) and (maxSeqLen, maxShift). Python-float math.
func CalculateShift(imageSeqLen, baseSeqLen, maxSeqLen int, baseShift, maxShift float64) float64 {
	m := (maxShift - baseShift) / float64(maxSeqLen-baseSeqLen)
	b := baseShift - float64(m*float64(baseSeqLen))
	return float64(float64(imageSeqLen)*m) + b
}
