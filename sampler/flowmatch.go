package sampler

import "fmt"

// FlowMatchEuler is diffusers' FlowMatchEulerDiscreteScheduler (SD3, Flux,
// and Wan's alternative sampler): an Euler step along the predicted velocity,
// sample + (sigma_next - sigma) * model_output, over a shifted sigma schedule.
//
// diffusers shifts twice with a static shift: once when the scheduler is
// built (which sets sigma_min and sigma_max) and again in set_timesteps. This
// type reproduces that, since the golden vectors and every pipeline depend on
// it.
type FlowMatchEuler struct {
	cfg FlowMatchEulerConfig

	// sigmaMin and sigmaMax are the constructor's float32 end points of the
	// training schedule (shifted once unless dynamic shifting is on).
	sigmaMin, sigmaMax float64

	sigmas    []float32 // n+1 values, the last 0 (1 with invert_sigmas)
	timesteps []float32 // n values, sigma * num_train_timesteps in float32

	stepIndex  int
	beginIndex int
	stepped    bool

	// noise fills a buffer with standard-normal values for a
	// stochastic_sampling step (SetNoise), into buf.
	noise func(dst []float32)
	buf   []float32
}

var _ Scheduler = (*FlowMatchEuler)(nil)

// NewFlowMatchEuler builds the scheduler, rejecting configs it does not
// implement.
func NewFlowMatchEuler(cfg FlowMatchEulerConfig) (*FlowMatchEuler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The constructor's training schedule, of which only the ends matter:
	// timesteps nt..1 in float32, sigmas = timesteps / nt in float32.
	nt := float64(cfg.NumTrainTimesteps)
	ends := []float64{r32(r32(nt) / nt), r32(1 / nt)}
	if !cfg.UseDynamicShifting {
		staticShift(ends, cfg.Shift, f32)
	}
	return &FlowMatchEuler{cfg: cfg, sigmaMax: ends[0], sigmaMin: ends[1]}, nil
}

// Config returns the validated config.
func (f *FlowMatchEuler) Config() FlowMatchEulerConfig { return f.cfg }

// Order is diffusers' scheduler.order: one model evaluation per step.
func (f *FlowMatchEuler) Order() int { return 1 }

// SetTimesteps computes the schedule for n steps. A config with dynamic
// shifting needs mu: use SetTimestepsWith.
func (f *FlowMatchEuler) SetTimesteps(n int) error {
	return f.SetTimestepsWith(n, ScheduleOptions{})
}

// SetTimestepsWith computes the schedule with optional custom sigmas and mu.
// Custom sigmas are cast to float32 first and the shift is then computed in
// float32, as diffusers does with the numpy array it makes of them.
func (f *FlowMatchEuler) SetTimestepsWith(n int, opts ScheduleOptions) error {
	sigmas, p, err := f.baseSigmas(n, opts.Sigmas)
	if err != nil {
		return err
	}
	if err := applyShift(sigmas, f.cfg.UseDynamicShifting, f.cfg.Shift, f.cfg.TimeShiftType, opts.Mu, p); err != nil {
		return err
	}
	if t := f.cfg.ShiftTerminal; t != nil && *t != 0 {
		stretchToTerminal(sigmas, *t, p)
	}
	if sigmas, err = f.cfg.reshapeSigmas(sigmas); err != nil {
		return err
	}
	nt := float64(f.cfg.NumTrainTimesteps)
	s32 := toFloat32(sigmas)
	f.timesteps = make([]float32, len(s32))
	end := float32(0)
	if f.cfg.InvertSigmas {
		for i, s := range s32 {
			s32[i] = 1 - s
		}
		end = 1
	}
	for i, s := range s32 {
		f.timesteps[i] = float32(float64(s) * nt)
	}
	f.sigmas = append(s32, end)
	f.Reset()
	return nil
}

// baseSigmas returns the unshifted sigmas and the precision diffusers
// computes them in: the default linspace between the constructor's end
// points is float64, custom sigmas are float32.
func (f *FlowMatchEuler) baseSigmas(n int, custom []float64) ([]float64, precision, error) {
	if custom != nil {
		if n != 0 && n != len(custom) {
			return nil, f32, fmt.Errorf("sampler: %d custom sigmas for %d steps", len(custom), n)
		}
		if len(custom) == 0 {
			return nil, f32, fmt.Errorf("sampler: custom sigmas are empty")
		}
		if err := checkSigmas(custom); err != nil {
			return nil, f32, err
		}
		sigmas := make([]float64, len(custom))
		for i, s := range custom {
			sigmas[i] = r32(s)
		}
		return sigmas, f32, nil
	}
	if n < 1 {
		return nil, f64, fmt.Errorf("sampler: number of inference steps must be positive, got %d", n)
	}
	nt := float64(f.cfg.NumTrainTimesteps)
	sigmas := linspace(f.sigmaMax*nt, f.sigmaMin*nt, n)
	for i := range sigmas {
		sigmas[i] /= nt
	}
	return sigmas, f64, nil
}

// Timesteps returns a copy of the float32 timesteps.
func (f *FlowMatchEuler) Timesteps() []float32 { return append([]float32(nil), f.timesteps...) }

// IntTimesteps reports false: diffusers keeps these timesteps as float32.
func (f *FlowMatchEuler) IntTimesteps() ([]int64, bool) { return nil, false }

// Sigmas returns a copy of the float32 sigmas (steps+1 values).
func (f *FlowMatchEuler) Sigmas() []float32 { return append([]float32(nil), f.sigmas...) }

// StepIndex returns the index of the next Step.
func (f *FlowMatchEuler) StepIndex() int { return f.stepIndex }

// NoiseScales returns scale_noise's 1 - sigma and sigma at step i.
func (f *FlowMatchEuler) NoiseScales(i int) (alpha, sigma float32) {
	return alphaSigma(f.sigmas[i], true)
}

// SetBeginIndex starts the schedule at step i (image-to-image).
func (f *FlowMatchEuler) SetBeginIndex(i int) error {
	return setBegin(&f.beginIndex, &f.stepIndex, i, len(f.timesteps), f.stepped)
}

// Reset restarts the schedule at index 0.
func (f *FlowMatchEuler) Reset() {
	f.stepIndex, f.beginIndex = 0, 0
	f.stepped = false
}

// Stochastic reports whether the config asks for stochastic sampling, whose
// steps need noise (SetNoise).
func (f *FlowMatchEuler) Stochastic() bool { return f.cfg.StochasticSampling }

// SetNoise gives a stochastic scheduler its noise: every Step calls fill
// with a buffer the size of the sample to be filled with standard-normal
// values. diffusers draws them from the generator passed to step (the
// global torch generator in its pipelines), which this package cannot
// reproduce; tests and callers choose their own.
func (f *FlowMatchEuler) SetNoise(fill func(dst []float32)) { f.noise = fill }

// Step overwrites sample with sample + (sigma_next - sigma) * modelOutput,
// or with stochastic sampling with (1 - sigma_next) * x0 + sigma_next *
// noise, where x0 = sample - sigma * modelOutput.
func (f *FlowMatchEuler) Step(modelOutput, sample []float32) error {
	switch {
	case len(f.timesteps) == 0:
		return ErrNotSet
	case f.stepIndex >= len(f.timesteps):
		return ErrDone
	case len(modelOutput) != len(sample):
		return fmt.Errorf("sampler: model output has %d values, sample %d", len(modelOutput), len(sample))
	case f.cfg.StochasticSampling && f.noise == nil:
		return fmt.Errorf("sampler: stochastic_sampling needs noise: call SetNoise before Step")
	}
	f.stepped = true
	sigma, next := f.sigmas[f.stepIndex], f.sigmas[f.stepIndex+1]
	if f.cfg.StochasticSampling {
		f.stochasticStep(modelOutput, sample, sigma, next)
	} else {
		dt := next - sigma
		for j, v := range modelOutput {
			sample[j] += float32(dt * v)
		}
	}
	f.stepIndex++
	return nil
}

// stochasticStep re-noises the predicted x0 to the next sigma with fresh
// noise, in diffusers' float32 operation order.
func (f *FlowMatchEuler) stochasticStep(modelOutput, sample []float32, sigma, next float32) {
	if len(f.buf) != len(sample) {
		f.buf = make([]float32, len(sample))
	}
	noise := f.buf
	for j, v := range modelOutput {
		sample[j] -= float32(sigma * v) // sample becomes x0
	}
	f.noise(noise)
	keep := 1 - next
	for j, x0 := range sample {
		sample[j] = float32(keep*x0) + float32(next*noise[j])
	}
}
