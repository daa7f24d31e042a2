package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"ferry/backend/cpu"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/planner"
	"ferry/residency"
	"ferry/server/queue"
)

// errInsufficient says no plan fits the budgets (HTTP 422).
type errInsufficient struct{ msg string }

func (e *errInsufficient) Error() string { return e.msg }

// model is one servable pipeline folder and, between requests, its
// resident runtime: the devices and executor that hold its weights.
type model struct {
	name, dir string

	// Guarded by models.mu.
	folder   *checkpoint.Folder
	planPipe *wan.Pipeline // for admission (prompt tokens); never runs
	runPipe  *wan.Pipeline // the one that runs jobs
	prof     *planner.Profile
	rt       *pipeline.Runtime
	rtKey    string // dtype and budgets the runtime was built for
	// rtVideo: the runtime was built for remixes, its VAE (encoder too)
	// its own rather than the shared one.
	rtVideo  bool
	planSpec string // the plan the request that built it asked for
	ctx      *switchCtx
	shared   []*sharedComp // components held once for several models
	inUse    bool
	keep     time.Duration // after the last job; negative: forever
	expires  time.Time     // zero: no expiry (forever, or not resident)
	warm     bool          // the current job found the runtime resident
	// kept is what the runtime and the shared components held in
	// weights when m's last job ended; warmPredicted says the current
	// job found all of it still held, so its prediction leaves the
	// load out.
	kept          int64
	warmPredicted bool
	coldS         float64 // seconds of the first job on a fresh runtime
	warmS         float64 // seconds of the latest job on a warm one
	loaded        time.Time
}

// models is the server's set of models and their residency.
type models struct {
	mu          sync.Mutex
	byName      map[string]*model
	device      int64 // the server's budgets
	host        int64
	defaultKeep time.Duration
	evictions   int64
	hw          hwprofile.Profile
	loraRoots   []string // where request LoRA names resolve (lora.go)
	shared      []*sharedComp
	prompts     promptCache // prompts.go
}

// findModels lists pipeline folders: each dir is one (it holds
// model_index.json) or a folder of them.
func findModels(dirs []string) (map[string]*model, error) {
	out := map[string]*model{}
	add := func(dir string) error {
		name := filepath.Base(filepath.Clean(dir))
		if prev, dup := out[name]; dup {
			return fmt.Errorf("--models: two models named %q (%s and %s); rename one folder", name, prev.dir, dir)
		}
		out[name] = &model{name: name, dir: dir, ctx: newSwitchCtx()}
		return nil
	}
	for _, d := range dirs {
		if isPipeline(d) {
			if err := add(d); err != nil {
				return nil, err
			}
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("--models %s: %w", d, err)
		}
		for _, e := range ents {
			sub := filepath.Join(d, e.Name())
			if e.IsDir() && isPipeline(sub) {
				if err := add(sub); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func isPipeline(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, checkpoint.ModelIndexName))
	return err == nil
}

// open reads a model's configs, tokenizer and planner profile once.
// Caller holds mu.
func (ms *models) open(m *model) error {
	if m.folder != nil {
		return nil
	}
	f, err := checkpoint.OpenFolder(m.dir)
	if err != nil {
		return fmt.Errorf("model %s: %w", m.name, err)
	}
	if f.Class != "WanPipeline" && f.Class != wan.ImageToVideoClass {
		f.Close()
		return fmt.Errorf("model %s: pipeline class %q is not served (WanPipeline and %s are)", m.name, f.Class, wan.ImageToVideoClass)
	}
	pp, err := wan.Open(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", m.name, err)
	}
	rp, err := wan.Open(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", m.name, err)
	}
	prof, err := planner.MeasureFolder(m.dir)
	if err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", m.name, err)
	}
	m.folder, m.planPipe, m.runPipe, m.prof = f, pp, rp, prof
	return nil
}

// wanRequest is the pipeline request of a spec.
func wanRequest(s spec) wan.Request {
	r := wan.Request{Prompt: s.Prompt, NegativePrompt: s.NegativePrompt, Height: s.Height, Width: s.Width,
		Frames: s.Frames, Steps: s.Steps, Guidance: s.Guidance, FlowShift: s.FlowShift, Seed: s.Seed, MaxSeqLen: 512,
		LoRAs: s.loras, LoRAs2: s.loras2, Guidance2: s.Guidance2}
	if s.image != nil {
		r.Image = s.image.img
	}
	if s.lastImage != nil {
		r.LastImage = s.lastImage.img
	}
	if s.video != nil {
		r.Video, r.Strength = s.video.frames, s.Strength
	}
	if s.prompts != nil {
		r.PromptEmbeds, r.NegativePromptEmbeds = s.prompts.pos, s.prompts.neg
	}
	r.Defaults()
	return r
}

// computeDType is a request's dtype (checked at decoding): as named, else
// bf16 where the CPU multiplies bf16 natively and the server's hardware
// profile did not measure it slower than fp32.
func (ms *models) computeDType(s string) dtype.DType {
	dt, _ := pipeline.ParseComputeDType(s, ms.hw.BF16Slower)
	return dt
}

// budgets are a spec's budgets: the server's, lowered by the request's.
func (ms *models) budgets(s spec) pipeline.Budget {
	b := pipeline.Budget{DeviceBytes: ms.device, HostBytes: ms.host}
	if s.DeviceBytes > 0 && (b.DeviceBytes == 0 || s.DeviceBytes < b.DeviceBytes) {
		b.DeviceBytes = s.DeviceBytes
	}
	if s.HostBytes > 0 && (b.HostBytes == 0 || s.HostBytes < b.HostBytes) {
		b.HostBytes = s.HostBytes
	}
	return b
}

func plannerBudgets(b pipeline.Budget) planner.Budgets {
	m := hwprofile.ReadMemory()
	host := b.HostBytes
	if host == 0 && m.Total > 0 {
		host = max(m.Total-b.DeviceBytes-1<<30, 1<<30)
	}
	return planner.Budgets{DeviceBytes: b.DeviceBytes, HostBytes: host, RSSBytes: m.Total, FreeBytes: m.Free,
		CacheBytes: m.FileCache, FragmentedBytes: cpu.FragmentedFree()}
}

// planFor chooses and predicts a plan for a spec on m under b. Caller
// holds mu and has opened m.
func (ms *models) planFor(m *model, s spec, b pipeline.Budget) (*residency.Plan, planner.Prediction, error) {
	prof, hw, req := ms.planInputs(m, s)
	pb := plannerBudgets(b)
	var plan *residency.Plan
	var err error
	if strings.ContainsAny(s.Plan, ":\n{") {
		plan, err = residency.ParsePlan([]byte(s.Plan))
	} else if s.Plan != "" && planner.PresetHelp(strings.ToLower(s.Plan)) == "" {
		// Resolve would read a plan file of that name: a request never
		// names a server path.
		return nil, planner.Prediction{}, badField("plan", "%q is not a preset (%s) nor plan YAML/JSON text", s.Plan, strings.Join(planner.PresetNames(), ", "))
	} else {
		plan, err = planner.Resolve(strings.ToLower(s.Plan), planner.PresetOptions{Profile: &prof, HW: hw, Request: req, Budgets: pb})
	}
	var inf *planner.InfeasibleError
	if errors.As(err, &inf) {
		return nil, planner.Prediction{}, &errInsufficient{msg: err.Error()}
	}
	if err != nil {
		return nil, planner.Prediction{}, badField("plan", "%v", err)
	}
	pred, err := planner.Predict(&prof, hw, plan, req, pb)
	if err != nil {
		return nil, pred, badField("plan", "%v", err)
	}
	pred.Plan = planLabel(plan, prof.ComponentNames())
	if !pred.Fits {
		return nil, pred, &errInsufficient{msg: fmt.Sprintf("plan %s is predicted not to fit the budgets: %s", plan.Name, pred.Problem)}
	}
	return plan, pred, nil
}

// admit plans a spec at submission: the prediction, or why nothing fits.
// It corrects sp's size to the one the model runs.
// Its LoRAs are resolved and their headers checked here so that a bad name
// is a 400; the job reads their values when it runs.
func (ms *models) admit(sp *spec) (planner.Prediction, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byName[sp.Model]
	if !ok {
		return planner.Prediction{}, errUnknownModel
	}
	if err := ms.open(m); err != nil {
		return planner.Prediction{}, err
	}
	// The size the model runs, as diffusers corrects it (TI2V-5B rounds
	// to 32): the job stores and shows it.
	sp.Height, sp.Width = m.planPipe.FitSize(sp.Height, sp.Width)
	s := *sp
	if err := checkExperts(m, s); err != nil {
		return planner.Prediction{}, err
	}
	if err := checkImages(m, s); err != nil {
		return planner.Prediction{}, err
	}
	if err := checkVideo(m, s); err != nil {
		return planner.Prediction{}, err
	}
	if err := ms.loadLoRAs(m, &s, m.planPipe.CheckLoRA); err != nil {
		return planner.Prediction{}, err
	}
	_, pred, err := ms.planFor(m, s, ms.budgets(s))
	return pred, err
}

var errUnknownModel = errors.New("unknown model")

// opened returns the named model with its folder opened.
func (ms *models) opened(name string) (*model, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byName[name]
	if !ok {
		return nil, errUnknownModel
	}
	return m, ms.open(m)
}

// acquire readies m's runtime for a spec: the resident runtime when its
// plan still fits the request (the same model at a new shape keeps its
// weights), else a fresh one, after demoting other models' idle weights by
// exactly what is short. It marks m in use.
func (ms *models) acquire(sp *spec) (*model, planner.Prediction, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byName[sp.Model]
	if !ok {
		return nil, planner.Prediction{}, errUnknownModel
	}
	if err := ms.open(m); err != nil {
		return nil, planner.Prediction{}, err
	}
	if err := ms.loadLoRAs(m, sp, m.planPipe.LoadLoRA); err != nil {
		return nil, planner.Prediction{}, err
	}
	ms.lookupPrompts(m, sp)
	s := *sp
	for _, sh := range m.shared {
		sh.user = m // not a victim, nor closed with m's old runtime
	}
	m2, pred, err := ms.ready(m, s)
	if err != nil {
		for _, sh := range m.shared {
			sh.user = nil
		}
		ms.prompts.pinned = nil
	}
	return m2, pred, err
}

// ready gives m a runtime for s (acquire's work). Caller holds mu.
func (ms *models) ready(m *model, s spec) (*model, planner.Prediction, error) {
	b := ms.budgets(s)
	dt := ms.computeDType(s.DType)
	var pred planner.Prediction
	reuse := false
	key := runtimeKey(dt, b)
	if m.imageMode(s) {
		// A TI2V model's image mode registers the VAE's encoder too.
		key += "|image"
	}
	if m.videoMode(s) {
		// So does a remix, in m's runtime: a shared VAE only decodes.
		key += "|video"
	}
	if m.rt != nil && m.rtKey == key && (s.Plan == "" || s.Plan == m.planSpec) {
		if p, err := ms.predictWith(m, s, b, m.rt.Plan); err == nil && p.Fits {
			pred, reuse = p, true
		}
	}
	if !reuse {
		plan, p, err := ms.replan(m, s, b)
		if err != nil {
			return nil, p, err
		}
		pred = p
		ms.closeRuntime(m)
		if err := ms.makeRoom(m, p.PeakDeviceReservedBytes, p.PeakHostBytes); err != nil {
			return nil, p, err
		}
		rt, err := pipeline.NewRuntime(b, plan, pipeline.Options{Context: m.ctx, ComputeDType: dt,
			SmallPagesFirst: ms.hw.SmallPagesFirst(), OnBlock: m.ctx.onBlock})
		if err != nil {
			return nil, p, err
		}
		if m.switchesImage() {
			if err := m.runPipe.SetImageMode(m.imageMode(s)); err != nil {
				rt.Close()
				return nil, p, err
			}
		}
		if err := m.runPipe.SetVideoMode(m.videoMode(s)); err != nil {
			rt.Close()
			return nil, p, err
		}
		m.rtVideo = m.videoMode(s)
		if err := ms.register(m, rt, plan, b, dt); err != nil {
			rt.Close()
			return nil, p, err
		}
		m.rt, m.rtKey, m.planSpec, m.loaded, m.coldS = rt, key, s.Plan, time.Now(), 0
	} else {
		if err := ms.makeRoom(m, pred.PeakDeviceReservedBytes, pred.PeakHostBytes); err != nil {
			return nil, pred, err
		}
		if err := ms.holdShared(m, m.rt.Plan, b, dt); err != nil {
			return nil, pred, err
		}
	}
	m.warm = reuse
	m.warmPredicted = reuse && m.kept > 0 && ms.heldBytes(m) >= m.kept
	m.inUse, m.expires = true, time.Time{}
	if m.keep == 0 {
		m.keep = ms.defaultKeep
	}
	return m, pred, nil
}

// predictWith predicts a spec under an existing plan.
func (ms *models) predictWith(m *model, s spec, b pipeline.Budget, plan *residency.Plan) (planner.Prediction, error) {
	prof, hw, req := ms.planInputs(m, s)
	pred, err := planner.Predict(&prof, hw, plan, req, plannerBudgets(b))
	pred.Plan = planLabel(plan, prof.ComponentNames())
	return pred, err
}

// planInputs are what the planner needs for a spec on m: the model's
// profile at the spec's dtype, the hardware reading m's checkpoint at the
// speed measured, and the request.
func (ms *models) planInputs(m *model, s spec) (planner.Profile, hwprofile.Profile, planner.Request) {
	r := wanRequest(s)
	req := m.planPipe.PlanRequest(r)
	// The runtime stays for the next jobs: plans are ranked by a warm
	// job's time, so that what is worth keeping is kept.
	req.Repeated, req.PromptsEncoded = true, s.prompts != nil
	prof := *m.prof
	if m.imageMode(s) {
		if q, err := m.prof.WithImage(); err == nil {
			prof = *q
		}
	}
	if m.videoMode(s) {
		// The steps the strength runs (r.VideoSteps, before the frames
		// are decoded).
		req.Steps = wan.StepsRun(r.Steps, s.Strength)
		if q, err := m.prof.WithVideo(); err == nil {
			prof = *q
		}
	}
	prof.Compute = ms.computeDType(s.DType)
	hw := ms.hw
	hw.UseCheckpointRead(prof.DiskRead.Bytes, prof.DiskRead.GBps(), prof.DiskRead.Direct)
	return prof, hw, req
}

// runtimeKey says which requests may share a runtime: the same budgets
// and dtype. A request that names no plan takes the resident one when it
// is predicted to fit; one that names a plan needs the same name.
func runtimeKey(dt dtype.DType, b pipeline.Budget) string {
	return fmt.Sprintf("%s|%d|%d", dt, b.DeviceBytes, b.HostBytes)
}

// release ends a job on m: its memory goes back to the resident set (a
// failed job's leftovers are dropped with the runtime when they do not),
// and the keep-alive starts. Caller does not hold mu.
func (ms *models) release(m *model, failed bool, keep *time.Duration, jobS float64) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m.inUse = false
	ms.prompts.pinned = nil
	for _, sh := range m.shared {
		sh.user = nil
		if sh.rt != nil {
			if failed {
				sh.rt.Exec.Done(sh.component)
			}
			sh.rt.Idle()
		}
	}
	if m.rt == nil {
		ms.dropUnused(m.shared)
		return
	}
	if failed {
		for _, c := range wan.Components {
			m.rt.Exec.Done(c)
		}
		if leaked(m.rt) {
			ms.closeRuntime(m)
			return
		}
	}
	m.rt.Idle()
	if !failed {
		m.kept = ms.heldBytes(m)
		if m.coldS == 0 {
			m.coldS = jobS
		} else {
			m.warmS = jobS
		}
	}
	m.keep = ms.defaultKeep
	if keep != nil {
		m.keep = *keep
	}
	switch {
	case m.keep == 0:
		ms.closeRuntime(m)
	case m.keep > 0:
		m.expires = time.Now().Add(m.keep)
	}
}

// leaked reports memory a failed job left beyond the weights: allocated
// device bytes more than the blocks' compute copies.
func leaked(rt *pipeline.Runtime) bool {
	var dev, host int64
	for _, r := range rt.Exec.Resident() {
		if r.OnHostCompute {
			host += r.DeviceBytes
		} else {
			dev += r.DeviceBytes
		}
	}
	return rt.Device.Stats().Allocated != dev
}

// closeRuntime drops m's weights to the disk tier. Caller holds mu.
func (ms *models) closeRuntime(m *model) {
	if m.rt == nil {
		return
	}
	m.rt.Close()
	m.rt, m.rtKey, m.expires, m.kept = nil, "", time.Time{}, 0
	ms.evictions++
	ms.dropUnused(m.shared)
}

func (m *model) deviceBytes() int64 {
	if m.rt == nil {
		return 0
	}
	return m.rt.Device.Stats().Reserved
}

func (m *model) hostBytes() int64 {
	if m.rt == nil {
		return 0
	}
	return m.rt.Host.Stats().Reserved
}

// residentBytes sums every model's and shared component's reserved
// bytes, but for skip's own (its shared components are part of its plan).
func (ms *models) residentBytes(skip *model) (dev, host int64) {
	for _, o := range ms.byName {
		if o != skip {
			dev += o.deviceBytes()
			host += o.hostBytes()
		}
	}
	for _, sh := range ms.shared {
		if skip == nil || !skip.sharesWith(sh) {
			dev += sh.deviceBytes()
			host += sh.hostBytes()
		}
	}
	return dev, host + ms.prompts.bytes()
}

// jobRoom is what the server's budgets leave to a job on m beside every
// other model's and shared component's resident bytes, or b's where the
// server has none: the cap on the sum of the job's runtimes' reserved
// bytes.
func (ms *models) jobRoom(m *model, b pipeline.Budget) pipeline.Budget {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	dev, host := ms.residentBytes(m)
	return ms.room(b, dev, host)
}

// makeRoom demotes other models' idle blocks, tier by tier, until m's
// predicted peaks fit beside what stays resident: device copies first
// (those with a host copy come back cheapest), then host copies. Blocks
// are chosen by reload cost per byte freed, least recently used first on
// ties; a model (or shared component) in use is never touched. Caller
// holds mu.
func (ms *models) makeRoom(m *model, needDev, needHost int64) error {
	if ms.device > 0 {
		dev, _ := ms.residentBytes(m)
		if short := dev + max(needDev, 0) - ms.device; short > 0 {
			ms.demote(m, short, true)
		}
	}
	if ms.host > 0 {
		_, host := ms.residentBytes(m)
		if short := host + max(needHost, 0) - ms.host; short > 0 {
			// Cached prompts go first: one text-encoder pass makes one
			// again, and nothing else is reloaded.
			if short -= ms.prompts.trim(short); short > 0 {
				ms.demote(m, short, false)
			}
		}
	}
	return nil
}

// victim is one idle block another model (or a shared component m does
// not use) could give up.
type victim struct {
	rt       *pipeline.Runtime
	drop     func() // closes the holder once it holds no weights
	block    string
	bytes    int64
	costPerB float64 // seconds to bring it back per byte freed
	lastUse  uint64
	compute  bool // the weights a host-placed component computes from
}

// victims lists the blocks m may demote on one tier, cheapest to reload
// per byte first.
func (ms *models) victims(m *model, device bool) []victim {
	var vs []victim
	for _, o := range ms.byName {
		if o != m && !o.inUse && o.rt != nil {
			vs = ms.blockVictims(vs, o.rt, func() { ms.closeRuntime(o) }, device)
		}
	}
	for _, sh := range ms.shared {
		if !m.sharesWith(sh) && sh.user == nil && sh.rt != nil {
			vs = ms.blockVictims(vs, sh.rt, func() { ms.closeShared(sh) }, device)
		}
	}
	sort.SliceStable(vs, func(a, b int) bool {
		if vs[a].costPerB != vs[b].costPerB {
			return vs[a].costPerB < vs[b].costPerB
		}
		return vs[a].lastUse < vs[b].lastUse
	})
	return vs
}

// blockVictims appends rt's idle blocks on one tier.
func (ms *models) blockVictims(vs []victim, rt *pipeline.Runtime, drop func(), device bool) []victim {
	diskS := 1 / (max(ms.hw.DiskGBps, 0.01) * 1e9)
	hostS := 1 / (max(ms.hw.H2DGBps, 0.01) * 1e9)
	for _, r := range rt.Exec.Resident() {
		if r.Busy {
			continue
		}
		v := victim{rt: rt, drop: drop, block: r.Block, lastUse: r.LastUse}
		switch {
		case device && r.DeviceBytes > 0 && !r.OnHostCompute:
			v.bytes, v.costPerB = r.DeviceBytes, diskS*float64(r.StoredBytes)/float64(r.DeviceBytes)
			if r.HostBytes > 0 {
				v.costPerB = hostS
			}
		case !device && r.OnHostCompute && r.DeviceBytes > 0:
			// A component computed on the host holds its weights in
			// host memory: freeing them sends it to disk.
			v.bytes, v.costPerB, v.compute = r.DeviceBytes, diskS*float64(r.StoredBytes)/float64(r.DeviceBytes), true
		case !device && r.HostBytes > 0:
			v.bytes, v.costPerB = r.HostBytes, diskS
		default:
			continue
		}
		vs = append(vs, v)
	}
	return vs
}

// demote frees at least short bytes from other holders' device (or host)
// tier, cheapest to reload first.
func (ms *models) demote(m *model, short int64, device bool) {
	touched := map[*pipeline.Runtime]func(){}
	for _, v := range ms.victims(m, device) {
		if short <= 0 {
			break
		}
		tier := v.rt.Host
		if device {
			tier = v.rt.Device
		}
		before := tier.Stats().Reserved
		if device || v.compute {
			v.rt.Exec.DemoteDevice(v.block)
		} else {
			v.rt.Exec.DemoteHost(v.block)
		}
		tier.EmptyCache()
		short -= before - tier.Stats().Reserved
		ms.evictions++
		touched[v.rt] = v.drop
	}
	// A holder left with nothing resident is closed: its runtime's
	// staging and caches go too.
	for rt, drop := range touched {
		if weightBytes(rt) == 0 {
			drop()
		}
	}
}

// heldBytes are the weights m's runtime and its shared components hold.
// Caller holds mu.
func (ms *models) heldBytes(m *model) int64 {
	var n int64
	if m.rt != nil {
		n = weightBytes(m.rt)
	}
	for _, sh := range m.shared {
		if sh.rt != nil {
			n += weightBytes(sh.rt)
		}
	}
	return n
}

// dispatchedPeaks is the prediction a job dispatched on m shows: a job
// that finds every weight m kept after its last job still held is
// predicted warm, without the load (LoadSeconds still says what loading
// them would cost, what the job saves).
func (ms *models) dispatchedPeaks(m *model, pred planner.Prediction) queue.Peaks {
	p := predictedPeaks(pred)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m.warmPredicted {
		p.Seconds, p.Warm = max(0, p.Seconds-p.LoadSeconds), true
	}
	return p
}

// weightBytes are the bytes of weights rt holds on device and host.
func weightBytes(rt *pipeline.Runtime) int64 {
	var n int64
	for _, r := range rt.Exec.Resident() {
		n += r.DeviceBytes + r.HostBytes
	}
	return n
}

// expire demotes every idle model whose keep-alive has passed.
func (ms *models) expire(now time.Time) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, m := range ms.byName {
		if !m.inUse && m.rt != nil && !m.expires.IsZero() && !now.Before(m.expires) {
			ms.closeRuntime(m)
		}
	}
}

// unload demotes a model's weights to disk now; false if it is running.
func (ms *models) unload(name string) (bool, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byName[name]
	if !ok {
		return false, errUnknownModel
	}
	if m.inUse {
		return false, nil
	}
	ms.closeRuntime(m)
	return true, nil
}

// closeAll frees every runtime (shutdown).
func (ms *models) closeAll() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, sh := range ms.shared {
		sh.user = nil
		ms.closeShared(sh)
	}
	for _, m := range ms.byName {
		ms.closeRuntime(m)
		if m.folder != nil {
			m.folder.Close()
			m.folder = nil
		}
	}
}
