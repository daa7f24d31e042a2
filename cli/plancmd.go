package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"ferry/imageproc"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/planner"
	"ferry/residency"
)

func init() {
	register("plan", "predict memory and time of a plan (or find the fastest that fits) without running", runPlan)
}

func runPlan(e *env, args []string) error {
	var pf planFlags
	fs := newFlags(e, "plan", "--model DIR|NAME [--height N --width N --frames N --steps N] [--device-mem SIZE --host-mem SIZE] [--plan NAME|FILE] [--image FILE] [--video FILE --strength S] [--out plan.yaml] [--json]\n  or: --train (--model DIR | --arch NAME) [--height --width --frames] [--batch-size N|auto] [--lora-rank R | --full] [--checkpointing none|block|selective] [--activation-tier device|host] [--ema --ema-tier host|device] [--device-mem --host-mem]")
	model := fs.String("model", "", "pipeline folder, or a built-in model: "+joinNames(planner.BuiltinNames()))
	height := fs.Int("height", 480, "height in pixels")
	width := fs.Int("width", 832, "width in pixels")
	frames := fs.Int("frames", 81, "frames (4k+1)")
	steps := fs.Int("steps", 50, "denoising steps")
	guidance := fs.Float64("guidance", 5, "guidance scale (<= 1: no CFG)")
	flowShift := fs.Float64("flow-shift", 0, "override the scheduler's shift (moves Wan 2.2 A14B's expert switch)")
	textLen := fs.Int("max-sequence-length", 512, "text context length")
	outputType := fs.String("output-type", "video", "video, or latent: plan a run that returns its latents undecoded, as ferry generate --output-type latent (the VAE does not run)")
	videos := fs.Int("num-videos", 1, "videos of each prompt, all made as one batch, as ferry generate --num-videos makes them")
	var prompts, negatives textsFlag
	fs.Var(&prompts, "prompt", "plan for this prompt (with a model folder, whose tokenizer counts it): the text encoder runs on its tokens and the transformer attends them and one row for the padding (default: a prompt of max-sequence-length tokens); repeat it for a batch of prompts")
	fs.Var(&negatives, "negative-prompt", "with --prompt and guidance > 1: the negative prompt; repeat it to give each --prompt its own")
	image := fs.String("image", "", "image-to-video: the first frame's image (.png, .jpg), as ferry generate takes it; a TI2V model plans image to video with it")
	video := fs.String("video", "", "video to video: the input video, as ferry generate takes it (its frames, down to 4k+1, unless --frames is given)")
	strength := fs.Float64("strength", 0.8, "video to video: the share of the schedule that runs, in (0, 1]")
	var dev, host sizeFlag
	fs.Var(&dev, "device-mem", "device memory budget, e.g. 8GiB (default: unlimited)")
	fs.Var(&host, "host-mem", "host memory budget, e.g. 16GiB (default: this machine's memory less the device budget and 1 GiB)")
	out := fs.String("out", "", "write the plan here (.yaml or .json) for ferry generate --plan FILE")
	asJSON := fs.Bool("json", false, "print the prediction as JSON")
	pf.define(fs)
	var tp trainPlanFlags
	tp.define(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if tp.on {
		// No RSS cap: a training plan is often made for another machine
		// (the paper-scale table); ferry train caps it where it runs.
		b := planningBudgets(dev.bytes, host.bytes)
		b.RSSBytes = 0
		return planTrain(e, &tp, &pf, *model, *frames, *height, *width, *textLen, b, *asJSON)
	}
	if *model == "" {
		return userf("--model DIR|NAME is required (a folder, or one of %s)", joinNames(planner.BuiltinNames()))
	}
	prof, err := profileOf(*model)
	if err != nil {
		return err
	}
	if err := planImageFlag(prof, *image); err != nil {
		return err
	}
	wr := wan.Request{Guidance: *guidance, MaxSeqLen: *textLen, NumVideos: *videos}
	if err := setPrompts(&wr, prompts, negatives); err != nil {
		return err
	}
	if *videos < 1 {
		return userf("--num-videos must be 1 to %d, got %d", wan.MaxVideos, *videos)
	}
	if err := wr.CheckBatch(); err != nil {
		return asUser(err)
	}
	if *outputType != "video" && *outputType != "latent" {
		return userf("--output-type %q: want video or latent", *outputType)
	}
	req := planner.Request{Batch: wr.Videos(), Prompts: len(wr.PromptList()), LatentsOut: *outputType == "latent", Frames: *frames, Height: *height, Width: *width, TextLen: *textLen, Steps: *steps, Guidance: *guidance, FlowShift: *flowShift}
	if req.PromptTokens, err = promptTokens(*model, wr); err != nil {
		return err
	}
	if err := planVideoFlag(fs, prof, &req, *video, *strength); err != nil {
		return err
	}
	if err := req.Validate(prof); err != nil {
		return asUser(err)
	}
	pl, err := pf.resolve(prof, req, planningBudgets(dev.bytes, host.bytes))
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writePlan(*out, pl.plan); err != nil {
			return err
		}
	}
	if *asJSON {
		return planner.WriteJSON(e.stdout, *pl.pred)
	}
	return planner.WriteTable(e.stdout, *pl.pred)
}

// profileOf profiles a folder or a built-in model.
func profileOf(spec string) (*planner.Profile, error) {
	if st, err := os.Stat(spec); err == nil && st.IsDir() {
		if _, err := openFolder(spec); err != nil {
			return nil, err
		}
		p, err := planner.MeasureFolder(spec)
		return p, asUser(err)
	}
	p, err := planner.Builtin(spec)
	return p, asUser(err)
}

// promptTokens is what ferry generate's plan would count for r's prompts
// (pipeline/wan's PromptTokens) with the folder's tokenizer; 0, the
// longest text, without --prompt.
func promptTokens(model string, r wan.Request) (int, error) {
	if r.Prompt == "" {
		if r.NegativePrompt != "" {
			return 0, userf("--negative-prompt needs --prompt")
		}
		return 0, nil
	}
	if st, err := os.Stat(model); err != nil || !st.IsDir() {
		return 0, userf("--prompt needs --model to be a pipeline folder: its tokenizer counts the prompt (a built-in name plans %d tokens; drop --prompt)", r.MaxSeqLen)
	}
	f, err := openFolder(model)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := wan.Open(f)
	if err != nil {
		return 0, userf("--prompt: %s: %v", model, err)
	}
	return p.PromptTokens(r), nil
}

// planImageFlag checks --image as ferry generate reads it and plans the
// request as image to video.
func planImageFlag(prof *planner.Profile, path string) error {
	if path == "" {
		return nil
	}
	if _, err := imageproc.Load(path); err != nil {
		return asUser(fmt.Errorf("--image: %w", err))
	}
	if err := prof.UseImage(); err != nil {
		return userf("--image %s: %s; drop --image", path, strings.TrimPrefix(err.Error(), "planner: "))
	}
	return nil
}

// planVideoFlag plans a video-to-video request as ferry generate --video
// runs it: the VAE encodes the video's frames (all of them down to 4k+1,
// or --frames of them), and the steps the strength runs.
func planVideoFlag(fs *flag.FlagSet, prof *planner.Profile, req *planner.Request, path string, strength float64) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := checkStrength(path, set["strength"], strength); err != nil || path == "" {
		return err
	}
	frames := 0
	if set["frames"] {
		frames = req.Frames
	}
	clip, _, err := videoClip(path, frames)
	if err != nil {
		return err
	}
	req.Frames = len(clip.Frames)
	run := wan.StepsRun(req.Steps, strength)
	if run == 0 {
		return userf("--strength %g runs no step of %d (int(steps·strength) is 0): raise --strength or --steps", strength, req.Steps)
	}
	req.Steps = run
	if err := prof.UseVideo(); err != nil {
		return userf("--video %s: %s", path, strings.TrimPrefix(err.Error(), "planner: "))
	}
	return nil
}

func writePlan(path string, p *residency.Plan) error {
	if err := checkWritable(path); err != nil {
		return err
	}
	data, err := p.YAML()
	if isJSONPath(path) {
		data, err = p.JSON()
	}
	if err != nil {
		return err
	}
	return pipelineWriteFile(path, data)
}

func isJSONPath(p string) bool { return strings.EqualFold(filepath.Ext(p), ".json") }

func pipelineWriteFile(path string, data []byte) error {
	return pipeline.WriteFileAtomic(path, append(data, '\n'))
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
