package wan

import (
	"encoding/json"
	"fmt"
	"math"

	"ferry/checkpoint"
	wanmodel "ferry/model/wan"
	"ferry/pipeline"
	"ferry/residency"
	"ferry/tensor"
)

// Wan 2.2 A14B (WanPipeline with transformer_2 and boundary_ratio): two
// experts of the same architecture. The high-noise transformer denoises
// while the integer timestep is at or above boundary_ratio ·
// num_train_timesteps, with guidance_scale; the low-noise transformer_2
// after it, with guidance_scale_2 (guidance_scale when not given). One
// scheduler runs across the switch, its multistep history included.

// Transformer2 is Wan 2.2 A14B's low-noise expert.
const Transformer2 = "transformer_2"

// experts is a folder's expert layout: Boundary is model_index.json's
// boundary_ratio, 0 when the folder runs one transformer.
type experts struct {
	Boundary float64
	// high and low are the two experts (nil with one transformer):
	// p.transformer is high except while the low-noise expert denoises.
	high, low *wanmodel.Model
}

// two says transformer_2 takes over below the boundary.
func (e experts) two() bool { return e.Boundary > 0 }

// readExperts reads boundary_ratio. WanPipeline runs transformer alone
// when boundary_ratio is None, whatever else the folder holds; with a
// boundary, it needs transformer_2 (components declared [null, null] are
// absent).
func readExperts(f *checkpoint.Folder) (experts, error) {
	if _, ok := f.Components[Transformer]; !ok {
		return experts{}, fmt.Errorf("%s: model_index.json has no transformer (WanPipeline needs one; a folder with only transformer_2 cannot run)", f.Dir)
	}
	raw := f.Config["boundary_ratio"]
	if raw == nil {
		return experts{}, nil
	}
	b, ok := raw.(float64)
	if !ok || math.IsNaN(b) || b <= 0 || b > 1 {
		return experts{}, fmt.Errorf("%s: boundary_ratio %v in model_index.json: want a number in (0, 1] (0.875 for Wan2.2-T2V-A14B)", f.Dir, raw)
	}
	if _, ok := f.Components[Transformer2]; !ok {
		return experts{}, fmt.Errorf("%s: boundary_ratio %g but no transformer_2 component: the low-noise expert is missing (add its folder, or set boundary_ratio to null)", f.Dir, b)
	}
	return experts{Boundary: b}, nil
}

// openExpert reads transformer_2's config: it must take the same inputs
// as the high-noise transformer (latent channels, text width, patch).
func openExpert(f *checkpoint.Folder, first wanmodel.Config) (*wanmodel.Model, error) {
	raw, err := rawConfig(f, Transformer2)
	if err != nil {
		return nil, err
	}
	c, err := wanmodel.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Transformer2, err)
	}
	if c.InChannels != first.InChannels || c.OutChannels != first.OutChannels || c.TextDim != first.TextDim || c.PatchSize != first.PatchSize {
		return nil, fmt.Errorf("%s: in/out channels %d/%d, text_dim %d, patch %v differ from transformer's %d/%d, %d, %v: the experts must take the same inputs",
			Transformer2, c.InChannels, c.OutChannels, c.TextDim, c.PatchSize, first.InChannels, first.OutChannels, first.TextDim, first.PatchSize)
	}
	return wanmodel.New(c), nil
}

// TwoExperts says the folder is Wan 2.2 A14B's: transformer_2 denoises
// below the boundary.
func (p *Pipeline) TwoExperts() bool { return p.moe.two() }

// Boundary is model_index.json's boundary_ratio (0: one transformer).
func (p *Pipeline) Boundary() float64 { return p.moe.Boundary }

// highNoise says the high-noise expert denoises timestep t: WanPipeline's
// `t >= boundary_ratio * num_train_timesteps`, which torch evaluates in
// float32 (an int64 or float32 timestep tensor against a Python float
// promotes both to float32).
func highNoise(t float32, boundary float64, numTrain int) bool {
	return t >= float32(boundary*float64(numTrain))
}

// SwitchStep is the index of the first step the low-noise expert runs
// among timesteps (len(timesteps) when it never does). Timesteps
// decrease, so every step before it runs the high-noise expert.
func SwitchStep(timesteps []float32, boundary float64, numTrain int) int {
	for i, t := range timesteps {
		if !highNoise(t, boundary, numTrain) {
			return i
		}
	}
	return len(timesteps)
}

// NumTrainTimesteps is a scheduler config's num_train_timesteps (1000,
// both schedulers' default, when absent).
func NumTrainTimesteps(schedulerConfig []byte) (int, error) {
	var c struct {
		N *int `json:"num_train_timesteps"`
	}
	if err := json.Unmarshal(schedulerConfig, &c); err != nil {
		return 0, fmt.Errorf("scheduler config: %w", err)
	}
	if c.N == nil {
		return 1000, nil
	}
	if *c.N < 1 {
		return 0, fmt.Errorf("scheduler config: num_train_timesteps %d must be positive", *c.N)
	}
	return *c.N, nil
}

// expertAt is the transformer (component name and model) and guidance
// scale of a step at timestep t.
func (p *Pipeline) expertAt(t float32, r Request, numTrain int) (string, *wanmodel.Model, float32) {
	if !p.TwoExperts() {
		return Transformer, p.transformer, float32(r.Guidance)
	}
	if highNoise(t, p.moe.Boundary, numTrain) {
		return Transformer, p.moe.high, float32(r.Guidance)
	}
	return Transformer2, p.moe.low, float32(r.guidance2())
}

// CheckExperts refuses what a request asks of a folder that cannot give
// it: guidance_scale_2 or low-noise LoRAs without a second expert
// (diffusers raises for both).
func (p *Pipeline) CheckExperts(r Request) error {
	if r.Guidance2 != nil && !p.TwoExperts() {
		return fmt.Errorf("guidance-2 applies to two-expert folders (Wan 2.2 A14B: boundary_ratio and transformer_2); this folder has one transformer: drop --guidance-2")
	}
	if len(r.LoRAs2) > 0 && !p.TwoExperts() {
		return fmt.Errorf("--lora-2 adapts the low-noise expert of a two-expert folder (Wan 2.2 A14B: transformer_2); this folder has one transformer: use --lora")
	}
	return nil
}

// WeightComponents lists the components that hold weights, in the order
// they run (transformer_2 after the transformer in a two-expert folder).
func (p *Pipeline) WeightComponents() []string { return p.weightComponents() }

// weightComponents is ComponentNames with transformer_2 after the
// transformer when the folder has two experts.
func (p *Pipeline) weightComponents() []string {
	names := p.ComponentNames()
	if !p.TwoExperts() {
		return names
	}
	var out []string
	for _, n := range names {
		out = append(out, n)
		if n == Transformer {
			out = append(out, Transformer2)
		}
	}
	return out
}

// stage is the transformer denoising now, with the text contexts (and
// LoRA adapters) on its device.
type stage struct {
	name                    string
	model                   *wanmodel.Model
	ops                     *tensor.Ops
	g                       float32
	ctxPos, ctxNeg, ctxBoth textContext
	freeLoRA                func()
}

func (s *stage) free() {
	if s.freeLoRA != nil {
		s.freeLoRA()
	}
	tensor.Free(s.ctxBoth.t, s.ctxNeg.t, s.ctxPos.t)
}

// denoiser runs the steps on the transformer each timestep belongs to:
// at the switch the high-noise expert is retired (it leaves the device
// and the host tier) and its contexts freed before the low-noise one's
// are uploaded; during the last pass before it, the high-noise expert's
// prefetch runs on into the low-noise expert's first blocks (Handoff).
// This is the order the planner replays (planner/predict.go).
type denoiser struct {
	p  *Pipeline
	rt *pipeline.Runtime
	r  Request
	// pos and neg are the prompts' embeddings [prompts, L, D] (encodeText).
	pos, neg []float32
	// posRows and negRows are each prompt's rows before its zero padding
	// (textRows), found once for every expert's contexts.
	posRows, negRows []int
	numTrain         int
	// switchAt is the first low-noise step (the step count for one
	// transformer, or when the boundary is never crossed).
	switchAt int
	steps    int
	batched  bool
	cur      *stage
}

func (p *Pipeline) newDenoiser(rt *pipeline.Runtime, r Request, pos, neg []float32, ts []float32) (*denoiser, error) {
	if err := p.CheckExperts(r); err != nil {
		return nil, err
	}
	d := &denoiser{p: p, rt: rt, r: r, pos: pos, neg: neg, posRows: promptRows(pos, r.MaxSeqLen, p.TextDim()),
		switchAt: len(ts), steps: len(ts), batched: r.CFG() && rt.Plan.Run.CFG != residency.CFGSequential}
	if r.CFG() {
		d.negRows = promptRows(neg, r.MaxSeqLen, p.TextDim())
	}
	if p.TwoExperts() {
		n, err := NumTrainTimesteps(p.schedRaw)
		if err != nil {
			return nil, err
		}
		d.numTrain, d.switchAt = n, SwitchStep(ts, p.moe.Boundary, n)
	}
	return d, nil
}

// enter makes the transformer of step i (at timestep t) the current one.
func (d *denoiser) enter(i int, t float32) error {
	name, model, g := d.p.expertAt(t, d.r, d.numTrain)
	if d.cur != nil && d.cur.name == name {
		return nil
	}
	ex := d.rt.Exec
	if d.cur != nil {
		if d.cur.name == Transformer2 {
			return fmt.Errorf("step %d: timestep %g is back above the boundary; the schedule must decrease", i, t)
		}
		ex.Retire(d.cur.name)
		d.cur.free()
		d.cur = nil
	}
	r := d.r
	ops := ex.Ops(name)
	textDim := d.p.TextDim()
	s := &stage{name: name, model: model, ops: ops, g: g}
	// Batched CFG uses only the joined contexts: the prompts' alone would
	// hold a [videos, L, D] tensor through the loop for nothing (and one
	// the planner does not count). Each video gets its own copy of its
	// prompt's embeddings, as diffusers repeats them num_videos_per_prompt
	// times.
	pos, posRows := perVideo(d.pos, d.posRows, r.videosPerPrompt())
	b := len(posRows)
	if d.batched {
		neg, negRows := perVideo(d.neg, d.negRows, r.videosPerPrompt())
		both := ops.Upload(append(pos, neg...), 2*b, r.MaxSeqLen, textDim)
		s.ctxBoth = textContext{both, append(posRows, negRows...)}
	} else {
		s.ctxPos = textContext{ops.Upload(pos, b, r.MaxSeqLen, textDim), posRows}
		if r.CFG() {
			neg, negRows := perVideo(d.neg, d.negRows, r.videosPerPrompt())
			s.ctxNeg = textContext{ops.Upload(neg, b, r.MaxSeqLen, textDim), negRows}
		}
	}
	d.cur = s
	// Each expert takes its own adapters (--lora the high-noise one,
	// --lora-2 the low-noise one), uploaded after its contexts as the
	// planner replays it.
	loras := r.LoRAs
	if name == Transformer2 {
		loras = r.LoRAs2
	}
	if len(loras) > 0 {
		free, err := d.p.applyLoRA(ops, model, loras)
		if err != nil {
			return err
		}
		s.freeLoRA = free
	}
	model.Options.FFNChunk = d.rt.Plan.Run.FFNChunk
	// The forward path (p.forward) runs p.transformer: the expert of this
	// stage until the loop ends (close).
	d.p.transformer = model
	return nil
}

// predict runs the current transformer's passes of step i and guides.
func (d *denoiser) predict(latents []float32, shape []int, t float32, i int) ([]float32, error) {
	s, p, rt := d.cur, d.p, d.rt
	handoff := s.name == Transformer && i == d.switchAt-1 && d.switchAt < d.steps
	run := func(x []float32, sh []int, ts []float32, ctx textContext, last bool) ([]float32, error) {
		if last && handoff {
			if err := rt.Exec.Handoff(Transformer, Transformer2); err != nil {
				return nil, err
			}
		}
		return p.forward(s.ops, rt, x, sh, ts, ctx)
	}
	ts := repeat([]float32{t}, shape[0]) // one timestep per video
	switch {
	case d.batched:
		both, err := run(concat(latents, latents), batchShape(shape, 2*shape[0]), repeat(ts, 2), s.ctxBoth, true)
		if err != nil {
			return nil, err
		}
		n := len(latents)
		return guide(both[:n], both[n:], s.g), nil
	case d.r.CFG():
		cond, err := run(latents, shape, ts, s.ctxPos, false)
		if err != nil {
			return nil, err
		}
		uncond, err := run(latents, shape, ts, s.ctxNeg, true)
		if err != nil {
			return nil, err
		}
		return guide(cond, uncond, s.g), nil
	}
	return run(latents, shape, ts, s.ctxPos, true)
}

// finish ends the loop: Done for the transformer that ran last, then its
// contexts freed.
func (d *denoiser) finish() {
	if d.cur != nil {
		d.rt.Exec.Done(d.cur.name)
	}
	d.close()
}

// close frees what the current stage holds (after an error too) and
// gives p.transformer back to the high-noise expert.
func (d *denoiser) close() {
	if d.cur != nil {
		d.cur.free()
		d.cur = nil
	}
	if d.p.moe.high != nil {
		d.p.transformer = d.p.moe.high
	}
}

// promptRows is textRows of each prompt's embeddings in e [prompts, L, d].
func promptRows(e []float32, L, d int) []int {
	var rows []int
	for off := 0; off < len(e); off += L * d {
		rows = append(rows, textRows(e[off:off+L*d], d))
	}
	return rows
}

// perVideo is the batch's contexts: each prompt's embeddings (e, [prompts,
// L, D]) and rows repeated for its n videos.
func perVideo(e []float32, rows []int, n int) ([]float32, []int) {
	per := len(e) / len(rows)
	out, outRows := make([]float32, 0, n*len(e)), make([]int, 0, n*len(rows))
	for i, r := range rows {
		for range n {
			out = append(out, e[i*per:(i+1)*per]...)
			outRows = append(outRows, r)
		}
	}
	return out, outRows
}
