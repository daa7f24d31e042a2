// Package synthetic runs the random-weight model of model/synthetic end to
// end — text encoder, a denoising loop, decoder — through the residency
// executor, so that every placement can be exercised and measured on a
// model whose memory shape is a DiT's. Its pictures mean nothing.
package synthetic

import (
	"fmt"
	"math/rand/v2"

	"ferry/checkpoint"
	model "ferry/model/synthetic"
	"ferry/pipeline"
	"ferry/residency"
	"ferry/sampler"
	"ferry/tensor"
)

// Request is one image to make.
type Request struct {
	Prompt string `json:"prompt"`
	Height int    `json:"height"`
	Width  int    `json:"width"`
	Steps  int    `json:"steps"`
	Seed   uint64 `json:"seed"`
}

// Pipeline holds the three components declared over a folder's weights.
type Pipeline struct {
	cfg       model.Config
	text      *model.TextEncoderModel
	denoiser  *model.DenoiserModel
	decoder   *model.DecoderModel
	scheduler sampler.Scheduler

	// OnStep, when set, is called after every denoising step.
	OnStep func(done, total int)
}

// Load reads the configs of a synthetic folder and declares its components
// with the executor. Weights are read only when blocks run.
func Load(f *checkpoint.Folder, ex *residency.Executor) (*Pipeline, error) {
	var cfg model.Config
	c, err := f.Component(model.Denoiser)
	if err != nil {
		return nil, err
	}
	if err := c.Config(&cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Dir, err)
	}
	p := &Pipeline{cfg: cfg}
	src := func(name string) (residency.Source, error) {
		c, err := f.Component(name)
		if err != nil {
			return nil, err
		}
		set, err := c.Weights()
		if err != nil {
			return nil, err
		}
		return residency.SourceOf(set), nil
	}
	var srcs [3]residency.Source
	for i, name := range []string{model.TextEncoder, model.Denoiser, model.Decoder} {
		if srcs[i], err = src(name); err != nil {
			return nil, err
		}
	}
	p.text = model.NewTextEncoder(cfg, srcs[0])
	p.denoiser = model.NewDenoiser(cfg, srcs[1])
	p.decoder = model.NewDecoder(cfg, srcs[2])
	for _, comp := range []*residency.Component{p.text.Component(), p.denoiser.Component(), p.decoder.Component()} {
		if err := ex.Register(comp); err != nil {
			return nil, err
		}
	}
	if p.scheduler, err = schedulerOf(f); err != nil {
		return nil, err
	}
	return p, nil
}

func schedulerOf(f *checkpoint.Folder) (sampler.Scheduler, error) {
	c, err := f.Component("scheduler")
	if err != nil {
		return nil, err
	}
	path, err := c.ConfigPath()
	if err != nil {
		return nil, err
	}
	raw, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return sampler.FromConfig(raw)
}

// Check validates a request against the model.
func (p *Pipeline) Check(r Request) error {
	pp := p.cfg.Patch
	if r.Height <= 0 || r.Width <= 0 || r.Height%pp != 0 || r.Width%pp != 0 {
		return fmt.Errorf("height and width must be positive multiples of %d, got %dx%d", pp, r.Height, r.Width)
	}
	if r.Steps <= 0 {
		return fmt.Errorf("steps must be > 0, got %d", r.Steps)
	}
	return nil
}

// Generate runs the request and returns the image [H, W, 3] in [0, 1].
func (p *Pipeline) Generate(rt *pipeline.Runtime, r Request) ([]float32, error) {
	if err := p.Check(r); err != nil {
		return nil, err
	}
	ex := rt.Exec
	end := rt.Phase(pipeline.PhaseText)
	ops := ex.Ops(model.TextEncoder)
	ctx, err := p.text.Encode(ex, ops, p.text.Tokenize(r.Prompt))
	ex.Done(model.TextEncoder)
	end()
	if err != nil {
		return nil, fmt.Errorf("text encoder: %w", err)
	}
	defer ctx.Free()

	h, w := r.Height/p.cfg.Patch, r.Width/p.cfg.Patch
	latents, err := p.denoise(rt, ctx, r, h, w)
	if err != nil {
		return nil, err
	}

	end = rt.Phase(pipeline.PhaseVAE)
	defer end()
	ops = ex.Ops(model.Decoder)
	x := ops.Upload(latents, 1, h*w, p.cfg.Channels*p.cfg.Patch*p.cfg.Patch)
	img, err := p.decoder.Decode(ex, ops, x, h, w)
	x.Free()
	ex.Done(model.Decoder)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	out := ops.Download(img)
	img.Free()
	return out, ops.Err()
}

// denoise runs the sampling loop on host latents.
func (p *Pipeline) denoise(rt *pipeline.Runtime, ctx *tensor.Tensor, r Request, h, w int) ([]float32, error) {
	end := rt.Phase(pipeline.PhaseDenoise)
	defer end()
	ex := rt.Exec
	ops := ex.Ops(model.Denoiser)
	n := h * w * p.cfg.Channels * p.cfg.Patch * p.cfg.Patch
	latents := Noise(r.Seed, n)
	p.scheduler.Reset()
	if err := p.scheduler.SetTimesteps(r.Steps); err != nil {
		return nil, err
	}
	ts := p.scheduler.Timesteps()
	for i, t := range ts {
		endStep := rt.Step(i)
		x := ops.Upload(latents, 1, h*w, n/(h*w))
		v, err := p.denoiser.Forward(ex, ops, x, t/1000, ctx)
		x.Free()
		if err != nil {
			return nil, fmt.Errorf("denoiser: %w", err)
		}
		out := ops.Download(v)
		v.Free()
		if err := ops.Err(); err != nil {
			return nil, err
		}
		if err := p.scheduler.Step(out, latents); err != nil {
			return nil, err
		}
		endStep()
		if p.OnStep != nil {
			p.OnStep(i+1, len(ts))
		}
	}
	ex.Done(model.Denoiser)
	return latents, nil
}

// Noise is the seeded standard-normal starting point.
func Noise(seed uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}
