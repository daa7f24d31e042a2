package cli

import (
	"fmt"

	"ferry/checkpoint"
	model "ferry/model/synthetic"
	"ferry/pipeline"
	"ferry/pipeline/synthetic"
)

func init() { families["SyntheticPipeline"] = newSyntheticJob }

// syntheticJob makes one image with the random synthetic model.
type syntheticJob struct {
	folder *checkpoint.Folder
	req    synthetic.Request
	onStep func(done, total int)
}

func newSyntheticJob(f *checkpoint.Folder, g *genFlags) (job, error) {
	if g.frames > 1 {
		return nil, userf("the synthetic model makes one image; drop --frames %d", g.frames)
	}
	if len(g.prompts) > 1 {
		return nil, userf("the synthetic model makes one image; give --prompt once")
	}
	if g.numVideos > 1 {
		return nil, userf("the synthetic model makes one image; drop --num-videos %d", g.numVideos)
	}
	r := synthetic.Request{Prompt: g.prompts.first(), Height: g.height, Width: g.width, Steps: g.steps, Seed: g.seed}
	if r.Height == 0 {
		r.Height = 64
	}
	if r.Width == 0 {
		r.Width = 64
	}
	if r.Steps == 0 {
		r.Steps = 4
	}
	var cfg model.Config
	c, err := f.Component(model.Denoiser)
	if err != nil {
		return nil, asUser(err)
	}
	if err := c.Config(&cfg); err != nil {
		return nil, asUser(err)
	}
	if cfg.Patch > 0 && (r.Height%cfg.Patch != 0 || r.Width%cfg.Patch != 0 || r.Height <= 0 || r.Width <= 0) {
		return nil, userf("--height and --width must be positive multiples of %d for this model, got %dx%d", cfg.Patch, r.Height, r.Width)
	}
	if r.Steps < 0 {
		return nil, userf("--steps must be > 0, got %d", r.Steps)
	}
	return &syntheticJob{folder: f, req: r}, nil
}

func (j *syntheticJob) Components() []string {
	return []string{model.TextEncoder, model.Denoiser, model.Decoder}
}

func (j *syntheticJob) Shape() (int, int, int) { return 1, j.req.Height, j.req.Width }

func (j *syntheticJob) Request() any { return j.req }

func (j *syntheticJob) Run(rt *pipeline.Runtime) ([]float32, error) {
	p, err := synthetic.Load(j.folder, rt.Exec)
	if err != nil {
		return nil, err
	}
	p.OnStep = j.onStep
	return p.Generate(rt, j.req)
}

func (j *syntheticJob) Title() string {
	return fmt.Sprintf("synthetic %dx%d, %d steps", j.req.Width, j.req.Height, j.req.Steps)
}

func (j *syntheticJob) SetProgress(onStep, _ func(done, total int)) { j.onStep = onStep }
