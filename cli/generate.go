package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ferry/chart"
	"ferry/checkpoint"
	"ferry/media"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
	"ferry/tensor"
)

func init() {
	register("generate", "run a text- or image-to-video (or synthetic) pipeline folder under memory budgets", runGenerate)
}

// genFlags are generate's flags, shared by every pipeline family.
type genFlags struct {
	model                 string
	prompts, negatives    textsFlag
	height, width, frames int
	steps                 int
	guidance, flowShift   float64
	guidance2             float64
	seed                  uint64
	numVideos             int
	outputType            string
	latents               string
	image, lastImage      string
	video                 string
	strength              float64
	maxSeqLen             int
	planFlags
	deviceMem, hostMem sizeFlag
	out, report, trace string
	chart              string
	quiet              bool
	fps                float64
	loras, loras2      loraFlag
}

// unsetFloat is a float flag whose negative value means "not given": -h
// shows no default for it.
type unsetFloat struct {
	v *float64
	// scale: a guidance scale, where any value <= 1 turns guidance off
	// (diffusers' do_classifier_free_guidance); a negative one is kept as
	// 0, since negative means unset to the pipeline.
	scale bool
}

func (f unsetFloat) String() string {
	if f.v == nil || *f.v < 0 {
		return ""
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}

func (f unsetFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return errors.New("want a number")
	}
	if f.scale {
		v = max(v, 0)
	}
	*f.v = v
	return nil
}

// textsFlag is a repeatable text flag (--prompt, --negative-prompt).
type textsFlag []string

func (f *textsFlag) String() string { return strings.Join(*f, " | ") }

func (f *textsFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}

// first is the first text given, or "".
func (f textsFlag) first() string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// loraFlag is --lora FILE[:SCALE], repeatable.
type loraFlag []loraSpec

// loraSpec is one --lora: a LoRA file and the multiplier of its alpha/rank.
type loraSpec struct {
	file  string
	scale float64
}

func (l *loraFlag) String() string {
	var parts []string
	for _, s := range *l {
		parts = append(parts, fmt.Sprintf("%s:%g", s.file, s.scale))
	}
	return strings.Join(parts, ",")
}

// Set takes FILE or FILE:SCALE; a suffix after the last colon that is not
// a number is part of the file name.
func (l *loraFlag) Set(v string) error {
	s := loraSpec{file: v, scale: 1}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		if f, err := strconv.ParseFloat(v[i+1:], 64); err == nil {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("scale %q of %s is not a finite number", v[i+1:], v[:i])
			}
			s.file, s.scale = v[:i], f
		}
	}
	if s.file == "" {
		return fmt.Errorf("%q names no file (want FILE or FILE:SCALE)", v)
	}
	*l = append(*l, s)
	return nil
}

func (g *genFlags) define(e *env) *flag.FlagSet {
	fs := newFlags(e, "generate", "--model DIR --prompt TEXT --out FILE [flags]")
	fs.StringVar(&g.model, "model", "", "pipeline folder (diffusers layout)")
	fs.Var(&g.prompts, "prompt", "what to generate; repeat it for a batch of prompts (diffusers' prompt list), written to FILE-1, FILE-2, ...")
	fs.Var(&g.negatives, "negative-prompt", "what to avoid (classifier-free guidance); repeat it to give each --prompt its own")
	fs.IntVar(&g.height, "height", 0, "height in pixels (default: the model's)")
	fs.IntVar(&g.width, "width", 0, "width in pixels (default: the model's)")
	fs.IntVar(&g.frames, "frames", 0, "number of frames, 4k+1 for Wan (default: the model's)")
	fs.IntVar(&g.steps, "steps", 0, "denoising steps (default: the model's)")
	g.guidance, g.guidance2, g.strength = -1, -1, -1
	fs.Var(unsetFloat{v: &g.guidance, scale: true}, "guidance", "classifier-free guidance `scale`; <= 1 disables it (default: the model's)")
	fs.Var(unsetFloat{v: &g.guidance2, scale: true}, "guidance-2", "guidance `scale` of Wan 2.2 A14B's low-noise expert (default: --guidance)")
	fs.Float64Var(&g.flowShift, "flow-shift", 0, "override the scheduler's flow_shift")
	fs.IntVar(&g.numVideos, "num-videos", 0, "videos of each prompt, all made as one batch (diffusers' num_videos_per_prompt; default 1, or as many as --latents holds): written to FILE-1, FILE-2, ...; each step reads the weights once for all of them")
	fs.Uint64Var(&g.seed, "seed", 0, "seed of the initial noise, drawn as PyTorch's CPU generator draws it (diffusers with torch.Generator().manual_seed(seed), ComfyUI)")
	fs.StringVar(&g.latents, "latents", "", "initial latents: a .safetensors file with tensor \"latents\"")
	fs.StringVar(&g.image, "image", "", "image-to-video models: the first frame's image (.png, .jpg)")
	fs.StringVar(&g.video, "video", "", "video to video: the input video (.mp4, .mov, .mkv, .webm with ffmpeg on PATH; .avi, .gif, .png), its frames resized to --height/--width")
	fs.Var(unsetFloat{v: &g.strength}, "strength", "video to video: the share of the schedule that runs, in (0, 1] (default 0.8)")
	fs.StringVar(&g.lastImage, "last-image", "", "first-last-frame models (Wan 2.1 FLF2V, Wan 2.2 I2V): the last frame's image (.png, .jpg)")
	fs.IntVar(&g.maxSeqLen, "max-sequence-length", 512, "text tokens the encoder sees")
	g.planFlags.define(fs)
	fs.Var(&g.deviceMem, "device-mem", "device memory budget, e.g. 8GiB (default: unlimited)")
	fs.Var(&g.hostMem, "host-mem", "host memory budget for offloaded weights, e.g. 16GiB (default: unlimited)")
	fs.StringVar(&g.out, "out", "", "output: .mp4 (needs ffmpeg on PATH), .avi, .gif, .png, DIR/ (PNG frames) or .safetensors")
	fs.Float64Var(&g.fps, "fps", 16, "frames per second of video outputs")
	fs.StringVar(&g.outputType, "output-type", "video", "video, or latent: the final latents undecoded (diffusers' output_type=\"latent\"), tensor \"latents\" [videos, z, T, H/8, W/8] in a .safetensors --out; the VAE does not run")
	fs.StringVar(&g.report, "report", "", "write the run's report (JSON) here")
	fs.StringVar(&g.trace, "trace", "", "write a Chrome trace (JSON) here")
	fs.StringVar(&g.chart, "chart", "", "write a memory chart (.svg or .png) here")
	fs.BoolVar(&g.quiet, "quiet", false, "print nothing but errors")
	fs.Var(&g.loras, "lora", "apply a LoRA to the transformer (the high-noise expert of a Wan 2.2 A14B folder): FILE[:SCALE], SCALE multiplying alpha/rank (default 1); repeatable")
	fs.Var(&g.loras2, "lora-2", "apply a LoRA to the low-noise expert (transformer_2) of a Wan 2.2 A14B folder: FILE[:SCALE]; repeatable")
	return fs
}

// job is one pipeline family's run of a request.
type job interface {
	// Components lists the pipeline's component names (for plans).
	Components() []string
	// Shape is the output video's frames, height and width.
	Shape() (f, h, w int)
	// Run generates [F, H, W, 3] values in [0, 1] for each of its videos,
	// one after another.
	Run(rt *pipeline.Runtime) ([]float32, error)
	// Request is the resolved request, as the report records it.
	Request() any
	// Title names model and shape for people ("wan-tiny 128x128, 9 frames").
	Title() string
	// SetProgress wires the denoising-step and decoded-frame callbacks.
	SetProgress(onStep, onFrame func(done, total int))
}

// latentJob is a job that can return its final latents undecoded
// (--output-type latent).
type latentJob interface {
	job
	// Latents are the last run's final latents and their shape.
	Latents() ([]float32, []int)
}

// checkOut checks --out against --output-type and the job before anything
// runs.
func checkOut(g *genFlags, j job) error {
	switch g.outputType {
	case "video":
		f, _, _ := j.Shape()
		return asUser(media.CheckPath(g.out, f))
	case "latent":
		if _, ok := j.(latentJob); !ok {
			return userf("--output-type latent: this pipeline has no latents to return; drop the flag")
		}
		if filepath.Ext(g.out) != ".safetensors" {
			return userf("--output-type latent writes tensor \"latents\" to a .safetensors file; got --out %s", g.out)
		}
		return checkWritable(g.out)
	}
	return userf("--output-type %q: want video or latent", g.outputType)
}

// families build a job for a folder's pipeline class.
var families = map[string]func(f *checkpoint.Folder, g *genFlags) (job, error){}

func runGenerate(e *env, args []string) error {
	var g genFlags
	fs := g.define(e)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if g.model == "" {
		return userf("--model DIR is required (a pipeline folder with model_index.json; `ferry synth` makes one)")
	}
	if g.out == "" {
		return userf("--out FILE is required (.mp4, .avi, .gif, .png, DIR/ or .safetensors)")
	}
	folder, err := openFolder(g.model)
	if err != nil {
		return err
	}
	defer folder.Close()
	build, ok := families[folder.Class]
	if !ok {
		return userf("%s: pipeline class %q is not supported (supported: %s)", g.model, folder.Class, familyNames())
	}
	j, err := build(folder, &g)
	if err != nil {
		return err
	}
	if n, ok := j.(interface{ Notes() []string }); ok && !g.quiet {
		for _, s := range n.Notes() {
			fmt.Fprintf(e.stderr, "ferry generate: note: %s\n", s)
		}
	}
	if _, ok := j.(*wanJob); !ok && len(g.loras)+len(g.loras2) > 0 {
		return userf("--lora: pipeline class %q has no Wan transformer to adapt", folder.Class)
	}
	if err := checkOut(&g, j); err != nil {
		return err
	}
	for _, p := range []string{g.report, g.trace, g.chart} {
		if err := checkWritable(p); err != nil {
			return err
		}
	}
	if g.chart != "" {
		if _, err := chart.FormatFromPath(g.chart); err != nil {
			return asUser(err)
		}
	}
	pl, err := choosePlan(&g, j)
	if err != nil {
		return err
	}
	return execute(e, &g, j, pl)
}

// classify turns budget failures into user errors: the fix is a bigger
// budget or another plan.
func classify(err error) error {
	if errors.Is(err, tensor.ErrOutOfMemory) {
		return asUser(fmt.Errorf("%w (raise --device-mem/--host-mem or choose a plan that streams more)", err))
	}
	var be *residency.BudgetError
	if errors.As(err, &be) {
		return asUser(err)
	}
	return err
}

func openFolder(dir string) (*checkpoint.Folder, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, userf("--model %s: no such folder", dir)
	}
	if !st.IsDir() {
		return nil, userf("--model %s is a file; give the pipeline folder (the one holding model_index.json)", dir)
	}
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		if _, serr := os.Stat(filepath.Join(dir, checkpoint.ModelIndexName)); serr != nil {
			return nil, userf("--model %s is not a diffusers pipeline folder (no model_index.json)", dir)
		}
		return nil, asUser(err)
	}
	return f, nil
}

func familyNames() string {
	var s string
	for n := range families {
		if s != "" {
			s += ", "
		}
		s += n
	}
	return s
}

// checkWritable fails early when an output file's folder is missing.
func checkWritable(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return userf("cannot write %s: folder %s does not exist", path, dir)
	}
	return nil
}

// plannable is a job the planner can profile: it predicts, searches and
// knows the presets.
type plannable interface {
	Plan() (*planner.Profile, planner.Request, error)
}

// choosePlan resolves --plan (and the FastVideo flags) for the job. Jobs
// the planner profiles get every preset, auto (the default) and a
// prediction; others the basic placements, resident by default.
func choosePlan(g *genFlags, j job) (planned, error) {
	if pj, ok := j.(plannable); ok {
		prof, req, err := pj.Plan()
		if err != nil {
			return planned{}, asUser(err)
		}
		return g.planFlags.resolve(prof, req, planningBudgets(g.deviceMem.bytes, g.hostMem.bytes))
	}
	if on := g.fastVideoSet(); len(on) > 0 {
		return planned{}, userf("%s: FastVideo flags need a model the planner knows (Wan); use --plan", strings.Join(on, " "))
	}
	spec := g.spec
	if spec == "" {
		spec = "resident"
	}
	p, err := resolvePlan(spec)
	if err != nil {
		return planned{}, err
	}
	hw, err := g.hardware(nil)
	if err != nil {
		return planned{}, err
	}
	return planned{plan: p, smallPages: hw.SmallPagesFirst()}, nil
}
