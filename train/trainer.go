package train

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"ferry/tensor"
)

// Config is what a run does beyond its model and data.
type Config struct {
	// Steps is the number of optimizer steps the run ends after (counted
	// from the start of training, resumed steps included).
	Steps int
	// GradAccum micro-batches are summed into each step's gradients,
	// which are then divided by GradAccum (0 means 1).
	GradAccum int
	Timesteps Timesteps
	Adam      AdamConfig
	// MaxGradNorm clips the global gradient norm (0: off).
	MaxGradNorm float64
	// EMADecay keeps an EMA of the parameters (0: none).
	EMADecay float64
	// EMAOps, when set, keeps the EMA as float32 tensors on its device
	// (--ema-tier device: the trainable bytes count there); nil keeps it
	// on the host.
	EMAOps *tensor.Ops
	// SaveEvery saves a checkpoint into CheckpointDir every so many steps
	// (0: only when interrupted).
	SaveEvery     int
	CheckpointDir string
}

// Check says what is wrong with c.
func (c Config) Check() error {
	switch {
	case c.Steps <= 0:
		return fmt.Errorf("steps must be > 0, got %d", c.Steps)
	case c.GradAccum < 0:
		return fmt.Errorf("gradient accumulation must be >= 1, got %d", c.GradAccum)
	case !(c.MaxGradNorm >= 0):
		return fmt.Errorf("max grad norm must be >= 0, got %g", c.MaxGradNorm)
	case !(c.EMADecay >= 0 && c.EMADecay < 1):
		return fmt.Errorf("EMA decay must be in [0, 1), got %g", c.EMADecay)
	case c.SaveEvery < 0:
		return fmt.Errorf("save-every must be >= 0, got %d", c.SaveEvery)
	}
	if err := c.Timesteps.Check(); err != nil {
		return err
	}
	return c.Adam.Check()
}

// StepStat is what one optimizer step measured.
type StepStat struct {
	Step int `json:"step"` // from 1
	// Loss is the mean of the micro-batches' losses.
	Loss float32 `json:"loss"`
	// GradNorm is the global gradient norm before clipping.
	GradNorm float64 `json:"grad_norm"`
	Seconds  float64 `json:"seconds"`
}

// Interrupted is returned by Run when its context was cancelled: the
// checkpoint it saved at the step boundary and how to continue.
type Interrupted struct {
	Step int
	Dir  string
	Err  error
}

func (e *Interrupted) Error() string {
	return fmt.Sprintf("interrupted after step %d; checkpoint saved in %s (continue with --resume %s)", e.Step, e.Dir, e.Dir)
}

func (e *Interrupted) Unwrap() error { return e.Err }

// Trainer runs the optimisation loop over a Net and Data.
type Trainer struct {
	cfg  Config
	net  Net
	data Data
	rng  *RNG
	opt  *AdamW
	ema  *EMA
	// step is the number of optimizer steps done.
	step  int
	grads [][]float32
	// lastSave is the checkpoint Run saved last ("" before the first).
	lastSave string

	// History holds every step's figures, those before a resume included.
	History []StepStat
	// OnStep, when set, is called after every step (progress).
	OnStep func(StepStat)
	// OnSave, when set, is called after every checkpoint is written.
	OnSave func(dir string)
	// OnFirstGrads, when set, receives the gradients of step 1 after
	// averaging and before clipping (--grads-out).
	OnFirstGrads func(params []*Param, grads [][]float32) error
}

// New makes a trainer. The EMA starts at the net's current parameters, so
// make it after the parameters are initialised.
func New(cfg Config, net Net, data Data, rng *RNG) (*Trainer, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.GradAccum == 0 {
		cfg.GradAccum = 1
	}
	params := net.Params()
	if len(params) == 0 {
		return nil, errors.New("nothing to train: the model has no trainable parameters")
	}
	t := &Trainer{cfg: cfg, net: net, data: data, rng: rng, opt: NewAdamW(cfg.Adam, params), grads: zeroLike(params)}
	if cfg.EMADecay > 0 && cfg.EMAOps != nil {
		ema, err := NewDeviceEMA(cfg.EMADecay, params, cfg.EMAOps)
		if err != nil {
			return nil, err
		}
		t.ema = ema
	} else if cfg.EMADecay > 0 {
		t.ema = NewEMA(cfg.EMADecay, params)
	}
	if err := t.net.Sync(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close frees what the trainer holds on the device (a device EMA).
func (t *Trainer) Close() { t.ema.Free() }

// Step is the number of optimizer steps done so far.
func (t *Trainer) Step() int { return t.step }

// EMA is the parameters' moving average, nil without one.
func (t *Trainer) EMA() *EMA { return t.ema }

// Run trains until Config.Steps steps are done, saving a checkpoint every
// SaveEvery steps and after the last. When ctx is cancelled it saves a checkpoint at the next step
// boundary and returns an *Interrupted wrapping ctx's error.
func (t *Trainer) Run(ctx context.Context) error {
	for t.step < t.cfg.Steps {
		if err := ctx.Err(); err != nil {
			return t.interrupt(err)
		}
		s, err := t.Train()
		if err != nil {
			return fmt.Errorf("step %d: %w", t.step+1, err)
		}
		if t.OnStep != nil {
			t.OnStep(s)
		}
		if t.cfg.SaveEvery > 0 && (t.step%t.cfg.SaveEvery == 0 || t.step == t.cfg.Steps) {
			if err := t.save(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Trainer) save() error {
	dir, err := t.Save(t.cfg.CheckpointDir)
	if err != nil {
		return err
	}
	t.lastSave = dir
	if t.OnSave != nil {
		t.OnSave(dir)
	}
	return nil
}

// interrupt saves a checkpoint (unless this step's was just saved) and
// says where it is.
func (t *Trainer) interrupt(cause error) error {
	if t.lastSave == "" || filepath.Base(t.lastSave) != CheckpointName(t.step) {
		if err := t.save(); err != nil {
			return fmt.Errorf("interrupted, and the checkpoint failed: %w", err)
		}
	}
	return &Interrupted{Step: t.step, Dir: t.lastSave, Err: cause}
}

// Train does one optimizer step: GradAccum micro-batches forward and
// backward, the averaged gradients clipped, AdamW, the EMA.
func (t *Trainer) Train() (StepStat, error) {
	if z, ok := t.net.(Offloader); ok && z.Offloads() {
		return t.trainOffloaded(z)
	}
	start := time.Now()
	var lossSum float64
	for range t.cfg.GradAccum {
		b, err := t.data.Next()
		if err != nil {
			return StepStat{}, err
		}
		loss, err := t.micro(b)
		if err != nil {
			return StepStat{}, err
		}
		lossSum += float64(loss)
	}
	params := t.net.Params()
	if err := t.net.TakeGrads(t.grads); err != nil {
		return StepStat{}, err
	}
	AverageGrads(t.grads, t.cfg.GradAccum)
	if t.step == 0 && t.OnFirstGrads != nil {
		if err := t.OnFirstGrads(params, t.grads); err != nil {
			return StepStat{}, err
		}
	}
	norm := ClipGradNorm(t.grads, t.cfg.MaxGradNorm)
	if err := t.opt.Step(params, t.grads); err != nil {
		return StepStat{}, err
	}
	if t.ema != nil {
		if err := t.ema.Update(params); err != nil {
			return StepStat{}, err
		}
	}
	if err := t.net.Sync(); err != nil {
		return StepStat{}, err
	}
	t.step++
	loss := float32(lossSum / float64(t.cfg.GradAccum))
	s := StepStat{Step: t.step, Loss: loss, GradNorm: norm, Seconds: time.Since(start).Seconds()}
	t.History = append(t.History, s)
	return s, nil
}

// micro runs one micro-batch forward and backward and returns its loss.
// σ (per sample) and then ε are drawn from the RNG unless the batch fixes
// them.
func (t *Trainer) micro(b *Batch) (float32, error) {
	if err := b.Check(); err != nil {
		return 0, fmt.Errorf("batch: %w", err)
	}
	n := b.Samples()
	sigmas := b.Sigmas
	if sigmas == nil {
		sigmas = make([]float32, n)
		for i := range sigmas {
			sigmas[i] = t.cfg.Timesteps.Sigma(t.rng)
		}
	}
	noise := b.Noise
	if noise == nil {
		noise = t.rng.Normals(len(b.Latents))
	}
	xt, target, err := Noise(b.Latents, noise, sigmas, len(b.Latents)/n)
	if err != nil {
		return 0, err
	}
	timesteps := make([]float32, n)
	for i, s := range sigmas {
		timesteps[i] = TimestepOf(s)
	}
	pred, err := t.net.Forward(xt, b.LatentShape, timesteps, b.Context, b.ContextShape)
	if err != nil {
		return 0, err
	}
	loss, dpred, err := MSE(pred, target)
	if err != nil {
		return 0, err
	}
	if err := t.net.Backward(dpred); err != nil {
		return 0, err
	}
	return loss, nil
}
