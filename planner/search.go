package planner

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"ferry/backend/cpu/arena"
	"ferry/hwprofile"
	"ferry/residency"
	"ferry/tensor"
)

// Search limits.
const (
	// maxVerify caps full predictions of enumerated candidates.
	maxVerify = 300
	// maxFallback caps the smallest-peak candidates tried after that.
	maxFallback = 40
	// estimateSlack lets a candidate whose estimated peak is a little over
	// the budget still be verified: the estimate is a sum of solo runs.
	estimateSlack = 1.10
)

// Search returns the fastest plan whose predicted peaks fit the budgets,
// with its prediction. Candidates are every combination of a placement per
// component (resident, onload, stream with prefetch k and persistent n,
// host; tier host or disk), FFN chunking, CFG batched or sequential and
// VAE tiling, plus every preset. Combinations are ranked by an estimate
// composed from one simulation per component option, then verified with
// full predictions in that order. When nothing fits, the error names the
// smallest device and host budgets that would.
func Search(p *Profile, hw hwprofile.Profile, req Request, b Budgets) (*residency.Plan, Prediction, error) {
	req = req.normalized()
	if err := req.Validate(p); err != nil {
		return nil, Prediction{}, err
	}
	if err := hw.Validate(); err != nil {
		return nil, Prediction{}, err
	}
	// The search compares many plans with the VAE's chunks estimated
	// past the second (approx), then predicts its choice exactly; where
	// that does not fit, the other plans that seemed to, in the order it
	// prefers them (a few); where none does, or nothing seemed to, it
	// searches again exactly.
	sr := &searcher{p: p, hw: hw, req: req, b: b, approx: true}
	best, bestPred, cands, err := sr.run()
	if err != nil {
		return nil, Prediction{}, err
	}
	if best != nil {
		if best, bestPred, err = sr.confirm(best); err != nil {
			return nil, Prediction{}, err
		}
	}
	if best == nil {
		sr.approx = false
		if best, bestPred, cands, err = sr.run(); err != nil {
			return nil, Prediction{}, err
		}
	}
	if best == nil {
		return nil, Prediction{}, sr.infeasible(cands)
	}
	best = Complete(p, best)
	best.Name = "auto"
	bestPred.Plan = "auto"
	return best, bestPred, nil
}

type searcher struct {
	p   *Profile
	hw  hwprofile.Profile
	req Request
	b   Budgets
	// approx estimates the VAE's chunks past the second (simulate).
	approx bool
	// fits is every plan run found to fit, with its prediction.
	fits []choice
}

// maxConfirm is how many of the plans the estimate fits are predicted
// exactly, in the order the search prefers them, before it searches
// again exactly.
const maxConfirm = 16

// confirm predicts best exactly and returns it where it fits; else the
// first, in pick's order, of the other plans the estimate found fitting
// (sr.fits) that fits exactly; nil when none of maxConfirm does.
func (sr *searcher) confirm(best *residency.Plan) (*residency.Plan, Prediction, error) {
	pred, err := Predict(sr.p, sr.hw, best, sr.req, sr.b)
	if err != nil || pred.Fits {
		return best, pred, err
	}
	// The others, each with its key (a plan may have been predicted more
	// than once), best's left out.
	var rest []choice
	var keys []string
	bestKey := planKey(best)
	for _, c := range sr.fits {
		if k := planKey(c.plan); k != bestKey {
			rest, keys = append(rest, c), append(keys, k)
		}
	}
	for range maxConfirm {
		if len(rest) == 0 {
			break
		}
		i := pickIndex(rest)
		pred, err := Predict(sr.p, sr.hw, rest[i].plan, sr.req, sr.b)
		if err != nil || pred.Fits {
			return rest[i].plan, pred, err
		}
		failed := keys[i]
		for j := len(rest) - 1; j >= 0; j-- {
			if keys[j] == failed {
				rest, keys = slices.Delete(rest, j, j+1), slices.Delete(keys, j, j+1)
			}
		}
	}
	return nil, Prediction{}, nil
}

// run finds the best plan that fits (nil: none) and its prediction, and
// the candidates it weighed; sr.fits collects every plan found to fit.
func (sr *searcher) run() (*residency.Plan, Prediction, []candidate, error) {
	sr.fits = nil
	cands, err := sr.candidates()
	if err != nil {
		return nil, Prediction{}, nil, err
	}
	best, bestPred, err := sr.verify(cands)
	if err != nil {
		return nil, Prediction{}, nil, err
	}
	if best, bestPred, err = sr.refine(best, bestPred); err != nil {
		return nil, Prediction{}, nil, err
	}
	if best, bestPred, err = sr.presets(best, bestPred); err != nil {
		return nil, Prediction{}, nil, err
	}
	return best, bestPred, cands, nil
}

// predict is Predict for the search's comparisons (approx when set); it
// notes the plans that fit (sr.fits).
func (sr *searcher) predict(plan *residency.Plan) (Prediction, error) {
	pred, err := predict(sr.p, sr.hw, plan, sr.req, sr.b, sr.approx)
	if err == nil {
		sr.note(plan, pred)
	}
	return pred, err
}

// note keeps plan among the plans that fit when its prediction says so.
func (sr *searcher) note(plan *residency.Plan, pred Prediction) {
	if pred.Fits {
		sr.fits = append(sr.fits, choice{plan, pred}) // plans are not changed once predicted
	}
}

// predictAll predicts the candidates' plans concurrently, without noting
// them: the caller takes the results in order.
func (sr *searcher) predictAll(cands []candidate) ([]Prediction, []error) {
	preds, errs := make([]Prediction, len(cands)), make([]error, len(cands))
	concurrently(len(cands), func(i int) {
		preds[i], errs[i] = predict(sr.p, sr.hw, cands[i].plan, sr.req, sr.b, sr.approx)
	})
	return preds, errs
}

// concurrently runs f(0) .. f(n-1) on up to GOMAXPROCS goroutines. The
// search's simulations share only read-only inputs (the profile, the
// hardware figures, the request), and each result goes to its own index,
// so what a search returns does not depend on how they interleave.
func concurrently(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// planKey is equal for plans that place and run alike (their names
// aside).
func planKey(p *residency.Plan) string {
	c := *p
	c.Name = ""
	raw, _ := json.Marshal(c) // a plan always marshals
	return string(raw)
}

// solo is one component option simulated with the other components kept
// off both budgets (streamed from disk, one block at a time).
type solo struct {
	plan    residency.ComponentPlan
	seconds float64
	dev     int64 // device peak during its phase
	host    int64 // host peak during its phase
	// kept is what stays on the device after its phase; hostKept what stays
	// on the host to the end.
	kept, hostKept int64
}

// candidate is one combination with its estimate.
type candidate struct {
	plan      *residency.Plan
	seconds   float64
	dev, host int64
}

// componentOptions lists the placements tried for a component.
func (sr *searcher) componentOptions(comp string) []residency.ComponentPlan {
	n := len(sr.p.Component(comp).Blocks)
	var out []residency.ComponentPlan
	out = append(out, residency.ComponentPlan{Placement: residency.Resident}, residency.ComponentPlan{Placement: residency.Host})
	for _, tier := range []residency.Tier{residency.TierHost, residency.TierDisk} {
		out = append(out, residency.ComponentPlan{Placement: residency.Onload, Tier: tier})
		ks := []int{0, 1}
		persist := []int{0}
		if comp == Transformer {
			ks = []int{0, 1, 2}
			persist = []int{0, n / 4, n / 2, 3 * n / 4}
		}
		for _, k := range ks {
			for _, np := range uniqueInts(persist) {
				out = append(out, residency.ComponentPlan{Placement: residency.Stream, Tier: tier, Prefetch: k, Persistent: np})
			}
		}
	}
	return out
}

// runChoices lists the activation-side options tried.
func (sr *searcher) runChoices() (ffn []int, cfg []string, tiles []int) {
	ffn = []int{0}
	if l := sr.req.tokens(sr.p); l > 512 {
		ffn = append(ffn, max(256, min(4096, l/8)))
	}
	cfg = []string{""}
	if sr.req.cfg() {
		cfg = append(cfg, residency.CFGSequential)
	}
	tiles = []int{0}
	for _, t := range []int{256, 128} {
		if t < max(sr.req.Height, sr.req.Width) {
			tiles = append(tiles, t)
		}
	}
	return ffn, cfg, tiles
}

func uniqueInts(xs []int) []int {
	var out []int
	seen := map[int]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// offPlan keeps a component off both budgets as far as it can be.
var offPlan = residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk}

// soloRun simulates one component option with the others off.
func (sr *searcher) soloRun(comp string, phase int, c residency.ComponentPlan, run residency.RunOptions) (solo, error) {
	plan := residency.Uniform("", offPlan, TextEncoder, Transformer, VAE)
	plan.Components[comp] = c
	plan.Run = run
	pred, ph, err := simulate(sr.p, sr.hw, plan, sr.req, Budgets{}, simMode{phaseEmpty: true, approx: sr.approx})
	if err != nil {
		return solo{}, err
	}
	s := solo{plan: c, dev: ph.dev[phase], host: ph.host[phase]}
	s.seconds = []float64{pred.TextEncoderS, pred.DenoiseS, pred.VAES}[phase]
	if sr.req.Repeated {
		// Ranked as the final choice is (Prediction.cost): a kept runtime
		// does not load what the option keeps again. (The others are off,
		// on the disk tier: they load nothing.)
		s.seconds = max(0, s.seconds-loadSeconds(pred))
	}
	s.kept, s.hostKept = sr.kept(comp, c)
	return s, nil
}

// kept is what a component leaves on the device after its phase, and on
// the host for the rest of the run.
func (sr *searcher) kept(comp string, c residency.ComponentPlan) (dev, host int64) {
	prof := sr.p.Component(comp)
	seg := func(n int64) int64 {
		if n >= arena.SmallLimit {
			return arena.SizeClass(n)
		}
		return arena.Round(n)
	}
	for i, b := range prof.Blocks {
		bytes := b.DeviceBytes(prof.Storage, sr.p.Compute, keepStored)
		switch c.Placement {
		case residency.Resident:
			dev += seg(bytes)
		case residency.Stream:
			if i < c.Persistent {
				dev += seg(bytes)
			}
		case residency.Host:
			host += seg(bytes)
		}
		if c.FromHostCopy() {
			host += seg(b.Bytes(prof.Storage))
		}
	}
	return dev, host
}

// candidates enumerates every combination with its estimate. A text
// encoder option is simulated once per CFG mode, a transformer option once
// per CFG mode and FFN chunk, a VAE option once per tile size.
func (sr *searcher) candidates() ([]candidate, error) {
	ffns, cfgs, tiles := sr.runChoices()
	soloOf := func(comp string, phase int, run residency.RunOptions) ([]solo, error) {
		opts := sr.componentOptions(comp)
		out, errs := make([]solo, len(opts)), make([]error, len(opts))
		concurrently(len(opts), func(i int) { out[i], errs[i] = sr.soloRun(comp, phase, opts[i], run) })
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	vaeRun := func(tile int) residency.RunOptions {
		if tile == 0 {
			return residency.RunOptions{}
		}
		return residency.RunOptions{VAETile: tile, VAEStride: tile * 3 / 4}
	}
	vae := map[int][]solo{}
	for _, tile := range tiles {
		var err error
		if vae[tile], err = soloOf(VAE, 2, vaeRun(tile)); err != nil {
			return nil, err
		}
	}
	var cands []candidate
	for _, cfg := range cfgs {
		te, err := soloOf(TextEncoder, 0, residency.RunOptions{CFG: cfg})
		if err != nil {
			return nil, err
		}
		for _, ffn := range ffns {
			tr, err := soloOf(Transformer, 1, residency.RunOptions{CFG: cfg, FFNChunk: ffn})
			if err != nil {
				return nil, err
			}
			for _, tile := range tiles {
				run := vaeRun(tile)
				run.CFG, run.FFNChunk = cfg, ffn
				cands = append(cands, combine(te, tr, vae[tile], run)...)
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].seconds < cands[j].seconds })
	return cands, nil
}

// combine estimates every combination of the three components' options:
// time adds up by phase; a phase's device peak is its solo peak plus what
// earlier components left resident; the host holds every kept copy plus
// the largest phase's own use.
func combine(te, tr, vae []solo, run residency.RunOptions) []candidate {
	var out []candidate
	for _, a := range te {
		for _, b := range tr {
			for _, c := range vae {
				dev := max(a.dev, b.dev+a.kept, c.dev+a.kept+b.kept)
				hostKept := a.hostKept + b.hostKept + c.hostKept
				transient := max(a.host-a.hostKept, b.host-b.hostKept, c.host-c.hostKept, 0)
				plan := &residency.Plan{Components: map[string]residency.ComponentPlan{
					TextEncoder: a.plan, Transformer: b.plan, VAE: c.plan}, Run: run}
				out = append(out, candidate{plan: plan, seconds: a.seconds + b.seconds + c.seconds, dev: dev, host: hostKept + transient})
			}
		}
	}
	return out
}

// plausible reports whether a candidate's estimate is near enough the
// budgets to be worth a full prediction.
func (sr *searcher) plausible(c candidate, b Budgets) bool {
	over := func(est, budget int64) bool {
		return budget > 0 && float64(est) > float64(effective(budget))*estimateSlack
	}
	return !over(c.dev, b.DeviceBytes) && !over(c.host, b.HostBytes)
}

// verify predicts candidates in estimated-time order and picks among those
// that fit (pick): after the first fit it checks the ones estimated within
// 10%.
// When maxVerify predictions find nothing, it tries the candidates with
// the smallest estimated peaks, which are the likeliest to fit.
func (sr *searcher) verify(cands []candidate) (*residency.Plan, Prediction, error) {
	var fits []choice
	limit := math.Inf(1)
	checked := 0
	// take accounts for one predicted candidate, in the candidates' order.
	take := func(c candidate, pred Prediction, err error) error {
		checked++
		if err != nil {
			return err
		}
		sr.note(c.plan, pred)
		if pred.Fits {
			fits = append(fits, choice{c.plan, pred})
			limit = min(limit, c.seconds*1.10)
		}
		return nil
	}
	// Candidates go in order, fastest estimate first, until one beyond
	// the fastest fit's estimate + 10% or maxVerify checked. They are
	// predicted a batch at a time, concurrently, and taken in order, so
	// the stops see what a one-by-one loop would; a batch's predictions
	// past a stop are dropped.
	batchSize := runtime.GOMAXPROCS(0)
	for i, stop := 0, false; i < len(cands) && !stop; {
		var batch []candidate
		for ; i < len(cands) && len(batch) < batchSize; i++ {
			if cands[i].seconds > limit || checked+len(batch) >= maxVerify {
				stop = true
				break
			}
			if sr.plausible(cands[i], sr.b) {
				batch = append(batch, cands[i])
			}
		}
		preds, errs := sr.predictAll(batch)
		for k, c := range batch {
			if c.seconds > limit || checked >= maxVerify {
				stop = true
				break
			}
			if err := take(c, preds[k], errs[k]); err != nil {
				return nil, Prediction{}, err
			}
		}
	}
	if len(fits) == 0 {
		small := append([]candidate(nil), cands...)
		sort.SliceStable(small, func(i, j int) bool {
			return max(small[i].dev, small[i].host) < max(small[j].dev, small[j].host)
		})
		small = small[:min(len(small), maxFallback)]
		preds, errs := sr.predictAll(small)
		for k, c := range small {
			if err := take(c, preds[k], errs[k]); err != nil {
				return nil, Prediction{}, err
			}
		}
	}
	if len(fits) == 0 {
		return nil, Prediction{}, nil
	}
	best := pick(fits)
	return best.plan, best.pred, nil
}

// refine raises the transformer's persistent blocks as far as the budget
// allows (the grid tried only quarters).
func (sr *searcher) refine(best *residency.Plan, pred Prediction) (*residency.Plan, Prediction, error) {
	if best == nil {
		return nil, pred, nil
	}
	c := best.Components[Transformer]
	if c.Placement != residency.Stream {
		return best, pred, nil
	}
	n := len(sr.p.Component(Transformer).Blocks)
	lo, hi := c.Persistent, min(n, c.Persistent+max(1, n/4))
	bestPlan, bestPred := best, pred
	for lo < hi {
		mid := (lo + hi + 1) / 2
		try := clonePlan(best)
		cc := c
		cc.Persistent = mid
		setTransformer(sr.p, try, cc)
		p, err := sr.predict(try)
		if err != nil {
			return nil, Prediction{}, err
		}
		if p.Fits {
			lo = mid
			if p.cost() <= bestPred.cost() {
				bestPlan, bestPred = try, p
			}
		} else {
			hi = mid - 1
		}
	}
	return bestPlan, bestPred, nil
}

func clonePlan(p *residency.Plan) *residency.Plan {
	c := &residency.Plan{Name: p.Name, Run: p.Run, Components: map[string]residency.ComponentPlan{}}
	for k, v := range p.Components {
		c.Components[k] = v
	}
	return c
}

// presets picks between best and every preset that fits, so that the
// search is never predicted slower than a preset beyond pick's 1%.
func (sr *searcher) presets(best *residency.Plan, bestPred Prediction) (*residency.Plan, Prediction, error) {
	var fits []choice
	if best != nil {
		fits = append(fits, choice{best, bestPred})
	}
	opts := PresetOptions{Profile: sr.p, HW: sr.hw, Request: sr.req, Budgets: sr.b}
	for _, name := range PresetNames() {
		if name == "auto" {
			continue
		}
		plan, err := Preset(name, opts)
		if err != nil {
			return nil, Prediction{}, err
		}
		pred, err := sr.predict(plan)
		if err != nil {
			return nil, Prediction{}, err
		}
		if pred.Fits {
			fits = append(fits, choice{clonePlan(plan), pred})
		}
	}
	if len(fits) == 0 {
		return nil, Prediction{}, nil
	}
	c := pick(fits)
	return c.plan, c.pred, nil
}

// InfeasibleError says that no plan fits the budgets, and what would.
type InfeasibleError struct {
	Request Request
	Budgets Budgets
	// MinDeviceBytes is the smallest device budget found to fit with the
	// host budget as given (0: none does); DevicePlan fits it.
	MinDeviceBytes int64
	DevicePlan     *residency.Plan
	// MinHostBytes is the smallest host budget found to fit with the device
	// budget as given (0: none does); HostPlan fits it.
	MinHostBytes int64
	HostPlan     *residency.Plan
}

// Error is one line: what does not fit, the smallest budgets that do, and
// how to fix it.
func (e *InfeasibleError) Error() string {
	var fixes []string
	if e.MinDeviceBytes > 0 {
		fixes = append(fixes, fmt.Sprintf("--device-mem %s (with host %s; %s)", tensor.FormatBytes(e.MinDeviceBytes), budgetText(e.Budgets.HostBytes), describe(e.DevicePlan)))
	}
	if e.MinHostBytes > 0 {
		fixes = append(fixes, fmt.Sprintf("--host-mem %s (with device %s; %s)", tensor.FormatBytes(e.MinHostBytes), budgetText(e.Budgets.DeviceBytes), describe(e.HostPlan)))
	}
	fix := "raise both budgets"
	if len(fixes) > 0 {
		fix = "the smallest that fit are " + strings.Join(fixes, " or ") + "; raise a budget to that, or lower the resolution or frames"
	}
	r := e.Request
	return fmt.Sprintf("planner: no plan fits device %s and host %s for %d frames at %dx%d: %s",
		budgetText(e.Budgets.DeviceBytes), budgetText(e.Budgets.HostBytes), r.Frames, r.Width, r.Height, fix)
}

// infeasible builds the error for budgets nothing fits: the smallest
// device budget at this host budget, and the smallest host budget at this
// device budget.
func (sr *searcher) infeasible(cands []candidate) error {
	e := &InfeasibleError{Request: sr.req, Budgets: sr.b}
	e.MinDeviceBytes, e.DevicePlan = sr.smallest(cands, true)
	e.MinHostBytes, e.HostPlan = sr.smallest(cands, false)
	return e
}

func budgetText(b int64) string {
	if b <= 0 {
		return "unlimited"
	}
	return tensor.FormatBytes(b)
}

// describe is a short plan summary for messages.
func describe(p *residency.Plan) string {
	if p == nil {
		return "-"
	}
	var parts []string
	for _, c := range []string{TextEncoder, Transformer, Transformer2, VAE} {
		if _, ok := p.Components[c]; !ok && c == Transformer2 {
			continue
		}
		cp := p.For(c)
		s := c + "=" + string(cp.Placement)
		if cp.Placement == residency.Stream {
			s += fmt.Sprintf("(k=%d,n=%d)", cp.Prefetch, cp.Persistent)
		}
		if cp.FromDisk() {
			s += "/disk"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// smallest finds the least budget on one axis (device when onDevice) that
// some candidate fits with the other axis as given: the few candidates
// with the smallest estimate on that axis, each bisected.
func (sr *searcher) smallest(cands []candidate, onDevice bool) (int64, *residency.Plan) {
	axis := func(c candidate) int64 {
		if onDevice {
			return c.dev
		}
		return c.host
	}
	other := sr.b
	if onDevice {
		other.DeviceBytes = 0
	} else {
		other.HostBytes = 0
	}
	var pool []candidate
	for _, c := range cands {
		if sr.plausible(c, other) {
			pool = append(pool, c)
		}
	}
	sort.SliceStable(pool, func(i, j int) bool { return axis(pool[i]) < axis(pool[j]) })
	var best int64
	var bestPlan *residency.Plan
	for _, c := range pool[:min(len(pool), 4)] {
		if n := sr.bisect(c.plan, onDevice); n > 0 && (best == 0 || n < best) {
			best, bestPlan = n, c.plan
		}
	}
	return best, bestPlan
}

// bisect finds the least budget on one axis at which plan fits (to 1%),
// or 0 when it does not fit even unlimited on that axis.
func (sr *searcher) bisect(plan *residency.Plan, onDevice bool) int64 {
	with := func(n int64) Budgets {
		b := sr.b
		if onDevice {
			b.DeviceBytes = n
		} else {
			b.HostBytes = n
		}
		return b
	}
	free, err := Predict(sr.p, sr.hw, plan, sr.req, with(0))
	if err != nil || !free.Fits {
		return 0
	}
	hi := free.PeakDeviceReservedBytes
	if !onDevice {
		hi = free.PeakHostBytes
	}
	hi = int64(float64(hi)/(1-marginFraction)) + 2*marginBytes
	if p, err := Predict(sr.p, sr.hw, plan, sr.req, with(hi)); err != nil || !p.Fits {
		return 0
	}
	lo := int64(0)
	for hi-lo > max(hi/100, 1<<20) {
		mid := lo + (hi-lo)/2
		p, err := Predict(sr.p, sr.hw, plan, sr.req, with(mid))
		if err == nil && p.Fits {
			hi = mid
		} else {
			lo = mid
		}
	}
	return (hi + 1<<20 - 1) / (1 << 20) * (1 << 20)
}

// preferred orders plans predicted equally fast: the one that cuts its
// work less (narrowed), then the one that holds less in host memory, then
// the one that copies less. A host-tier copy that the cost model hides
// behind a slow disk still costs its whole size in RSS, and, when the disk
// is faster than priced (the checkpoint in a cache the planner cannot
// see), its first touch and second copy: on the 1.3B the text encoder's
// host tier took 26-32 s where the disk tier took 2-3 s.
func preferred(a, b Prediction) bool {
	if da, db := narrowed(a), narrowed(b); da != db {
		return da < db
	}
	if a.PeakHostBytes != b.PeakHostBytes {
		return a.PeakHostBytes < b.PeakHostBytes
	}
	return copied(a) < copied(b)
}

// choice is a plan predicted to fit.
type choice struct {
	plan *residency.Plan
	pred Prediction
}

// pick returns the preferred of the plans predicted within 1% of the
// fastest (measured against the fastest, so that a chain of plans each
// within 1% of the next cannot drift the choice further); fastest by
// cost: warm when the runtime is kept for more requests.
func pick(cs []choice) choice { return cs[pickIndex(cs)] }

// pickIndex is the index of pick's choice.
func pickIndex(cs []choice) int {
	fastest := cs[0].pred.cost()
	for _, c := range cs {
		fastest = min(fastest, c.pred.cost())
	}
	best := -1
	for i, c := range cs {
		if c.pred.cost() > fastest*1.01 {
			continue
		}
		if best < 0 || preferred(c.pred, cs[best].pred) {
			best = i
		}
	}
	return best
}

// narrowed counts the run options that cut work into smaller pieces (FFN
// chunks, CFG branches one after the other, VAE tiles). The cost model
// prices their flops like the whole products', but smaller GEMMs run
// slower (bf16 at 256 rows: 0.6-0.7x its rate at 1280), so between plans
// predicted equal the one that cuts less is faster.
func narrowed(p Prediction) int {
	n := 0
	if p.Run.FFNChunk > 0 {
		n++
	}
	if p.Run.CFG == residency.CFGSequential {
		n++
	}
	if p.Run.VAETile > 0 {
		n++
	}
	return n
}

func copied(p Prediction) int64 {
	var n int64
	for _, c := range p.Components {
		n += c.BytesCopied + c.BytesDisk
	}
	return n
}
