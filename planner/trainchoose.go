package planner

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/residency"
	"ferry/tensor"
)

// TrainSearch says what ChooseTraining may choose: nil (or empty) lists
// let it choose among all values; a one-element list fixes the knob (the
// user gave the flag). Plan, when set, fixes the transformer's placement.
type TrainSearch struct {
	Checkpointing  []string
	ActivationTier []string
	DType          []dtype.DType
	EMATier        []string
	Plan           *residency.Plan
	// AutoBatch picks the largest micro-batch that fits (up to MaxBatch,
	// default 64) instead of Request.Batch.
	AutoBatch bool
	MaxBatch  int
}

// TrainChoice is what ChooseTraining picked.
type TrainChoice struct {
	Plan  *residency.Plan `json:"plan"`
	Knobs TrainKnobs      `json:"knobs"`
	Batch int             `json:"batch"`
}

// TrainReason explains one saving: whether auto used it and why.
type TrainReason struct {
	Saving string `json:"saving"`
	Chosen bool   `json:"chosen"`
	Why    string `json:"why"`
}

func (r TrainReason) String() string {
	verb := "not chosen"
	if r.Chosen {
		verb = "chosen"
	}
	return fmt.Sprintf("%s: %s, %s", r.Saving, verb, r.Why)
}

// TrainInfeasibleError is a budget no plan and knob set fits: it names the
// smallest budgets that would fit.
type TrainInfeasibleError struct {
	Budgets Budgets
	// MinDeviceBytes is the least device budget some candidate fits with
	// the host budget as given (0: none does); MinHostBytes likewise.
	MinDeviceBytes, MinHostBytes int64
	// BothDevice, BothHost: the least pair when neither alone suffices.
	BothDevice, BothHost int64
	Batch                int
}

func (e *TrainInfeasibleError) Error() string {
	var opts []string
	if e.MinDeviceBytes > 0 {
		opts = append(opts, fmt.Sprintf("a device budget of %s", tensor.FormatBytes(e.MinDeviceBytes)))
	}
	if e.MinHostBytes > 0 {
		opts = append(opts, fmt.Sprintf("a host budget of %s", tensor.FormatBytes(e.MinHostBytes)))
	}
	if len(opts) == 0 {
		opts = append(opts, fmt.Sprintf("a device budget of %s with a host budget of %s", tensor.FormatBytes(e.BothDevice), tensor.FormatBytes(e.BothHost)))
	}
	return fmt.Sprintf("no training plan fits %s device and %s host at batch %d: the smallest that would fit is %s (over the placements and knobs left to choose)",
		budgetText(e.Budgets.DeviceBytes), budgetText(e.Budgets.HostBytes), e.Batch, strings.Join(opts, " or "))
}

// trainCand is one evaluated plan and knob set.
type trainCand struct {
	plan *residency.Plan
	k    TrainKnobs
	pred TrainPrediction // with the tight budgets
}

// chooser holds one ChooseTraining's state.
type chooser struct {
	p      *Profile
	hw     hwprofile.Profile
	req    TrainRequest
	b      Budgets
	search TrainSearch
	// tried are every candidate predicted, for the reasons.
	tried []trainCand
}

// ChooseTraining picks the fastest transformer placement and knob set
// that fits the budgets for req (with AutoBatch, first the largest batch
// some plan fits), and returns it with its prediction and a reason per
// saving. When nothing fits, the error is a *TrainInfeasibleError naming
// the smallest budgets that would.
func ChooseTraining(p *Profile, hw hwprofile.Profile, req TrainRequest, b Budgets, search TrainSearch) (TrainChoice, TrainPrediction, []TrainReason, error) {
	req = req.normalized()
	if err := req.Validate(p); err != nil {
		return TrainChoice{}, TrainPrediction{}, nil, err
	}
	if err := hw.Validate(); err != nil {
		return TrainChoice{}, TrainPrediction{}, nil, err
	}
	c := &chooser{p: p, hw: hw, req: req, b: b, search: search}
	if search.AutoBatch {
		n, err := c.largestBatch()
		if err != nil {
			return TrainChoice{}, TrainPrediction{}, nil, err
		}
		c.req.Batch = n
	}
	best, err := c.fastest()
	if err != nil {
		return TrainChoice{}, TrainPrediction{}, nil, err
	}
	pred, err := PredictTraining(p, hw, best.plan, c.req, best.k, b)
	if err != nil {
		return TrainChoice{}, TrainPrediction{}, nil, err
	}
	choice := TrainChoice{Plan: best.plan, Knobs: best.k, Batch: c.req.Batch}
	return choice, pred, c.reasons(best), nil
}

// knobSets lists the knob combinations the search allows.
func (c *chooser) knobSets() []TrainKnobs {
	or := func(xs, all []string) []string {
		if len(xs) == 0 {
			return all
		}
		return xs
	}
	cks := or(c.search.Checkpointing, []string{CheckpointNone, CheckpointSelective, CheckpointBlock})
	tiers := or(c.search.ActivationTier, []string{TierDevice, TierHostT})
	emas := or(c.search.EMATier, []string{TierHostT, TierDevice})
	if !c.req.EMA {
		emas = emas[:1]
	}
	dts := c.search.DType
	if len(dts) == 0 {
		dts = []dtype.DType{dtype.F32}
	}
	var out []TrainKnobs
	for _, dt := range dts {
		for _, ck := range cks {
			for _, t := range tiers {
				for _, e := range emas {
					out = append(out, TrainKnobs{Checkpointing: ck, ActivationTier: t, DType: dt, EMATier: e}.normalized())
				}
			}
		}
	}
	return out
}

// tight are the budgets a candidate must fit (the safety margin).
func (c *chooser) tight() Budgets {
	t := c.b
	t.DeviceBytes, t.HostBytes = effective(c.b.DeviceBytes), effective(c.b.HostBytes)
	return t
}

// try predicts a candidate under the tight budgets and records it.
func (c *chooser) try(plan *residency.Plan, k TrainKnobs) trainCand {
	pred := simulateTraining(c.p, c.hw, plan, c.req, k, c.tight())
	pred.Problem = pred.overBudget()
	pred.Fits = pred.Problem == ""
	tc := trainCand{plan: plan, k: k, pred: pred}
	c.tried = append(c.tried, tc)
	return tc
}

// streamPlan is a streamed placement of the transformer.
func streamPlan(tier residency.Tier, k, n int) *residency.Plan {
	name := fmt.Sprintf("stream-k%d-n%d", k, n)
	if tier == residency.TierDisk {
		name += "-disk"
	}
	return &residency.Plan{Name: name, Components: map[string]residency.ComponentPlan{
		Transformer: {Placement: residency.Stream, Tier: tier, Prefetch: k, Persistent: n}}}
}

func residentPlan() *residency.Plan {
	return &residency.Plan{Name: "resident", Components: map[string]residency.ComponentPlan{Transformer: {Placement: residency.Resident}}}
}

// fastest evaluates the knob sets in the order of their resident time (a
// lower bound for any placement of that set) and, where resident does not
// fit, streamed placements with as many persistent blocks as fit; it
// stops when no remaining set can beat the best found.
func (c *chooser) fastest() (trainCand, error) {
	type bound struct {
		k    TrainKnobs
		res  trainCand
		time float64
	}
	var bounds []bound
	for _, k := range c.knobSets() {
		var r trainCand
		if c.search.Plan != nil {
			r = c.try(c.search.Plan, k)
		} else {
			r = c.try(residentPlan(), k)
		}
		bounds = append(bounds, bound{k: k, res: r, time: r.pred.StepS})
	}
	sort.SliceStable(bounds, func(i, j int) bool { return bounds[i].time < bounds[j].time })
	var best *trainCand
	for _, bd := range bounds {
		if best != nil && bd.time >= best.pred.StepS {
			break
		}
		cand := bd.res
		if !cand.pred.Fits && c.search.Plan == nil {
			cand = c.bestStream(bd.k)
		}
		if cand.pred.Fits && (best == nil || cand.pred.StepS < best.pred.StepS) {
			cc := cand
			best = &cc
		}
	}
	if best == nil {
		return trainCand{}, c.infeasible()
	}
	return *best, nil
}

// bestStream finds, for a knob set, the fastest streamed placement that
// fits: from the host tier with one block prefetched and the most
// persistent blocks that fit, then two prefetched at that count; from the
// disk tier when the host tier's copies do not fit.
func (c *chooser) bestStream(k TrainKnobs) trainCand {
	var best trainCand
	consider := func(tc trainCand) {
		if tc.pred.Fits && (!best.pred.Fits || tc.pred.StepS < best.pred.StepS) {
			best = tc
		}
	}
	layers := c.p.Wan.NumLayers
	for _, tier := range []residency.Tier{residency.TierHost, residency.TierDisk} {
		base := c.try(streamPlan(tier, 1, 0), k)
		if !base.pred.Fits {
			continue
		}
		consider(base)
		lo, hi := 0, layers+2 // lo fits
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if tc := c.try(streamPlan(tier, 1, mid), k); tc.pred.Fits {
				lo = mid
				consider(tc)
			} else {
				hi = mid
			}
		}
		consider(c.try(streamPlan(tier, 2, lo), k))
		if best.pred.Fits && tier == residency.TierHost {
			break // the disk tier only saves host memory, at a cost
		}
	}
	if !best.pred.Fits {
		best.pred.Problem = "no streamed placement fits"
	}
	return best
}

// frugal is the knob set and placement that take the least memory.
func (c *chooser) frugal() []trainCand {
	k := TrainKnobs{Checkpointing: CheckpointBlock, ActivationTier: TierHostT, EMATier: TierHostT}
	if len(c.search.DType) > 0 {
		k.DType = c.search.DType[0]
	}
	pick := func(allowed []string, want string) string {
		if len(allowed) == 0 {
			return want
		}
		return allowed[0]
	}
	k.Checkpointing = pick(c.search.Checkpointing, CheckpointBlock)
	k.ActivationTier = pick(c.search.ActivationTier, TierHostT)
	k.EMATier = pick(c.search.EMATier, TierHostT)
	k = k.normalized()
	if c.search.Plan != nil {
		return []trainCand{c.try(c.search.Plan, k)}
	}
	// Less device memory from the host tier's copies, less host memory
	// from the disk.
	return []trainCand{c.try(streamPlan(residency.TierHost, 1, 0), k), c.try(streamPlan(residency.TierDisk, 1, 0), k)}
}

// largestBatch finds the largest batch the most frugal candidate fits:
// doubling, then bisecting.
func (c *chooser) largestBatch() (int, error) {
	maxB := c.search.MaxBatch
	if maxB <= 0 {
		maxB = 64
	}
	fits := func(n int) bool {
		c.req.Batch = n
		for _, tc := range c.frugal() {
			if tc.pred.Fits {
				return true
			}
		}
		return false
	}
	if !fits(1) {
		c.req.Batch = 1
		return 0, c.infeasible()
	}
	lo := 1
	hi := 2
	for hi <= maxB && fits(hi) {
		lo, hi = hi, hi*2
	}
	hi = min(hi, maxB+1)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	c.tried = nil // the reasons compare candidates of the chosen batch
	return lo, nil
}

// infeasible names the smallest budgets that would fit: for the frugal
// candidates (and each knob set's resident placement), the least device
// budget that fits with the host budget as given, found by bisection
// between the allocated peak and the reserved peak without a cap (the
// caching allocator holds less under a cap), and the same for the host.
func (c *chooser) infeasible() error {
	saved := c.b
	defer func() { c.b = saved }()
	e := &TrainInfeasibleError{Budgets: saved, Batch: c.req.Batch}
	fitsWith := func(b Budgets) bool {
		c.b = b
		for _, tc := range c.frugal() {
			if tc.pred.Fits {
				return true
			}
		}
		return false
	}
	least := func(lo, hi int64, with func(int64) Budgets) int64 {
		lo, hi = budgetFor(lo)-budgetStep, budgetFor(hi)
		if !fitsWith(with(hi)) {
			return 0
		}
		const step = budgetStep
		for hi-lo > step {
			mid := (lo + hi) / 2 / step * step
			if mid <= lo {
				break
			}
			if fitsWith(with(mid)) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	c.b = Budgets{}
	open := c.frugal()
	var devLo, devHi, hostLo, hostHi int64
	for i, tc := range open {
		if i == 0 || tc.pred.PeakDeviceBytes < devLo {
			devLo, devHi = tc.pred.PeakDeviceBytes, tc.pred.PeakDeviceReservedBytes
		}
		if i == 0 || tc.pred.PeakHostBytes < hostHi {
			hostLo, hostHi = tc.pred.PeakHostBytes/2, tc.pred.PeakHostBytes
		}
	}
	if saved.DeviceBytes > 0 {
		e.MinDeviceBytes = least(devLo, devHi, func(d int64) Budgets { b := saved; b.DeviceBytes = d; return b })
	}
	if saved.HostBytes > 0 {
		e.MinHostBytes = least(hostLo, hostHi, func(h int64) Budgets { b := saved; b.HostBytes = h; return b })
	}
	if e.MinDeviceBytes == 0 && e.MinHostBytes == 0 {
		e.BothHost = budgetFor(hostHi)
		e.BothDevice = least(devLo, devHi, func(d int64) Budgets { b := saved; b.DeviceBytes, b.HostBytes = d, e.BothHost; return b })
		if e.BothDevice == 0 {
			e.BothDevice = budgetFor(devHi)
		}
	}
	return e
}

// budgetStep is the resolution of the budgets an infeasible error names.
const budgetStep = 1 << 30 / 100

// budgetFor is the least budget whose effective part holds peak, rounded
// up to a budgetStep.
func budgetFor(peak int64) int64 {
	b := int64(float64(peak+marginBytes) / (1 - marginFraction))
	return (b + budgetStep - 1) / budgetStep * budgetStep
}

// AsTrainInfeasible unwraps a *TrainInfeasibleError.
func AsTrainInfeasible(err error) (*TrainInfeasibleError, bool) {
	var e *TrainInfeasibleError
	ok := errors.As(err, &e)
	return e, ok
}

// reasons explains, per saving, why the chosen candidate uses it or not,
// against the fastest candidate tried that makes the other choice.
func (c *chooser) reasons(best trainCand) []TrainReason {
	secs := func(x float64) string { return fmt.Sprintf("%.2f s", x) }
	ms := func(x float64) string { return fmt.Sprintf("%.0f ms", 1000*x) }
	// alt is the fastest fitting candidate with has(k, plan) != want, and
	// the fastest of them at all (fitting or not).
	alt := func(differs func(trainCand) bool) (fit, any *trainCand) {
		for i := range c.tried {
			tc := &c.tried[i]
			if !differs(*tc) {
				continue
			}
			if any == nil || tc.pred.StepS < any.pred.StepS {
				any = tc
			}
			if tc.pred.Fits && (fit == nil || tc.pred.StepS < fit.pred.StepS) {
				fit = tc
			}
		}
		return fit, any
	}
	explain := func(name string, chosen bool, differs func(trainCand) bool, cost string) TrainReason {
		r := TrainReason{Saving: name, Chosen: chosen}
		fit, any := alt(differs)
		switch {
		case chosen && fit == nil && any != nil:
			r.Why = "without it nothing fits: " + strings.TrimPrefix(any.pred.Problem, "does not fit: ")
		case chosen && fit != nil:
			r.Why = fmt.Sprintf("the fastest plan without it (%s) takes %s a step against %s", describeCand(*fit), secs(fit.pred.StepS), secs(best.pred.StepS))
		case chosen:
			r.Why = "fixed by the request"
		case any == nil:
			r.Why = "fixed by the request"
		default:
			r.Why = fmt.Sprintf("the plan fits without it; %s: %s a step with it against %s", cost, secs(any.pred.StepS), secs(best.pred.StepS))
		}
		return r
	}
	var out []TrainReason
	ck := best.k.Checkpointing
	{
		_, with := alt(func(tc trainCand) bool { return tc.k.Checkpointing != CheckpointNone })
		cost := "its recomputation costs time"
		if with != nil {
			cost = fmt.Sprintf("its recomputation would add %s", ms(with.pred.RecomputeS))
		}
		name := "activation checkpointing"
		if ck != CheckpointNone {
			name += " (" + ck + ")"
		}
		out = append(out, explain(name, ck != CheckpointNone, func(tc trainCand) bool { return (tc.k.Checkpointing != CheckpointNone) != (ck != CheckpointNone) }, cost))
	}
	{
		off := best.k.ActivationTier == TierHostT
		_, with := alt(func(tc trainCand) bool { return tc.k.ActivationTier == TierHostT })
		cost := "its copies cost more than they save"
		if with != nil {
			cost = fmt.Sprintf("its copies (%s a step, %s of it stalled) cost more than they save at this sequence length (%d tokens)", ms(with.pred.ActivationCopyS), ms(with.pred.ActivationStallS), best.pred.Tokens)
		}
		out = append(out, explain("activation offload", off, func(tc trainCand) bool { return (tc.k.ActivationTier == TierHostT) != off }, cost))
	}
	if c.req.EMA {
		host := best.k.EMATier == TierHostT
		out = append(out, explain("EMA on the host", host, func(tc trainCand) bool { return (tc.k.EMATier == TierHostT) != host },
			"the EMA's update on the device costs little"))
	}
	{
		st := best.pred.Placement == residency.Stream
		_, with := alt(func(tc trainCand) bool { return tc.pred.Placement == residency.Stream })
		cost := "streaming costs copies"
		if with != nil {
			cost = fmt.Sprintf("streaming costs %s of copies and %s of stalls", ms(with.pred.WeightCopyS), ms(with.pred.StallForwardS+with.pred.StallBackwardS))
		}
		out = append(out, explain("streamed weights", st, func(tc trainCand) bool { return (tc.pred.Placement == residency.Stream) != st }, cost))
	}
	out = append(out, TrainReason{Saving: "attention without weights", Chosen: true,
		Why: fmt.Sprintf("always: the [L, L] probabilities would take %s", tensor.FormatBytes(best.pred.AttentionWeightsBytes))})
	return out
}

// describeCand is a short summary of a candidate.
func describeCand(tc trainCand) string {
	return tc.pred.DescribePlacement() + ", " + DescribeTrainKnobs(tc.k, false)
}
