package planner

import (
	"errors"
	"fmt"

	"ferry/hwprofile"
	"ferry/residency"
	"ferry/tensor"
)

// Prediction is what a plan is expected to cost for a request on a
// machine. Its JSON carries the report's `predicted` contract:
// peak_device_bytes, peak_host_bytes, peak_rss_bytes, total_s and step_s.
type Prediction struct {
	Model      string                `json:"model"`
	Plan       string                `json:"plan"`
	Request    Request               `json:"request"`
	Budgets    Budgets               `json:"budgets"`
	Run        residency.RunOptions  `json:"run"`
	Components []ComponentPrediction `json:"components"`

	// PeakDeviceBytes is the allocated peak (the measured
	// peak_device_bytes); PeakDeviceReservedBytes what the caching
	// allocator holds at most, which the device budget caps.
	PeakDeviceBytes         int64 `json:"peak_device_bytes"`
	PeakDeviceReservedBytes int64 `json:"peak_device_reserved_bytes"`
	// PeakHostBytes is the host device's reserved peak (host-tier copies,
	// host-placed components, read staging), which the host budget caps.
	PeakHostBytes int64 `json:"peak_host_bytes"`
	// PeakRSSBytes adds the process's own memory to the joint peak of both.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`

	TextEncoderS float64 `json:"text_encoder_s"`
	DenoiseS     float64 `json:"denoise_s"`
	VAES         float64 `json:"vae_s"`
	// StepS is a steady denoising step; FirstStepS includes first loads.
	StepS      float64 `json:"step_s"`
	FirstStepS float64 `json:"first_step_s"`
	TotalS     float64 `json:"total_s"`
	// LoadS is the part of TotalS a request that finds the runtime kept
	// does not pay again: the whole copy of resident and host-placed
	// components, and the checkpoint read that fills host-tier copies.
	LoadS float64 `json:"load_s"`

	// DiskGBps is the rate reads of uncached checkpoint pages were priced
	// at, and DiskNote where it came from.
	DiskGBps float64 `json:"disk_gbps"`
	DiskNote string  `json:"disk_note,omitempty"`
	// DiskSustainedGBps is the rate past the first DiskBurstGB of them,
	// where calibrate measured one (hwprofile.Profile.DiskGBpsPastBurst).
	DiskSustainedGBps float64 `json:"disk_sustained_gbps,omitempty"`
	DiskBurstGB       float64 `json:"disk_burst_gb,omitempty"`

	// Switch is Wan 2.2 A14B's expert switch (nil for one transformer).
	Switch *SwitchPrediction `json:"switch,omitempty"`

	// Fits says the plan runs within the budgets; Problem says why not.
	Fits    bool   `json:"fits"`
	Problem string `json:"problem,omitempty"`
}

// SwitchPrediction is the expert switch of a two-expert request: when it
// happens and what it costs.
type SwitchPrediction struct {
	Boundary float64 `json:"boundary_ratio"`
	// Step is the first step (from 0) the low-noise expert runs: the
	// high-noise expert runs Step steps. Step equal to the request's steps
	// means the low-noise expert never runs; 0 that the high-noise never
	// does.
	Step int `json:"step"`
	// StepS is the first low-noise step, with whatever loads of the
	// low-noise expert the handoff did not hide; SteadyS a steady one.
	StepS   float64 `json:"step_s"`
	SteadyS float64 `json:"steady_step_s"`
	// CostS is what the switch adds: retiring the high-noise expert
	// (waiting for its last load) and StepS beyond SteadyS.
	CostS float64 `json:"cost_s"`
	// LoadBytes is what the low-noise expert copied to the device through
	// its first step, the handoff's prefetch included.
	LoadBytes int64 `json:"load_bytes"`
}

// ComponentPrediction is one component's placement and predicted cost
// over the whole request.
type ComponentPrediction struct {
	Name         string              `json:"name"`
	Placement    residency.Placement `json:"placement"`
	Tier         residency.Tier      `json:"tier,omitempty"`
	Prefetch     int                 `json:"prefetch,omitempty"`
	Persistent   int                 `json:"persistent,omitempty"`
	Blocks       int                 `json:"blocks"`
	DeviceBytes  int64               `json:"device_bytes"` // weights in compute dtype
	StoredBytes  int64               `json:"stored_bytes"` // weights in storage dtype
	Cached       float64             `json:"page_cached"`  // fraction of the checkpoint in the page cache
	LargestBlock int64               `json:"largest_block_bytes"`
	ComputeS     float64             `json:"compute_s"`
	StallS       float64             `json:"stall_s"`
	CopyS        float64             `json:"copy_s"`
	// ReadS is the part of CopyS spent reading the checkpoint (disk and
	// page cache, not the first touch of the pages it fills).
	ReadS float64 `json:"read_s"`
	// FillS is the first touch of the page cache those reads filled
	// (part of CopyS).
	FillS       float64 `json:"fill_s"`
	Loads       int     `json:"loads"`
	BytesCopied int64   `json:"bytes_copied"`
	BytesDisk   int64   `json:"bytes_read_disk"`
}

// Safety margins: a plan fits when its simulated peaks stay this far below
// the budgets, which covers what the activation model does not see.
const (
	marginFraction = 0.02
	marginBytes    = 2 << 20
	// heapBase is the Go runtime, code, tokenizer and scratch pools.
	heapBase = 96 << 20
)

// effective is the budget the simulation must fit in.
func effective(budget int64) int64 {
	if budget <= 0 {
		return 0
	}
	return max(1, budget-int64(float64(budget)*marginFraction)-marginBytes)
}

// Predict simulates plan for req on hw within the budgets. It never fails
// for lack of memory: a plan that does not fit comes back with Fits false
// and the reason. Errors are for invalid input.
func Predict(p *Profile, hw hwprofile.Profile, plan *residency.Plan, req Request, b Budgets) (Prediction, error) {
	return predict(p, hw, plan, req, b, false)
}

// predict is Predict, with the VAE's chunks past the second estimated
// where approx is set (the search's comparisons: simMode).
func predict(p *Profile, hw hwprofile.Profile, plan *residency.Plan, req Request, b Budgets, approx bool) (Prediction, error) {
	req = req.normalized()
	if err := req.Validate(p); err != nil {
		return Prediction{}, err
	}
	if plan == nil {
		plan = &residency.Plan{Name: "resident"}
	}
	if err := plan.Validate(); err != nil {
		return Prediction{}, err
	}
	if err := hw.Validate(); err != nil {
		return Prediction{}, err
	}
	pred, _, err := simulate(p, hw, plan, req, b, simMode{approx: approx})
	if err != nil {
		return Prediction{}, err
	}
	pred.LoadS = loadSeconds(pred)
	pred.Fits, pred.Problem = true, ""
	if pred.Problem = pred.overBudget(); pred.Problem != "" {
		pred.Fits = false
	} else if tight := (Budgets{DeviceBytes: effective(b.DeviceBytes), HostBytes: effective(b.HostBytes)}); tight != b {
		// The margin: the same plan must also run with a little less.
		check, _, err := simulate(p, hw, plan, req, tight, simMode{approx: approx})
		if err != nil {
			return Prediction{}, err
		}
		if check.Problem != "" {
			pred.Fits, pred.Problem = false, "within 2% of the budget: "+check.Problem
		}
	}
	return pred, nil
}

func (pr Prediction) overBudget() string {
	return overBudget(pr.Problem, pr.Budgets, pr.PeakDeviceReservedBytes, pr.PeakHostBytes, pr.PeakRSSBytes)
}

// overBudget is a prediction's problem: the one it already has, else the
// first peak (device, host, process RSS) over its budget; "" when it fits.
func overBudget(problem string, b Budgets, device, host, rss int64) string {
	if problem != "" {
		return problem
	}
	if b.DeviceBytes > 0 && device > b.DeviceBytes {
		return fmt.Sprintf("device peak %s exceeds the budget %s", tensor.FormatBytes(device), tensor.FormatBytes(b.DeviceBytes))
	}
	if b.HostBytes > 0 && host > b.HostBytes {
		return fmt.Sprintf("host peak %s exceeds the budget %s", tensor.FormatBytes(host), tensor.FormatBytes(b.HostBytes))
	}
	if b.RSSBytes > 0 && rss > b.RSSBytes {
		return fmt.Sprintf("process RSS %s exceeds this machine's memory %s", tensor.FormatBytes(rss), tensor.FormatBytes(b.RSSBytes))
	}
	return ""
}

// phaseStats are per-phase peaks (reserved bytes) of one simulation, in
// phase order: text encoding, denoising, decoding.
type phaseStats struct {
	dev, host [3]int64
}

// simMode is how simulate runs. With phaseEmpty every phase starts with
// the allocators' caches released, so that its reserved peak is its own
// (the search's per-component estimates). With approx the VAE's chunks
// past the second are taken to repeat it (sim.chunkEstimate): cheaper at
// 81 frames, but not exact; the search compares plans so and predicts
// its choice exactly.
type simMode struct{ phaseEmpty, approx bool }

// simulate runs the pipeline (text encoding, the denoising loop, the VAE
// decode) through the executor and allocator model.
func simulate(p *Profile, hw hwprofile.Profile, plan *residency.Plan, req Request, b Budgets, mode simMode) (Prediction, phaseStats, error) {
	plan = Complete(p, plan)
	switchAt, err := p.SwitchStep(req.Steps, req.FlowShift)
	if err != nil {
		return Prediction{}, phaseStats{}, err
	}
	s := newSim(hw, b)
	s.approx = mode.approx
	for _, c := range p.Components {
		if err := s.register(c, plan.For(c.Name), p.Compute); err != nil {
			pred := newPrediction(p, plan, req, b)
			pred.Problem = err.Error()
			return pred, phaseStats{}, nil
		}
	}
	pl := &pipelineSim{s: s, p: p, req: req, run: plan.Run, id: &ids{}, phaseEmpty: mode.phaseEmpty, switchAt: switchAt}
	pl.text()
	pl.image()
	pl.encodeImage()
	pl.denoise()
	if !req.LatentsOut {
		pl.decode()
	}
	pred := newPrediction(p, plan, req, b)
	pred.DiskGBps, pred.DiskNote = hw.DiskGBps, hw.DiskNote
	if hw.DiskSustainedGBps > 0 {
		pred.DiskSustainedGBps, pred.DiskBurstGB = hw.DiskGBpsPastBurst(), hw.DiskBurstGB
	}
	pl.fill(&pred)
	ph := phaseStats{dev: pl.devPhase, host: pl.hostPhase}
	if s.err != nil {
		pred.Problem = "does not fit: " + s.err.Error()
		if !errors.Is(s.err, errOOM) {
			return pred, ph, s.err
		}
	}
	return pred, ph, nil
}

func newPrediction(p *Profile, plan *residency.Plan, req Request, b Budgets) Prediction {
	return Prediction{Model: p.Name, Plan: plan.Name, Request: req, Budgets: b, Run: plan.Run}
}

// pipelineSim is the Wan pipeline's use of the executor (text- and
// image-to-video, one transformer or two experts).
// What the pipeline itself keeps on the device is part of the contract
// with pipeline/wan: the text contexts from encoding to the end of the
// loop (one [2B, Ltext, D] tensor with batched CFG, built by joining the
// two branches), the latent input of each transformer pass and its output,
// and for the decode the latents and the whole video in float32. It calls
// Executor.Done after each phase.
type pipelineSim struct {
	s   *sim
	p   *Profile
	req Request
	run residency.RunOptions
	id  *ids

	contexts   []int
	phaseEmpty bool
	// phase peaks (reserved) of the device and the host: text, denoise, vae
	devPhase, hostPhase [3]int64
	// times and stats at phase boundaries
	tText, tDenoise, tVAE float64
	// switchAt is the first low-noise step (Steps for one transformer);
	// stages are the transformers' runs of steps, in order (denoise).
	switchAt int
	stages   []stageSim
	// tSwitch is the time retiring the high-noise expert took.
	tSwitch float64
}

// stageSim is one transformer's run of consecutive steps: the steps
// simulated (the first ones, until the steady state, and before a switch
// the last one, whose final pass hands off to the next expert), the
// steady step and how many unsimulated steps repeat it.
type stageSim struct {
	comp    *simComp
	steps   []stepSim
	steady  stepSim
	repeats int
	// loadBytes is what comp copied through its first step, the blocks the
	// previous expert's handoff fetched included.
	loadBytes int64
}

// stepSim is one simulated denoising step: its time and the transformer's
// stats in it.
type stepSim struct {
	t  float64
	st compStats
}

// firstStage is the stage that runs first.
func (pl *pipelineSim) firstStage() stageSim { return pl.stages[0] }

func (pl *pipelineSim) batched() bool {
	return pl.req.cfg() && pl.run.CFG != residency.CFGSequential
}

// window starts recording a phase's peaks; end stores them.
func (pl *pipelineSim) window() {
	if pl.phaseEmpty {
		pl.s.dev.releaseEmpty()
		pl.s.host.releaseEmpty()
	}
	pl.s.dev.resetWindow()
	pl.s.host.resetWindow()
}

func (pl *pipelineSim) endWindow(phase int) {
	pl.devPhase[phase], pl.hostPhase[phase] = pl.s.dev.winRes, pl.s.host.winRes
}

func (pl *pipelineSim) text() {
	s, te := pl.s, pl.s.byName[TextEncoder]
	t0 := s.now
	pl.window()
	defer pl.endWindow(0)
	if pl.req.PromptsEncoded {
		return
	}
	prompts := 1
	if pl.req.cfg() {
		prompts = 2
	}
	// pipeline/wan encodes the prompt and the negative prompt as one batch
	// of their real tokens, downloads the result and frees it.
	req := pl.req
	req.TextLen = req.PromptTokens
	ps, out := umt5Pass(pl.p, req, prompts*pl.req.Prompts, pl.id)
	s.runPass(te, ps)
	s.done(te)
	s.apply(event{id: out}, s.dev)
	pl.tText = s.now - t0
}

// contexts uploads the zero-padded prompt embeddings for the transformer,
// as pipeline/wan does when denoising starts: one [2B, L, D] tensor for
// batched CFG, else the prompt's and (with CFG) the negative prompt's. They
// go where the transformer computes (host memory for a host placement).
func (pl *pipelineSim) uploadContexts(tr *simComp) {
	r := &recorder{ids: pl.id}
	b, n, d := pl.req.Batch, pl.req.TextLen, pl.p.Text.DModel
	switch {
	case pl.batched():
		pl.contexts = []int{r.alloc(f32(2*b, n, d))}
	case pl.req.cfg():
		pl.contexts = []int{r.alloc(f32(b, n, d)), r.alloc(f32(b, n, d))}
	default:
		pl.contexts = []int{r.alloc(f32(b, n, d))}
	}
	a := pl.req.AdapterBytes
	if tr.name == Transformer2 {
		a = pl.req.AdapterBytes2 // the low-noise expert's own adapters
	}
	if a > 0 {
		pl.contexts = append(pl.contexts, r.alloc(a)) // LoRA adapters, uploaded next
	}
	for _, ev := range r.take() {
		pl.s.apply(ev, tr.acts)
	}
}

// freeContexts frees the contexts (and adapters) on tr's device.
func (pl *pipelineSim) freeContexts(tr *simComp) {
	for _, id := range pl.contexts {
		pl.s.apply(event{id: id}, tr.acts)
	}
	pl.contexts = nil
}

// denoise simulates each transformer's stage of steps: for one
// transformer all of them; for two experts the high-noise expert's steps,
// the switch (its retirement, the contexts moved to the low-noise
// expert's device), then the low-noise expert's steps.
func (pl *pipelineSim) denoise() {
	s := pl.s
	pl.window()
	defer pl.endWindow(1)
	steps := pl.req.Steps
	type span struct {
		comp string
		n    int
	}
	var spans []span
	if pl.switchAt > 0 {
		spans = append(spans, span{Transformer, pl.switchAt})
	}
	if pl.switchAt < steps {
		spans = append(spans, span{Transformer2, steps - pl.switchAt})
	}
	for i, sp := range spans {
		tr := s.byName[sp.comp]
		pl.uploadContexts(tr)
		handoff := i+1 < len(spans)
		st := pl.stage(tr, sp.n, handoff)
		t0 := s.now
		if handoff {
			s.retire(tr)
		} else {
			s.done(tr)
		}
		pl.freeContexts(tr)
		if handoff {
			pl.tSwitch = s.now - t0
		}
		pl.tDenoise += s.now - t0
		for _, x := range st.steps {
			pl.tDenoise += x.t
		}
		pl.tDenoise += float64(st.repeats) * st.steady.t
		pl.stages = append(pl.stages, st)
	}
}

// stage simulates n steps of tr: the first ones until the steady state
// (two, three from a disk tier: the executor drops a block's pages after
// its second load, so step 3's reads go to the disk again, as every later
// step's do), and with handoff the last one, whose final pass prefetches
// into the next expert. The steps between repeat the steady one.
func (pl *pipelineSim) stage(tr *simComp, n int, handoff bool) stageSim {
	s := pl.s
	c, f, h, w := pl.req.latent(pl.p)
	passes, batch := 1, pl.req.Batch
	switch {
	case pl.batched():
		batch *= 2
	case pl.req.cfg():
		passes = 2
	}
	first := 2
	if tr.plan.FromDisk() {
		first = 3
	}
	first = min(first, n)
	last := handoff && n > first // the handoff step is simulated apart
	st := stageSim{comp: tr}
	lr := pl.req.LoRA
	if tr.name == Transformer2 {
		lr = pl.req.LoRA2 // the low-noise expert's own adapters
	}
	// Every pass of the stage makes the same allocations: its script is
	// built once and replayed (its tensors all die within the pass, so
	// their ids are free again when the next pass starts).
	script := wanPass(pl.p, pl.req, pl.run, batch, lr.split(pl.p.Wan.NumLayers), pl.id)
	step := func(hand bool) {
		before, t0 := tr.stats, s.now
		for pass := range passes {
			if hand && pass == passes-1 {
				tr.next = s.byName[Transformer2]
			}
			r := &recorder{ids: pl.id}
			lat := r.alloc(f32(batch, c, f, h, w))
			img := 0
			if rows := imageRows(pl.p); rows > 0 {
				img = r.alloc(f32(batch, rows, *pl.p.Wan.ImageDim)) // the image embeddings
			}
			for _, ev := range r.take() {
				s.apply(ev, tr.acts) // on the transformer's device
			}
			s.runPass(tr, script)
			if img != 0 {
				s.apply(event{id: img}, tr.acts)
			}
			s.apply(event{id: lat}, tr.acts)
		}
		st.steps = append(st.steps, stepSim{t: s.now - t0, st: tr.stats.minus(before)})
	}
	for i := range first {
		step(handoff && !last && i == first-1)
		if i == 0 {
			st.loadBytes = tr.stats.bytesCopied
		}
	}
	st.steady = st.steps[len(st.steps)-1]
	if handoff && !last && len(st.steps) > 1 {
		st.steady = st.steps[len(st.steps)-2] // the last one handed off
	}
	if last {
		step(true)
	}
	st.repeats = n - len(st.steps)
	return st
}

// decode simulates model/wanvae's Decode (or DecodeTiled) of each video
// in turn, as pipeline/wan decodes a batch: the pipeline hands the VAE one
// video's latents on its device, it allocates that video there, decodes
// it chunk by chunk (tile by tile), and the pipeline frees the latents,
// calls Done after the last video's decode, and frees the video once it
// is downloaded. Videos after the second repeat it: the third and later
// ones before the last are priced from it, not replayed.
func (pl *pipelineSim) decode() {
	vae := pl.s.byName[VAE]
	pl.window()
	defer pl.endWindow(2)
	prior := vae.stats // an image-to-video request's encode (encodeImage)
	d := &direct{s: pl.s, on: vae.acts, r: &recorder{ids: pl.id}}
	n := pl.req.Batch
	var total, repT float64
	var stats, repSt compStats
	for i := 0; i < n; i++ {
		if i == 2 && i < n-1 {
			k := n - 3 // videos 2 to n-2, each as video 1
			total += float64(k) * repT
			stats = stats.plus(repSt, k)
			i = n - 2
			continue
		}
		t, st := pl.decodeVideo(d, i == n-1)
		total, stats = total+t, stats.plus(st, 1)
		if i == 1 {
			repT, repSt = t, st
		}
	}
	vae.stats = prior.plus(stats, 1)
	pl.tVAE = total
}

// decodeVideo simulates one video's decode (see decode); last calls Done
// before the video is freed.
func (pl *pipelineSim) decodeVideo(d *direct, last bool) (float64, compStats) {
	s, vae := pl.s, pl.s.byName[VAE]
	// The latents the VAE decodes: z_dim channels (the transformer's
	// input has more with image conditioning).
	c := pl.p.Coder.ZDim
	_, f, h, w := pl.req.latent(pl.p)
	lat := d.alloc(f32(1, c, f, h, w))
	video := d.alloc(f32(1, 3, pl.req.Frames, pl.req.Height, pl.req.Width))
	g := newVAEGrid(pl.req, pl.run, pl.p.Coder)
	var total float64
	var stats compStats
	if !g.tiled {
		total, stats = pl.decodeTile(h, w, true)
	} else {
		total, stats = pl.decodeTiled(d, g)
	}
	t, before := s.now, vae.stats
	d.free(lat)
	if last {
		s.done(vae)
	}
	d.free(video)
	return total + (s.now - t), stats.plus(vae.stats.minus(before), 1)
}

// decodeTile runs the chunks of one latent tile (chunkLoop); unpatch says
// the frames are unpatched chunk by chunk (an untiled decode) rather than
// row by row after the tiles are blended.
func (pl *pipelineSim) decodeTile(h, w int, unpatch bool) (float64, compStats) {
	_, frames, _, _ := pl.req.latent(pl.p)
	tile := vaeChunks(pl.p, 1, h, w, pl.s.hw.ConvPanel, pl.id)
	tile.v.unpatch = unpatch
	return pl.s.chunkLoop(pl.s.byName[VAE], frames, tile.next)
}

// decodeTiled follows DecodeTiled: each tile cut from the latents,
// decoded into a video of its own, and assembled into the video
// (direct.assemble, in pixels: a patched Wan 2.2 tile takes the bytes of
// its pixels).
func (pl *pipelineSim) decodeTiled(d *direct, g vaeGrid) (float64, compStats) {
	fout := pl.req.Frames
	c := pl.p.Coder.ZDim
	_, f, _, _ := pl.req.latent(pl.p)
	scale := pl.p.Coder.SpatialScale()
	l := tileLayout{blend: g.blend, crop: g.crop, outH: pl.req.Height, outW: pl.req.Width, patch: pl.p.Coder.patch(),
		size: func(h, w int) int64 { return f32(1, 3, fout, h, w) }}
	var specs [][]vaeTileSpec // by row, then column
	for _, t := range g.tiles {
		if t.col == 0 {
			specs = append(specs, nil)
			l.rows = append(l.rows, t.h*scale)
		}
		if t.row == 0 {
			l.cols = append(l.cols, t.w*scale)
		}
		specs[t.row] = append(specs[t.row], t)
	}
	return d.assemble(l, func(ri, ci int) (int, float64, compStats) {
		t := specs[ri][ci]
		rows := d.alloc(f32(1, c, f, t.h, g.latW))
		tile := d.alloc(f32(1, c, f, t.h, t.w))
		d.free(rows)
		out := d.alloc(l.size(t.h*scale, t.w*scale))
		dt, st := pl.decodeTile(t.h, t.w, false)
		d.free(tile)
		return out, dt, st
	})
}

// tileLayout is a tiled encode's or decode's assembly (model/wanvae's
// tileGrid), in units of the tiles' outputs: the tiles' heights by row and
// widths by column, the blend and crop extents, the assembled size, and
// the bytes of a part of h×w. patch > 1: each assembled row is unpatched
// (a Wan 2.2 decode).
type tileLayout struct {
	rows, cols  []int
	blend, crop int
	outH, outW  int
	patch       int
	size        func(h, w int) int64
}

// assemble follows tileGrid.assemble: tile computes each tile (its input
// cut, its encode or decode) and returns its output; each is blended with
// the edge kept from the tile above and the one to its left, keeps its
// own edges, and is cropped; a finished row of crops is placed (placeRow).
// It returns the tiles' time and stats.
func (d *direct) assemble(g tileLayout, tile func(ri, ci int) (int, float64, compStats)) (float64, compStats) {
	var total float64
	var stats compStats
	var above, aboveH []int // the kept bottom edges and their heights, per column
	left, leftW, at := 0, 0, 0
	for ri, th := range g.rows {
		below, belowH := make([]int, len(g.cols)), make([]int, len(g.cols))
		var crops []int
		rowW := 0
		for ci, tw := range g.cols {
			t, dt, st := tile(ri, ci)
			total += dt
			stats = stats.plus(st, 1)
			if e := min(g.blend, th); ri > 0 && min(aboveH[ci], e) > 0 {
				t = d.blend(t, g.size(min(aboveH[ci], e), tw), g.size(th, tw))
			}
			if e := min(g.blend, tw); ci > 0 && min(leftW, e) > 0 {
				t = d.blend(t, g.size(th, min(leftW, e)), g.size(th, tw))
			}
			if g.blend > 0 {
				belowH[ci] = min(g.blend, th)
				below[ci] = d.alloc(g.size(belowH[ci], tw))
			}
			d.free(left)
			left, leftW = 0, 0
			if g.blend > 0 {
				leftW = min(g.blend, tw)
				left = d.alloc(g.size(th, leftW))
			}
			crops = append(crops, d.crop(t, g.size, th, tw, min(g.crop, th), min(g.crop, tw)))
			rowW += min(g.crop, tw)
		}
		d.free(left)
		left, leftW = 0, 0
		d.free(above...)
		above, aboveH = below, belowH
		at += d.placeRow(g, crops, min(g.crop, th), rowW, at)
	}
	d.free(above...)
	return total, stats
}

// placeRow follows tileGrid.placeRow: the row's crops (ch high, rowW wide
// together) joined into a band and freed, the band cut to the output's
// width and remaining height (unpatched where g.patch > 1), copied into
// the output and freed. It returns the rows placed.
func (d *direct) placeRow(g tileLayout, crops []int, ch, rowW, at int) int {
	band := d.alloc(g.size(ch, rowW))
	d.free(crops...)
	w := min(rowW, g.outW)
	if w != rowW {
		n := d.alloc(g.size(ch, w))
		d.free(band)
		band = n
	}
	n := min(ch, g.outH-at)
	if n > 0 {
		if n != ch {
			cut := d.alloc(g.size(n, w))
			d.free(band)
			band = cut
		}
		if g.patch > 1 {
			u := d.alloc(g.size(n, w))
			d.free(band)
			band = u
		}
	}
	d.free(band)
	return max(n, 0)
}

// direct applies events as they are recorded (work outside any Run).
type direct struct {
	s  *sim
	on *allocModel
	r  *recorder
}

func (d *direct) alloc(n int64) int {
	id := d.r.alloc(n)
	for _, ev := range d.r.take() {
		d.s.apply(ev, d.on)
	}
	return id
}

func (d *direct) free(ids ...int) {
	for _, id := range ids {
		if id != 0 {
			d.s.apply(event{id: id}, d.on)
		}
	}
}

// crop is tile.go's cropTile: tile t (h×w, size gives the bytes) cut to
// its first ch rows, then cw columns, each cut a copy that replaces it.
func (d *direct) crop(t int, size func(h, w int) int64, h, w, ch, cw int) int {
	if ch != h {
		n := d.alloc(size(ch, w))
		d.free(t)
		t = n
	}
	if cw != w {
		n := d.alloc(size(ch, cw))
		d.free(t)
		t = n
	}
	return t
}

// blend is tile.go's blend: the edge's tail and the tile's head are
// copied, weighted and summed, and head and the rest are joined into a
// new tile of the same size.
func (d *direct) blend(t int, edge, whole int64) int {
	ta, tb := d.alloc(512), d.alloc(512)
	tail := d.alloc(edge)
	head := d.alloc(edge)
	d.free(ta, tb, tail)
	if edge == whole {
		d.free(t)
		return head
	}
	rest := d.alloc(whole - edge)
	out := d.alloc(whole)
	d.free(head, rest, t)
	return out
}

// fill writes the simulation's figures into pred, extrapolating the
// transformer's simulated steps to all of them.
func (pl *pipelineSim) fill(pred *Prediction) {
	s := pl.s
	pred.PeakDeviceBytes = s.dev.PeakAllocated
	pred.PeakDeviceReservedBytes = s.dev.PeakReserved
	pred.PeakHostBytes = s.host.PeakReserved
	pred.PeakRSSBytes = s.peakJoint + pl.heapBytes()
	overlap := s.hw.CopyOverlap
	// A copy running beside compute takes cores from it: the part of the
	// upload (a memory copy and cast) and of first touches that does not
	// overlap, and DiskCPU of a checkpoint read; not while compute stalls.
	penalty := func(st compStats) float64 {
		return max(0, (1-overlap)*(st.upload+st.touch)+s.hw.DiskCPU*st.read-st.stall)
	}
	for _, cs := range s.comps {
		st := cs.stats
		for _, sg := range pl.stages {
			if sg.comp == cs && sg.repeats > 0 {
				st = st.plus(sg.steady.st, sg.repeats)
			}
		}
		pen := penalty(st)
		prof := pl.p.Component(cs.name)
		cp := ComponentPrediction{
			Name: cs.name, Placement: cs.plan.Placement, Blocks: len(cs.blocks),
			DeviceBytes: prof.DeviceBytes(pl.p.Compute), StoredBytes: prof.StoredBytes(), Cached: prof.Cached,
			ComputeS: st.compute + pen, StallS: st.stall, CopyS: st.copy, Loads: st.loads,
			ReadS: st.read, FillS: st.fill, BytesCopied: st.bytesCopied, BytesDisk: st.bytesDisk,
		}
		for _, b := range cs.blocks {
			cp.LargestBlock = max(cp.LargestBlock, b.devBytes)
		}
		if cs.plan.Placement == residency.Onload || cs.plan.Placement == residency.Stream {
			cp.Tier = cs.plan.Tier
		}
		if cs.plan.Placement == residency.Stream {
			cp.Prefetch, cp.Persistent = cs.plan.Prefetch, cs.plan.Persistent
		}
		pred.Components = append(pred.Components, cp)
	}
	pred.TextEncoderS = pl.tText + penalty(s.byName[TextEncoder].stats)
	first := pl.firstStage()
	pred.StepS = first.steady.t + penalty(first.steady.st)
	pred.FirstStepS = first.steps[0].t + penalty(first.steps[0].st)
	pred.DenoiseS = pl.tDenoise
	for _, sg := range pl.stages {
		pred.DenoiseS += float64(sg.repeats) * penalty(sg.steady.st)
		for _, st := range sg.steps {
			pred.DenoiseS += penalty(st.st)
		}
	}
	pred.Switch = pl.switchPrediction(penalty)
	pred.VAES = pl.tVAE + penalty(s.byName[VAE].stats)
	pred.TotalS = pred.TextEncoderS + pred.DenoiseS + pred.VAES
}

// switchPrediction describes the expert switch (nil for one
// transformer): when it happens, and the low-noise expert's first step
// against its steady one.
func (pl *pipelineSim) switchPrediction(penalty func(compStats) float64) *SwitchPrediction {
	if !pl.p.TwoExperts() {
		return nil
	}
	sw := &SwitchPrediction{Boundary: pl.p.Boundary, Step: pl.switchAt}
	if pl.switchAt == 0 || pl.switchAt >= pl.req.Steps {
		return sw
	}
	low := pl.stages[len(pl.stages)-1]
	sw.StepS = low.steps[0].t + penalty(low.steps[0].st)
	sw.SteadyS = low.steady.t + penalty(low.steady.st)
	sw.CostS = pl.tSwitch + max(0, sw.StepS-sw.SteadyS)
	sw.LoadBytes = low.loadBytes
	return sw
}

// heapBytes estimates the process's memory outside both devices: the Go
// runtime and scratch pools, the sampler's latents (a few copies), and the
// decoded video downloaded to Go memory as float32 and as 8-bit frames.
func (pl *pipelineSim) heapBytes() int64 {
	c, f, h, w := pl.req.latent(pl.p)
	lat := f32(pl.req.Batch, c, f, h, w)
	video := int64(pl.req.Batch) * int64(pl.req.Frames) * int64(pl.req.Height) * int64(pl.req.Width) * 3
	return heapBase + 6*lat + 5*video + pl.req.AdapterBytes + pl.req.AdapterBytes2
}

// loadSeconds is Prediction.LoadS: for resident and host-placed components
// their whole copy (read, conversion, upload), for components that move
// from host-tier copies the checkpoint read that fills those copies, as
// the simulation priced it (ReadS and the page cache it fills, FillS: only
// those reads, the copies being read once). The first touch of the
// copies' own pages is left out: a server that demoted another model
// moments before gets them at the warm-page price (790 MB onloaded in
// 1.1 s in all there, where the fresh price alone is 1.6 s).
func loadSeconds(p Prediction) float64 {
	var s float64
	for _, c := range p.Components {
		switch {
		case c.Placement == residency.Resident || c.Placement == residency.Host:
			s += c.CopyS
		case c.Tier != residency.TierDisk:
			s += c.ReadS + c.FillS
		}
	}
	return s
}

// cost is what Search minimises: a cold request's time, or a warm one's
// when the runtime is kept (Request.Repeated).
func (p Prediction) cost() float64 {
	if p.Request.Repeated {
		return p.TotalS - p.LoadS
	}
	return p.TotalS
}
