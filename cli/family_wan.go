package cli

import (
	"fmt"
	"path/filepath"
	"slices"

	"ferry/checkpoint"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/planner"
)

func init() {
	families["WanPipeline"] = newWanJob
	families[wan.ImageToVideoClass] = newWanJob
}

// wanJob is a Wan request on a folder: text- or image-to-video, Wan 2.1
// or 2.2 (one transformer or two experts).
type wanJob struct {
	p    *wan.Pipeline
	req  wan.Request
	name string
	dir  string
	// latents and their shape are the last run's final latents.
	latents     []float32
	latentShape []int
	// notes are the request's corrections (Request.Defaults), for stderr.
	notes []string
}

func newWanJob(f *checkpoint.Folder, g *genFlags) (job, error) {
	p, err := wan.Open(f)
	if err != nil {
		return nil, asUser(err)
	}
	r := wan.Request{Height: g.height, Width: g.width, Frames: g.frames, Steps: g.steps, Guidance: g.guidance,
		FlowShift: g.flowShift, Seed: g.seed, MaxSeqLen: g.maxSeqLen, NumVideos: g.numVideos, LatentsOut: g.outputType == "latent"}
	if slices.Contains(g.prompts, "") || len(g.prompts) == 0 {
		return nil, userf("--prompt TEXT is required (repeat it for a batch of prompts)")
	}
	if err := setPrompts(&r, g.prompts, g.negatives); err != nil {
		return nil, err
	}
	notes := r.Defaults()
	if err := guidance2(p, &r, g.guidance2); err != nil {
		return nil, err
	}
	if err := readImages(p, &r, g.image, g.lastImage); err != nil {
		return nil, err
	}
	videoNotes, err := readVideo(p, &r, g)
	if err != nil {
		return nil, err
	}
	notes = append(notes, videoNotes...)
	if g.latents != "" {
		v, shape, err := wan.ReadLatents(g.latents)
		if err != nil {
			return nil, asUser(fmt.Errorf("--latents: %w", err))
		}
		s := p.SpatialScale()
		if len(shape) != 5 || shape[0] < 1 || shape[1] != p.ZDim() {
			return nil, userf("--latents %s: shape %v, want [videos, %d, T, H/%d, W/%d]", g.latents, shape, p.ZDim(), s, s)
		}
		// The latents' batch is the videos' count, a multiple of the
		// prompts'; a --num-videos that disagrees is an error.
		prompts := len(r.PromptList())
		if (g.numVideos != 0 && g.numVideos*prompts != shape[0]) || shape[0]%prompts != 0 {
			return nil, userf("--latents %s holds %d videos' latents, not --num-videos (%d) for each of %d prompts; drop --num-videos or make them match",
				g.latents, shape[0], max(g.numVideos, 1), prompts)
		}
		r.NumVideos = shape[0] / prompts
		// The latents fix the shape; flags that disagree are an error.
		want := wan.Request{Height: shape[3] * s, Width: shape[4] * s, Frames: (shape[2]-1)*4 + 1}
		if (g.height != 0 && g.height != want.Height) || (g.width != 0 && g.width != want.Width) || (g.frames != 0 && r.Frames != want.Frames) {
			return nil, userf("--latents %s is for %dx%d, %d frames; drop --height/--width/--frames or make them match", g.latents, want.Height, want.Width, want.Frames)
		}
		r.Height, r.Width, r.Frames = want.Height, want.Width, want.Frames
		r.Latents, r.LatentsFile = v, g.latents
	}
	notes = append(notes, patchSize(p, &r)...)
	if err := r.Check(); err != nil {
		return nil, asUser(err)
	}
	if err := p.CheckSize(r); err != nil {
		return nil, asUser(err)
	}
	if err := checkImages(p, r); err != nil {
		return nil, err
	}
	if err := p.CheckVideo(r); err != nil {
		return nil, asUser(err)
	}
	for _, list := range []struct {
		flag  string
		specs loraFlag
		into  *[]wan.LoRA
	}{{"--lora", g.loras, &r.LoRAs}, {"--lora-2", g.loras2, &r.LoRAs2}} {
		for _, s := range list.specs {
			l, err := p.LoadLoRA(s.file, s.scale)
			if err != nil {
				return nil, asUser(fmt.Errorf("%s %w", list.flag, err))
			}
			*list.into = append(*list.into, l)
		}
	}
	if err := p.CheckExperts(r); err != nil {
		return nil, asUser(err)
	}
	return &wanJob{p: p, req: r, name: filepath.Base(filepath.Clean(f.Dir)), dir: f.Dir, notes: notes}, nil
}

// Notes are what diffusers would log as warnings about the request.
func (j *wanJob) Notes() []string { return j.notes }

func (j *wanJob) Components() []string { return j.p.WeightComponents() }

func (j *wanJob) Shape() (int, int, int) { return j.req.Frames, j.req.Height, j.req.Width }

func (j *wanJob) Request() any { return j.req }

func (j *wanJob) Run(rt *pipeline.Runtime) ([]float32, error) {
	if err := j.p.Register(rt.Exec); err != nil {
		return nil, err
	}
	out, err := j.p.Generate(rt, j.req, false)
	if err != nil {
		return nil, err
	}
	j.latents, j.latentShape = out.Latents, out.LatentShape
	return out.Video, nil
}

// Latents are the last run's final latents (--output-type latent).
func (j *wanJob) Latents() ([]float32, []int) { return j.latents, j.latentShape }

func (j *wanJob) Title() string {
	t := fmt.Sprintf("%s %dx%d, %d frames, %d steps", j.name, j.req.Width, j.req.Height, j.req.Frames, j.req.Steps)
	if n := j.req.Videos(); n > 1 {
		t += fmt.Sprintf(", %d videos", n)
	}
	return t
}

func (j *wanJob) SetProgress(onStep, onFrame func(done, total int)) {
	j.p.OnStep, j.p.OnFrame = onStep, onFrame
}

// Plan profiles the folder for the planner from its configs, after
// timing a read of up to 64 MiB of its uncached weights (MeasureFolder).
func (j *wanJob) Plan() (*planner.Profile, planner.Request, error) {
	prof, err := planner.MeasureFolder(j.dir)
	if err != nil {
		return nil, planner.Request{}, err
	}
	r := j.req
	if err := planImage(prof, r); err != nil {
		return nil, planner.Request{}, err
	}
	if r.Video != nil {
		if err := prof.UseVideo(); err != nil {
			return nil, planner.Request{}, asUser(err)
		}
	}
	return prof, j.p.PlanRequest(r), nil
}

// setPrompts puts the --prompt and --negative-prompt texts into r: one
// prompt, or a batch of them with one negative prompt for all or one for
// each.
func setPrompts(r *wan.Request, prompts, negatives textsFlag) error {
	if n := len(negatives); n > 1 && n != len(prompts) {
		return userf("%d --negative-prompt for %d --prompt: give one, or one for each --prompt", n, len(prompts))
	}
	r.Prompt, r.NegativePrompt = prompts.first(), negatives.first()
	if len(prompts) > 1 {
		r.Prompts = prompts
		if len(negatives) > 1 {
			r.NegativePrompts = negatives
		}
	}
	return nil
}

// guidance2 sets the low-noise expert's scale: --guidance-2 (v >= 0), else
// --guidance, as diffusers does with guidance_scale_2=None. A folder with
// one transformer refuses the flag, as diffusers refuses the argument.
func guidance2(p *wan.Pipeline, r *wan.Request, v float64) error {
	if v >= 0 && !p.TwoExperts() {
		return userf("--guidance-2 applies to two-expert folders (Wan 2.2 A14B: boundary_ratio and transformer_2); this one has one transformer: drop the flag")
	}
	if !p.TwoExperts() {
		return nil
	}
	if v < 0 {
		v = r.Guidance
	}
	r.Guidance2 = &v
	return nil
}
