// Package wan is the Wan pipeline (diffusers' WanPipeline and
// WanImageToVideoPipeline): prompt -> UMT5 text embeddings -> the
// transformer denoising latents under UniPC (or flow-match Euler) with
// classifier-free guidance -> the Wan VAE decoding frames. Beyond Wan 2.1
// text-to-video it runs Wan 2.1 image-to-video (i2v.go), Wan 2.2 TI2V-5B
// (ti2v.go) and Wan 2.2 A14B's two experts (moe.go), and encodes training
// data (encode.go). Every component runs through the residency executor;
// the plan decides where weights live, never the result.
package wan

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ferry/checkpoint"
	"ferry/model/umt5"
	wanmodel "ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/pipeline"
	"ferry/residency"
	"ferry/sampler"
	"ferry/tensor"
	"ferry/tokenizer"
	"ferry/torchrng"
)

// Component names, as in a diffusers Wan folder.
const (
	TextEncoder = "text_encoder"
	Transformer = "transformer"
	VAE         = "vae"
)

// Components lists the components that hold weights.
var Components = []string{TextEncoder, Transformer, VAE}

// Pipeline is a Wan folder's components declared with an executor.
type Pipeline struct {
	folder      *checkpoint.Folder
	tok         *tokenizer.Tokenizer
	text        *umt5.Model
	transformer *wanmodel.Model
	vae         *wanvae.Model
	vaeCfg      wanvae.Config
	schedRaw    []byte
	ext         extension // TI2V and image-to-video (ti2v.go, i2v.go)
	moe         experts   // Wan 2.2 A14B's two experts (moe.go)

	// Hooks, both optional: progress of the denoising steps and of the
	// VAE's latent frames (tiles included).
	OnStep  func(done, total int)
	OnFrame func(done, total int)

	// Shared names the components held by other runtimes (a server
	// holding one text encoder or VAE for several folders whose copies
	// have the same content): they run there, and Register leaves this
	// pipeline's own copies out.
	Shared map[string]*Shared
}

// Shared is a component registered with another runtime: Pipeline's copy
// was registered (RegisterShared) with Runtime's executor.
type Shared struct {
	Pipeline *Pipeline
	Runtime  *pipeline.Runtime
}

// Shareable lists the components a server may hold once for several
// folders: those that run before or after the denoising loop and take no
// adapters.
var Shareable = []string{TextEncoder, VAE}

// RegisterShared declares only component name with the executor, as
// Register would: the runtime that holds a shared component. A VAE is
// registered as its own folder needs it (the decoder alone for text to
// video), so image-to-video members need an image-to-video holder.
func (p *Pipeline) RegisterShared(ex *residency.Executor, name string) error {
	if !slices.Contains(Shareable, name) {
		return fmt.Errorf("%s cannot be shared (%s can)", name, strings.Join(Shareable, " and "))
	}
	return p.register(ex, name)
}

// on is where component name runs for a request on rt: the holder of a
// shared copy, or this pipeline on rt.
func (p *Pipeline) on(name string, rt *pipeline.Runtime) (*Pipeline, *residency.Executor) {
	if st := p.Shared[name]; st != nil {
		return st.Pipeline, st.Runtime.Exec
	}
	return p, rt.Exec
}

// fastTokenizer says whether diffusers loads a tokenizer of this
// model_index class as a fast one (the Wan repositories name
// T5TokenizerFast): a class named so, or AutoTokenizer, whose use_fast is
// on by default.
func fastTokenizer(class string) bool {
	return strings.HasSuffix(class, "Fast") || class == "AutoTokenizer"
}

// Open reads the folder's configs and tokenizer; no weights are read.
func Open(f *checkpoint.Folder) (*Pipeline, error) {
	// The experts first: a two-expert folder that does not add up is
	// refused before anything else is read, as running it as one
	// transformer would produce a wrong video without a word.
	moe, err := readExperts(f)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{folder: f, moe: moe}
	tc, err := f.Component("tokenizer")
	if err != nil {
		return nil, err
	}
	if p.tok, err = tokenizer.Load(tc.Dir); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if fastTokenizer(tc.Class) {
		p.tok.FollowFast()
	}
	raw, err := rawConfig(f, TextEncoder)
	if err != nil {
		return nil, err
	}
	tcfg, err := umt5.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TextEncoder, err)
	}
	p.text = umt5.New(tcfg)
	if raw, err = rawConfig(f, Transformer); err != nil {
		return nil, err
	}
	wcfg, err := wanmodel.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Transformer, err)
	}
	if wcfg.TextDim != tcfg.DModel {
		return nil, fmt.Errorf("%s: text_dim %d does not match the text encoder's d_model %d", Transformer, wcfg.TextDim, tcfg.DModel)
	}
	p.transformer = wanmodel.New(wcfg)
	if p.moe.two() {
		p.moe.high = p.transformer
		if p.moe.low, err = openExpert(f, wcfg); err != nil {
			return nil, err
		}
	}
	if raw, err = rawConfig(f, VAE); err != nil {
		return nil, err
	}
	if p.vaeCfg, err = wanvae.ParseConfig(raw); err != nil {
		return nil, fmt.Errorf("%s: %w", VAE, err)
	}
	if err := p.openVariant(f, wcfg); err != nil {
		return nil, err
	}
	p.vae = wanvae.New(p.vaeCfg)
	if p.schedRaw, err = rawConfig(f, "scheduler"); err != nil {
		return nil, err
	}
	return p, nil
}

// PromptTokens is the longest of the request's prompts in rows before
// their zero padding: its real token count (with </s>), or for embeddings
// the request gives, the rows before their trailing zero rows (textRows).
// The text encoder runs on at most that many tokens, and the transformer
// attends that many rows and one for the padding.
func (p *Pipeline) PromptTokens(r Request) int {
	n := 0
	count := func(prompt string, embeds []float32) {
		if embeds != nil {
			n = max(n, textRows(embeds, p.TextDim()))
			return
		}
		_, mask := p.tok.EncodeForModel(CleanPrompt(prompt), r.MaxSeqLen)
		real := 0
		for _, v := range mask {
			real += int(v)
		}
		n = max(n, real)
	}
	neg := r.negativeList()
	for i, prompt := range r.PromptList() {
		count(prompt, r.PromptEmbeds)
		if r.CFG() {
			count(neg[i], r.NegativePromptEmbeds)
		}
	}
	return n
}

// ZDim is the latent channel count.
func (p *Pipeline) ZDim() int { return p.vaeCfg.ZDim }

func rawConfig(f *checkpoint.Folder, name string) ([]byte, error) {
	c, err := f.Component(name)
	if err != nil {
		return nil, err
	}
	path, err := c.ConfigPath()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

// weightSource is where a component's weights are read from.
func (p *Pipeline) weightSource(name string) (residency.Source, error) {
	c, err := p.folder.Component(name)
	if err != nil {
		return nil, err
	}
	set, err := c.Weights()
	if err != nil {
		return nil, err
	}
	return residency.SourceOf(set), nil
}

// Register declares the pipeline's weight components with the executor.
func (p *Pipeline) Register(ex *residency.Executor) error {
	for _, name := range p.weightComponents() {
		if p.Shared[name] != nil {
			continue
		}
		if err := p.register(ex, name); err != nil {
			return err
		}
	}
	return nil
}

// register declares one weight component.
func (p *Pipeline) register(ex *residency.Executor, name string) error {
	src, err := p.weightSource(name)
	if err != nil {
		return err
	}
	var comp *residency.Component
	switch name {
	case TextEncoder:
		comp = p.text.Component(name, src)
	case Transformer:
		comp = p.transformer.Component(name, src)
	case Transformer2:
		comp = p.moe.low.Component(name, src)
	case ImageEncoder:
		comp = p.ext.img.model.Component(name, src)
	case VAE:
		if p.ext.i2v || p.ext.v2v {
			comp = p.vae.Component(name, src) // encodes the image, then decodes
			break
		}
		fallthrough
	default:
		// Text-to-video only decodes: the encoder's weights never move.
		comp = p.vae.DecoderComponent(name, src)
	}
	return ex.Register(comp)
}

// scheduler builds the folder's scheduler, with its shift overridden.
func (p *Pipeline) scheduler(flowShift float64) (sampler.Scheduler, error) {
	raw := p.schedRaw
	if flowShift > 0 {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("scheduler config: %w", err)
		}
		m[shiftKey(m["_class_name"])] = flowShift
		var err error
		if raw, err = json.Marshal(m); err != nil {
			return nil, err
		}
	}
	return sampler.FromConfig(raw)
}

// shiftKey is the config key holding the shift of a scheduler class:
// FlowMatchEulerDiscreteScheduler reads "shift", UniPC "flow_shift".
// Diffusers ignores keys a class does not know, so the other key would be
// a silent no-op.
func shiftKey(class any) string {
	if class == sampler.ClassFlowMatchEuler {
		return "shift"
	}
	return "flow_shift"
}

// Output is a generated video and what produced it.
type Output struct {
	// Video is [Videos, F, H, W, 3] in [0, 1] (diffusers' output_type="np");
	// nil for a request with LatentsOut.
	Video                []float32
	Videos, Frames, H, W int
	// Latents are the final latents [Videos, z, T, h, w] (normalised, as
	// diffusers' output_type="latent" returns them), LatentShape their
	// shape.
	Latents     []float32
	LatentShape []int
	// PromptEmbeds and NegativePromptEmbeds (with CFG) are the prompt
	// embeddings [prompts, MaxSeqLen, text dim] (zero past each prompt),
	// as Request takes them back for one prompt.
	PromptEmbeds         []float32
	NegativePromptEmbeds []float32
	// With keep set: the latents after every step.
	StepLatents [][]float32
	// ImageEmbeds are the image encoder's hidden states (Wan 2.1 I2V).
	ImageEmbeds []float32
	// Condition is the image-to-video condition: the mask channels and the
	// condition video's latents [s+z, T, h, w] (Wan 2.1, Wan 2.2 I2V), or
	// the image's latent frame [z, h·w] (TI2V).
	Condition []float32
	// VideoLatents are a video-to-video request's encoded video
	// [z, T, h, w], normalised, before the noise.
	VideoLatents      []float32
	KeepIntermediates bool
	// StepExpert names the transformer that ran each step.
	StepExpert []string
}

// Generate runs the whole request. opt.KeepIntermediates keeps the prompt
// embeddings and per-step latents (for comparisons with diffusers).
func (p *Pipeline) Generate(rt *pipeline.Runtime, r Request, keep bool) (*Output, error) {
	r.Defaults()
	r.Height, r.Width = p.FitSize(r.Height, r.Width)
	if err := r.Check(); err != nil {
		return nil, err
	}
	if err := p.CheckSize(r); err != nil {
		return nil, err
	}
	out := &Output{Videos: r.Videos(), Frames: r.Frames, H: r.Height, W: r.Width, KeepIntermediates: keep}
	pos, neg, err := p.encodeText(rt, r)
	if err != nil {
		return nil, err
	}
	out.PromptEmbeds, out.NegativePromptEmbeds = pos, neg
	if err := p.prepareImage(rt, r, out); err != nil {
		return nil, err
	}
	defer func() { p.ext.cond = nil }()
	video, err := p.prepareVideo(rt, r, out)
	if err != nil {
		return nil, err
	}
	latents, err := p.denoise(rt, r, pos, neg, video, out)
	if err != nil {
		return nil, err
	}
	p.pinFirstFrame(latents, p.latentShape(r))
	out.Latents, out.LatentShape = latents, p.latentShape(r)
	if r.LatentsOut {
		return out, nil
	}
	out.Video, err = p.decode(rt, r, latents)
	return out, err
}

// encodeText tokenizes and encodes the prompts (and with guidance on
// each one's negative prompt) in one batch, then trims each to its real
// length and zero-pads, as WanPipeline does: pos and neg are [prompts, L,
// D]. Embeddings the request gives (one prompt) are taken as they are
// (encode_prompt's prompt_embeds and negative_prompt_embeds); with all of
// them given the text phase does not run.
func (p *Pipeline) encodeText(rt *pipeline.Runtime, r Request) (pos, neg []float32, err error) {
	d := p.TextDim()
	want := r.MaxSeqLen * d
	for _, g := range []struct {
		name string
		e    []float32
	}{{"prompt", r.PromptEmbeds}, {"negative prompt", r.NegativePromptEmbeds}} {
		if g.e != nil && len(g.e) != want {
			return nil, nil, fmt.Errorf("%s embeddings hold %d values; the text encoder gives %d (%d tokens x %d)",
				g.name, len(g.e), want, r.MaxSeqLen, d)
		}
	}
	pos, neg = r.PromptEmbeds, r.NegativePromptEmbeds
	// What is missing is encoded, in one batch, into its place: every
	// prompt, then every negative prompt (one per prompt, as diffusers
	// encodes them).
	var prompts []string
	if pos == nil {
		prompts = append(prompts, r.PromptList()...)
	}
	if r.CFG() && neg == nil {
		prompts = append(prompts, r.negativeList()...)
	}
	if len(prompts) == 0 {
		return pos, neg, nil
	}
	got, err := p.encodePrompts(rt, prompts, r.MaxSeqLen)
	if err != nil {
		return nil, nil, err
	}
	if pos == nil {
		pos, got = got[:len(r.PromptList())*want], got[len(r.PromptList())*want:]
	}
	if r.CFG() && neg == nil {
		neg = got
	}
	return pos, neg, nil
}

// encodePrompts encodes prompts in one batch of their real tokens and
// returns them zero-padded to L tokens each, [prompts, L, D].
func (p *Pipeline) encodePrompts(rt *pipeline.Runtime, prompts []string, L int) ([]float32, error) {
	end := rt.Phase(pipeline.PhaseText)
	defer end()
	toks := make([][]int32, len(prompts))
	n := 0 // the longest real length
	for i, s := range prompts {
		ids, mask := p.tok.EncodeForModel(CleanPrompt(s), L)
		real := 0
		for _, v := range mask {
			real += int(v)
		}
		toks[i] = ids[:real]
		n = max(n, real)
	}
	// WanPipeline keeps only each prompt's real tokens and zero-pads to L.
	// Padded keys are masked and the position bias is relative, so a real
	// token's output does not depend on how much padding follows: encoding
	// n tokens instead of L gives the same embeddings for a fraction of
	// the work (a prompt is tens of tokens, L is 512).
	ids, mask := make([]int32, 0, len(prompts)*n), make([]int32, 0, len(prompts)*n)
	for _, t := range toks {
		for j := range n {
			if j < len(t) {
				ids, mask = append(ids, t[j]), append(mask, 1)
			} else {
				ids, mask = append(ids, p.tok.PadID()), append(mask, 0)
			}
		}
	}
	holder, ex := p.on(TextEncoder, rt)
	ops := ex.Ops(TextEncoder)
	h, err := holder.text.Encode(ex, ops, ids, mask, len(prompts), n)
	ex.Done(TextEncoder)
	if err != nil {
		return nil, fmt.Errorf("text encoder: %w", err)
	}
	got := ops.Download(h)
	h.Free()
	if err := ops.Err(); err != nil {
		return nil, err
	}
	d := len(got) / (len(prompts) * n)
	all := make([]float32, len(prompts)*L*d)
	for i, t := range toks {
		copy(all[i*L*d:i*L*d+len(t)*d], got[i*n*d:])
	}
	return all, nil
}

// textContext is a batch's text embeddings on the device [B, L, D] and,
// per sample, the rows before its zero padding (textRows): the
// transformer folds that padding into one key (wanmodel.Inputs.TextRows).
type textContext struct {
	t    *tensor.Tensor
	rows []int
}

// textRows is how many rows of the embeddings e (rows of width d) come
// before the trailing rows that are all zeros: the prompt's tokens when
// encodePrompts padded them, any count for embeddings a request gives.
func textRows(e []float32, d int) int {
	n := len(e) / d
	for n > 0 && allZero(e[(n-1)*d:n*d]) {
		n--
	}
	return n
}

func allZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// initialLatents are the request's latents or standard-normal noise drawn
// from g, the request's generator (PyTorch's CPU generator seeded with
// the request's seed).
func (p *Pipeline) initialLatents(r Request, g *torchrng.Generator) ([]float32, error) {
	shape := p.latentShape(r)
	n := tensor.NumElems(shape)
	if r.Latents != nil {
		if len(r.Latents) != n {
			return nil, fmt.Errorf("latents hold %d values; this request needs %v = %d", len(r.Latents), shape, n)
		}
		return append([]float32(nil), r.Latents...), nil
	}
	// diffusers' randn_tensor with generator=torch.Generator().manual_seed(
	// seed), and ComfyUI's noise for the same seed.
	out := make([]float32, n)
	g.Randn(out)
	return out, nil
}

// seedNoise gives a stochastic scheduler (FlowMatchEuler's
// stochastic_sampling) its per-step noise from g, the request's generator,
// after the initial latents: what diffusers would draw with the generator
// passed to each step. Its WanPipeline passes none (torch's global
// generator draws), so the two agree in distribution, not in values.
func seedNoise(s sampler.Scheduler, g *torchrng.Generator) {
	if n, ok := s.(sampler.Noisy); ok && n.Stochastic() {
		n.SetNoise(g.Randn)
	}
}

// denoise runs the sampling loop on host latents: from noise, or from a
// video-to-video request's video latents noised to its first step.
func (p *Pipeline) denoise(rt *pipeline.Runtime, r Request, pos, neg, video []float32, out *Output) ([]float32, error) {
	end := rt.Phase(pipeline.PhaseDenoise)
	defer end()
	gen := torchrng.New(r.Seed)
	latents, err := p.initialLatents(r, gen)
	if err != nil {
		return nil, err
	}
	sched, err := p.scheduler(r.FlowShift)
	if err != nil {
		return nil, err
	}
	if err := sched.SetTimesteps(r.Steps); err != nil {
		return nil, err
	}
	seedNoise(sched, gen)
	shape := p.latentShape(r)
	ts := sched.Timesteps()
	first := 0
	if video != nil {
		if first, err = noiseVideo(sched, r, video, latents); err != nil {
			return nil, err
		}
	}
	d, err := p.newDenoiser(rt, r, pos, neg, ts)
	if err != nil {
		return nil, err
	}
	defer d.close()
	for i := first; i < len(ts); i++ {
		t := ts[i]
		if err := rt.Err(); err != nil {
			return nil, err
		}
		if err := d.enter(i, t); err != nil {
			return nil, err
		}
		endStep := rt.Step(i - first)
		pred, err := d.predict(latents, shape, t, i)
		if err != nil {
			return nil, err
		}
		if err := sched.Step(pred, latents); err != nil {
			return nil, err
		}
		if out.KeepIntermediates {
			out.StepLatents = append(out.StepLatents, append([]float32(nil), latents...))
		}
		out.StepExpert = append(out.StepExpert, d.cur.name)
		endStep()
		if p.OnStep != nil {
			p.OnStep(i+1-first, len(ts)-first)
		}
	}
	d.finish()
	return latents, nil
}

// applyLoRA uploads adapters after the contexts (as the planner predicts)
// and sets them on model (the transformer, or the expert denoising now);
// free takes them off and frees them.
func (p *Pipeline) applyLoRA(ops *tensor.Ops, model *wanmodel.Model, ls []LoRA) (free func(), err error) {
	adapters, buf, err := UploadLoRA(ops, ls)
	if err != nil {
		return nil, err
	}
	if err := model.SetLoRA(adapters); err != nil {
		buf.Free()
		return nil, err
	}
	return func() {
		model.SetLoRA(nil)
		buf.Free()
	}, nil
}

// forward runs the transformer once on host latents.
func (p *Pipeline) forward(ops *tensor.Ops, rt *pipeline.Runtime, x []float32, shape []int, ts []float32, ctx textContext) ([]float32, error) {
	x, shape = p.modelInput(x, shape)
	in := ops.Upload(x, shape...)
	v, err := p.transformerForward(rt, ops, in, ts, ctx)
	in.Free()
	if err != nil {
		return nil, fmt.Errorf("transformer: %w", err)
	}
	out := ops.Download(v)
	v.Free()
	return out, ops.Err()
}

// guide is noise_uncond + g·(noise_cond − noise_uncond) in float32, each
// operation rounded as PyTorch rounds it.
func guide(cond, uncond []float32, g float32) []float32 {
	out := make([]float32, len(cond))
	for i := range out {
		d := float32(cond[i] - uncond[i])
		m := float32(g * d)
		out[i] = uncond[i] + m
	}
	return out
}

func concat(a, b []float32) []float32 {
	return append(append(make([]float32, 0, len(a)+len(b)), a...), b...)
}

func batchShape(shape []int, b int) []int {
	s := append([]int(nil), shape...)
	s[0] = b
	return s
}

// repeat is n copies of v, one after another: a batch's per-sample
// timesteps, or one embedding for each of its videos.
func repeat(v []float32, n int) []float32 {
	out := make([]float32, 0, n*len(v))
	for range n {
		out = append(out, v...)
	}
	return out
}

// decode de-normalises the latents (latents·std + mean per channel, as
// WanPipeline divides by 1/std), decodes them, and maps [-1, 1] to [0, 1]
// in [videos, F, H, W, 3] layout. A batch's videos are decoded one at a
// time: each decodes alone as it would in the batch (the VAE mixes no
// samples), and the VAE's memory stays one video's where diffusers'
// batched decode takes the batch's (the planner replays the same loop).
func (p *Pipeline) decode(rt *pipeline.Runtime, r Request, latents []float32) ([]float32, error) {
	end := rt.Phase(pipeline.PhaseVAE)
	defer end()
	shape := p.latentShape(r)
	n := shape[0]
	one := batchShape(shape, 1)
	per := len(latents) / n
	// The tiling is this request's plan's, wherever the VAE is held.
	holder, ex := p.on(VAE, rt)
	vae := holder.vae
	ops := ex.Ops(VAE)
	vae.Options.Tiling = wanvae.SquareTiling(rt.Plan.Run.VAETile, rt.Plan.Run.VAEStride)
	var frames []float32
	done := false // Done is called once, after the last video's decode
	defer func() {
		if !done {
			ex.Done(VAE)
		}
	}()
	for i := range n {
		z := append([]float32(nil), latents[i*per:(i+1)*per]...)
		if err := p.vaeCfg.Denormalize(z, one); err != nil {
			return nil, err
		}
		// Progress counts the frames of every video.
		vae.Options.OnFrame = nil
		if p.OnFrame != nil {
			vae.Options.OnFrame = func(decoded, total int) { p.OnFrame(i*total+decoded, n*total) }
		}
		zt := ops.Upload(z, one...)
		video, err := vae.Decode(ex, ops, zt)
		zt.Free()
		if i == n-1 {
			ex.Done(VAE) // before the download, as the planner replays it
			done = true
		}
		if err != nil {
			return nil, fmt.Errorf("vae: %w", err)
		}
		v := ops.Download(video)
		vs := video.Shape()
		video.Free()
		if err := ops.Err(); err != nil {
			return nil, err
		}
		if frames == nil {
			frames = make([]float32, n*len(v))
		}
		toFrames(frames[i*len(v):(i+1)*len(v)], v, vs[2], vs[3], vs[4])
	}
	return frames, nil
}

// toFrames maps video v [1, 3, F, H, W] in [-1, 1] to out [F, H, W, 3] in
// [0, 1]: (v/2 + 0.5) clamped, as diffusers' VideoProcessor does.
func toFrames(out, v []float32, f, h, w int) {
	plane := f * h * w
	for c := range 3 {
		for i := range plane {
			x := float32(v[c*plane+i]/2) + 0.5
			out[i*3+c] = min(max(x, 0), 1)
		}
	}
}

// ReadLatents reads tensor "latents" (float32) from a safetensors file.
func ReadLatents(path string) ([]float32, []int, error) {
	f, err := checkpoint.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, ok := f.Lookup("latents")
	if !ok {
		return nil, nil, fmt.Errorf("%s has no tensor \"latents\" (want float32 [1, 16, T, H/8, W/8])", filepath.Base(path))
	}
	v, err := f.ReadF32(info)
	if err != nil {
		return nil, nil, err
	}
	return v, info.Shape, nil
}
