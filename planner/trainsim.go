package planner

import (
	"fmt"
	"sort"

	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/residency"
)

// Backward cost factors, relative to the forward's work of the same
// block. The attention's is the kernels' ratio measured here
// (AttentionBackward over AttentionLSE at 1280 tokens, 12 heads of 128:
// 2.85-3.25); bwdDX and bwdDW are fitted to model/wan's
// BenchmarkTrainBlock1_3B on a quiet 2-thread Zen 5 (one 1.3B block at
// 1280 tokens: forward 0.25 s, LoRA step 0.72 s, full 0.93 s), whose
// forward puts the GEMMs at ~0.25 s, the attention at ~0.02: the LoRA
// backward then costs 1.55x the forward's GEMM time in its input-gradient
// products (LinearBackward's dy·W runs the weight untransposed and
// unpacked, and adds the adapters' three products), and full fine-tuning
// adds 0.85x for the weight gradients (dyᵀ·x, a reduction over all rows).
const (
	bwdDX   = 1.55
	bwdDW   = 0.85
	bwdAttn = 2.85
	// bwdMem is the backward's elementwise traffic over the forward's:
	// the recomputed norms, rotations and GELU, and each op's gradient.
	bwdMem = 3.0
)

// Host optimizer traffic per trainable parameter: AdamW reads parameter,
// gradient and both moments and writes three of them back (float32);
// TakeGrads downloads and zeroes the gradient, Sync uploads the parameter;
// the EMA reads and writes its copy and reads the parameter.
const (
	adamBytesPerParam = 7 * 4
	syncBytesPerParam = 3 * 4
	emaBytesPerParam  = 3 * 4
)

// trainSim is one training prediction: the executor and allocators of sim
// driven through a step's calls in the training order (forward embed,
// blocks 0..N-1, out; backward out, blocks N-1..0, embed), streamed
// weights prefetched in that order.
type trainSim struct {
	s        *sim
	cs       *simComp
	p        *Profile
	req      TrainRequest
	k        TrainKnobs
	sh       trainShape
	r        *recorder
	order    []int // block indices in run order (residency.TrainingOrder)
	cursor   int   // position in order after the block that ran last
	backward bool  // the step is in its backward
	plan     residency.ComponentPlan

	// Per step.
	fwdS, bwdS, recompS    float64
	stallF, stallB         float64
	actCopyS, actStallS    float64
	castS                  float64
	size                   map[int]int64 // live tensors' bytes
	lastCompute            float64
	pendingCopy            float64
	blockGrad              []int64 // full: each block's float32 parameters, 64-byte aligned
	savedBytes, inputBytes int64
}

// simulateTraining runs two steps (the first loads what the plan keeps,
// the second is steady) and fills a prediction from them.
func simulateTraining(p *Profile, hw hwprofile.Profile, plan *residency.Plan, req TrainRequest, k TrainKnobs, b Budgets) TrainPrediction {
	tc := p.Component(Transformer)
	pred := TrainPrediction{Model: p.Name, Plan: trainPlanName(plan), Request: req, Knobs: k, DType: k.DTypeName(), Budgets: b,
		Tokens: req.Tokens(p), Layers: p.Wan.NumLayers}
	cp := plan.For(Transformer)
	if req.Full {
		// ZeRO-Offload reads the working copies from the float32 masters
		// in the host tier (train.MasterPlan): no host-tier copy of
		// them, and the "disk" is memory.
		if cp.FromHostCopy() {
			cp.Tier = residency.TierDisk
		}
		hw.DiskGBps, hw.DiskSustainedGBps, hw.DiskCPU = hw.PageCacheGBps, 0, 0
	}
	pred.Placement, pred.Tier, pred.Prefetch, pred.Persistent = cp.Placement, cp.Tier, cp.Prefetch, cp.Persistent
	s := newSim(hw, b)
	s.keep = nil // training keeps its GEMM weights dense: float32 or bf16
	if req.Full {
		// ZeRO-Offload: the executor reads the float32 masters.
		c := *tc
		c.Storage = dtype.F32
		tc = &c
	}
	if err := s.register(tc, cp, k.DType); err != nil {
		pred.Problem = err.Error()
		return pred
	}
	ts := &trainSim{s: s, cs: s.byName[Transformer], p: p, req: req, k: k, r: &recorder{ids: &ids{}}, plan: cp, size: map[int]int64{}}
	ts.sh = newTrainShape(p, req, k)
	n := len(tc.Blocks)
	for i := range n {
		ts.order = append(ts.order, i)
	}
	for i := n - 1; i >= 0; i-- {
		ts.order = append(ts.order, i)
	}
	ts.blockGrad = ts.fullBlockBytes()
	ts.setup()
	var stepT float64
	for step := range 2 {
		t0 := s.now
		ts.fwdS, ts.bwdS, ts.recompS, ts.stallF, ts.stallB, ts.actCopyS, ts.actStallS, ts.castS = 0, 0, 0, 0, 0, 0, 0, 0
		before := ts.cs.stats
		ts.step()
		if s.err != nil {
			break
		}
		stepT = s.now - t0
		st := ts.cs.stats.minus(before)
		if step == 1 {
			pen := max(0, (1-hw.CopyOverlap)*(st.upload+st.touch)+hw.DiskCPU*st.read-st.stall)
			pred.WeightCopyS = st.copy
			pred.StallForwardS, pred.StallBackwardS = ts.stallF, ts.stallB
			pred.ForwardS, pred.BackwardS, pred.RecomputeS = ts.fwdS, ts.bwdS, ts.recompS
			pred.ActivationCopyS, pred.ActivationStallS = ts.actCopyS, ts.actStallS
			actPen := (1 - hw.CopyOverlap) * ts.actCopyS
			pred.OptimizerS = ts.optimizerSeconds()
			pred.StepS = stepT + pen + actPen + ts.actStallS + ts.castS + pred.OptimizerS
		}
	}
	ts.fill(&pred)
	if s.err != nil {
		pred.Problem = "does not fit: " + s.err.Error()
	}
	if pred.StepS > 0 {
		pred.SamplesPerSecond = float64(req.Batch) / pred.StepS
	}
	return pred
}

func trainPlanName(p *residency.Plan) string {
	if p == nil || p.Name == "" {
		return "custom"
	}
	return p.Name
}

// newTrainShape gathers the script's sizes.
func newTrainShape(p *Profile, req TrainRequest, k TrainKnobs) trainShape {
	c := p.Wan
	sh := trainShape{b: req.Batch, l: req.Tokens(p), lt: req.TextLen, d: c.InnerDim(), ff: c.FFNDim, heads: c.NumAttentionHeads,
		inCh: c.InChannels, outCh: c.OutChannels, pv: c.PatchVolume(), textDim: c.TextDim, freqDim: c.FreqDim,
		crossNorm: c.CrossAttnNorm, rank: req.LoRARank, full: req.Full, ckpt: k.Checkpointing, actBytes: 4,
		layers: c.NumLayers, rowBlock: trainRowBlockBytes, wantMods: req.Full, wantTxt: req.Full}
	if !req.Full {
		sh.adapted = adaptedNames(p, req.LoRATargets)
	}
	return sh
}

// fullBlockBytes is each block's parameters as train's ZeRO state lays
// them out in one host buffer (float32, each 64-byte aligned).
func (ts *trainSim) fullBlockBytes() []int64 {
	tc := ts.p.Component(Transformer)
	index := map[string]int{}
	for i, b := range tc.Blocks {
		index[b.Name] = i
	}
	out := make([]int64, len(tc.Blocks))
	for _, ps := range ts.p.Wan.Params() {
		if i, ok := index[Transformer+"."+ps.Block]; ok {
			out[i] += alignUp(f32(ps.Shape...), 64)
		}
	}
	return out
}

// setup makes what lives across steps: with LoRA the adapters and their
// gradients on the device (A, B, dA, dB per module, in module order); in
// full fine-tuning the host tier's four buffers per block (master weights,
// gradients, both moments); and an EMA on the device.
func (ts *trainSim) setup() {
	d := &direct{s: ts.s, on: ts.s.dev, r: ts.r}
	if ts.req.Full {
		h := &direct{s: ts.s, on: ts.s.host, r: ts.r}
		for _, n := range ts.blockGrad {
			if n > 0 {
				for range 4 {
					h.alloc(n)
				}
			}
		}
	} else {
		for _, sz := range ts.loraShapes() {
			d.alloc(f32(sz[0], sz[1]))
			d.alloc(f32(sz[2], sz[3]))
		}
	}
	if ts.req.EMA && ts.k.EMATier == TierDevice {
		if ts.req.Full {
			for _, ps := range ts.p.Wan.Params() {
				d.alloc(f32(ps.Shape...))
			}
		} else {
			for i, sz := range ts.loraShapes() {
				if i%2 == 0 {
					d.alloc(f32(sz[0], sz[1]))
					d.alloc(f32(sz[2], sz[3]))
				}
			}
		}
	}
}

// loraShapes lists, per adapted module in name order, the shapes of A
// [rank, in] and B [out, rank], twice: the adapter and its gradients
// are allocated A, B, dA, dB per module.
func (ts *trainSim) loraShapes() [][4]int {
	names, shapes := ts.p.Wan.LinearShapes()
	var mods []string
	for _, n := range names {
		for t := range ts.sh.adapted {
			if len(n) > len(t) && n[len(n)-len(t)-1:] == "."+t && isBlockLinear(n) {
				mods = append(mods, n)
				break
			}
		}
	}
	sort.Strings(mods)
	var out [][4]int
	r := ts.req.LoRARank
	for _, m := range mods {
		s := shapes[m]
		out = append(out, [4]int{r, s[1], s[0], r}, [4]int{r, s[1], s[0], r})
	}
	return out
}

func isBlockLinear(n string) bool { return len(n) > 7 && n[:7] == "blocks." }

// trainableParams counts the trained parameters.
func (ts *trainSim) trainableParams() int64 {
	if ts.req.Full {
		var n int64
		for _, ps := range ts.p.Wan.Params() {
			n += f32(ps.Shape...) / 4
		}
		return n
	}
	var n int64
	for i, sz := range ts.loraShapes() {
		if i%2 == 0 {
			n += int64(sz[0]*sz[1] + sz[2]*sz[3])
		}
	}
	return n
}

// optimizerSeconds is the host's share of a step: the gradients'
// download, AdamW, the EMA and the parameters' upload.
func (ts *trainSim) optimizerSeconds() float64 {
	n := float64(ts.trainableParams())
	bytes := n * (adamBytesPerParam + syncBytesPerParam)
	if ts.req.EMA {
		bytes += n * emaBytesPerParam
	}
	return bytes / (ts.s.hw.MemGBps * 1e9)
}

// devApply applies the events recorded so far on the device.
func (ts *trainSim) devApply() {
	for _, ev := range ts.r.take() {
		ts.note(ev)
		ts.s.apply(ev, ts.cs.acts)
	}
}

// note remembers an allocation's size (a free forgets it).
func (ts *trainSim) note(ev event) {
	if ev.bytes > 0 {
		ts.size[ev.id] = ev.bytes
	} else {
		delete(ts.size, ev.id)
	}
}

// step is one training step (WanNet.Forward, then Backward).
func (ts *trainSim) step() {
	r, sh := ts.r, ts.sh
	n := len(ts.cs.blocks)
	hd := ts.p.Wan.AttentionHeadDim
	c, f, h, w := ts.req.asRequest().latent(ts.p)
	x := r.alloc(f32(sh.b, c, f, h, w))
	ctx := r.alloc(f32(sh.b, sh.lt, sh.textDim))
	cos := r.alloc(int64(sh.l) * int64(hd/2) * 8)
	sin := r.alloc(int64(sh.l) * int64(hd/2) * 8)
	ts.devApply()

	ts.backward = false
	hIn, shared, embedSaved := (&trainScript{sh: sh, r: r}).embedForward()
	ts.runCall(0, r.take(), ts.embedWork(), &ts.fwdS)
	layers := make([]layerRec, sh.layers)
	for i := range sh.layers {
		out, saved := (&trainScript{sh: sh, r: r}).layerForward(false)
		layers[i] = layerRec{in: hIn, saved: saved}
		ev := r.take()
		fw := wanLayerWork(ts.p, sh.b, sh.l, sh.lt, 0).add(ts.loraWork())
		ts.runCall(1+i, ev, fw, &ts.fwdS)
		if i == 0 {
			ts.savedBytes, ts.inputBytes = ts.layerSavedBytes(layers[0]), ts.bytesOf(layers[0].in)
		}
		ts.afterForward(&layers[i], i)
		hIn = out
	}
	pred, outSaved := (&trainScript{sh: sh, r: r}).outForward()
	ts.runCall(n-1, r.take(), ts.outWork(), &ts.fwdS)
	r.free(pred, x)
	ts.devApply()

	// Backward.
	ts.backward = true
	dpred := r.alloc(f32(sh.b, ts.p.Wan.OutChannels, f, h, w))
	var accum []int
	if sh.full {
		// The gradient buffer of one block (train's zeroRunner).
		var most int64
		for _, n := range ts.blockGrad {
			most = max(most, n)
		}
		accum = append(accum, r.alloc(most))
	}
	if sh.wantMods {
		accum = append(accum, r.alloc(f32(sh.b, 6, sh.d)), r.alloc(f32(sh.b, sh.d)), r.alloc(f32(sh.b, sh.lt, sh.d)))
	}
	ts.devApply()
	dh := (&trainScript{sh: sh, r: r}).outBackward()
	ts.runCall(n-1, r.take(), ts.outWork().scaled(1+bwdDX), &ts.bwdS)
	r.free(hIn)
	r.free(outSaved...)
	ts.devApply()
	for i := sh.layers - 1; i >= 0; i-- {
		ts.beforeBackward(layers, i)
		st := &trainScript{sh: sh, r: r}
		var recomputed []int
		var rw work
		if sh.ckpt != CheckpointNone {
			selective := sh.ckpt == CheckpointSelective
			out, saved := st.layerForward(selective)
			r.free(out)
			for _, sv := range saved {
				recomputed = append(recomputed, sv.id)
			}
			rw = wanLayerWork(ts.p, sh.b, sh.l, sh.lt, 0).add(ts.loraWork())
			if selective {
				// The self-attention does not run again; the cross-attention does.
				rw.attn = attnFlops(4*float64(sh.b)*float64(sh.l)*float64(sh.lt)*float64(sh.d), ts.p.Wan.AttentionHeadDim)
			}
		}
		wantIn := i > 0 || sh.full
		dh = st.layerBackward(dh, wantIn)
		r.free(layers[i].in)
		for _, sv := range layers[i].saved {
			r.free(sv.id)
		}
		r.free(recomputed...)
		bw := ts.layerBackWork()
		t := ts.runCall(1+i, r.take(), bw.add(rw), &ts.bwdS)
		if t > 0 && rw.gemm > 0 {
			share := ts.s.seconds(rw) / ts.s.seconds(bw.add(rw))
			ts.recompS += share * t
		}
	}
	if sh.full {
		(&trainScript{sh: sh, r: r}).embedBackward()
		ts.runCall(0, r.take(), ts.embedWork().scaled(bwdDX+bwdDW), &ts.bwdS)
	}
	r.free(dh)
	r.free(accum...)
	r.free(shared...)
	r.free(cos, sin)
	r.free(embedSaved...)
	r.free(dpred, ctx)
	ts.devApply()
}

// afterForward is Tape.stash after block i's forward: the checkpointing
// mode drops what it does not keep, bf16 autocast narrows the rest (the
// modulation and log-sum-exps aside; the input stays float32), and the
// host store moves input and kept tensors to the host tier (copies made,
// then the device's freed).
func (ts *trainSim) afterForward(l *layerRec, i int) {
	if ts.sh.ckpt != CheckpointNone {
		kept := l.saved[:0]
		for _, sv := range l.saved {
			if ts.sh.ckpt == CheckpointSelective && sv.keep {
				kept = append(kept, sv)
				continue
			}
			ts.r.free(sv.id)
		}
		l.saved = kept
	}
	if ts.k.DType == dtype.BF16 {
		ts.castSaved(l, 2)
	}
	ts.devApply()
	l.onDevice = true
	if ts.k.ActivationTier != TierHostT {
		return
	}
	moved := ts.moveTo(l, ts.s.host)
	copyS := float64(moved) / (ts.s.hw.H2DF32GBps * 1e9)
	ts.actCopyS += copyS
	// The copy runs beside the next block's forward.
	ts.actStallS += max(0, copyS-ts.lastCompute)
}

// castSaved replaces each narrowable saved tensor by its cast to a dtype
// of size bytes per element (a new tensor, then the old one freed).
func (ts *trainSim) castSaved(l *layerRec, size int64) {
	var moved int64
	for j, sv := range l.saved {
		if sv.wide {
			continue
		}
		n := ts.size[sv.id] / 4 * size
		if size == 4 {
			n = ts.size[sv.id] * 2
		}
		l.saved[j].id = ts.r.alloc(n)
		ts.r.free(sv.id)
		moved += n
	}
	ts.castS += float64(moved) * 3 / (ts.s.hw.MemGBps * 1e9)
}

// beforeBackward is Tape.unstash before block i's backward: the host
// store gives block i back (fetching it now unless it was prefetched) and
// starts fetching block i-1 (its device copies allocated at once), then
// what bf16 narrowed is widened again.
func (ts *trainSim) beforeBackward(layers []layerRec, i int) {
	if ts.k.ActivationTier == TierHostT {
		for _, j := range []int{i, i - 1} {
			if j < 0 || layers[j].onDevice {
				continue
			}
			moved := ts.moveTo(&layers[j], ts.s.dev)
			copyS := float64(moved) / (ts.s.hw.H2DF32GBps * 1e9)
			ts.actCopyS += copyS
			if j == i {
				ts.actStallS += copyS // fetched on demand
			} else {
				ts.actStallS += max(0, copyS-ts.lastCompute)
			}
		}
	}
	if ts.k.DType == dtype.BF16 {
		ts.castSaved(&layers[i], 4)
		ts.devApply()
	}
}

// moveTo re-allocates a block's kept tensors on to (all copies first, then
// the old ones freed, as the store's Put does) and returns the bytes moved.
func (ts *trainSim) moveTo(l *layerRec, to *allocModel) int64 {
	var moved int64
	var old []int
	move := func(id int) int {
		t, ok := ts.s.live.get(id)
		if !ok {
			return id
		}
		n := ts.size[id]
		nid := ts.r.alloc(n)
		ts.size[nid] = n
		ts.s.apply(ts.r.take()[0], to)
		old = append(old, id)
		moved += n
		_ = t
		return nid
	}
	l.in = move(l.in)
	for j := range l.saved {
		l.saved[j].id = move(l.saved[j].id)
	}
	for _, id := range old {
		if t, ok := ts.s.live.get(id); ok {
			ts.s.apply(event{id: id}, t.on)
		}
	}
	l.onDevice = to == ts.s.dev
	return moved
}

func (ts *trainSim) bytesOf(id int) int64 { return ts.size[id] }

func (ts *trainSim) layerSavedBytes(l layerRec) int64 {
	var n int64
	for _, sv := range l.saved {
		n += ts.bytesOf(sv.id)
	}
	return n
}

// runCall is sim.run for the training order (residency's Component.Order
// = TrainingOrder): the block's run is found in the order from the cursor,
// the next Prefetch distinct blocks after it (wrapping around) are queued,
// and a streamed block stays on the device when it runs again next (the
// turn). It adds the call's compute time to *into and returns it.
func (ts *trainSim) runCall(block int, ev []event, w work, into *float64) float64 {
	s, cs := ts.s, ts.cs
	if s.err != nil {
		return 0
	}
	b := cs.blocks[block]
	s.current = cs
	waitFor := []*simBlock{b}
	pos := ts.advance(block)
	switch cs.plan.Placement {
	case residency.Onload:
		for _, x := range cs.blocks {
			s.enqueue(x)
		}
		waitFor = cs.blocks
	case residency.Stream:
		s.enqueue(b)
		ts.prefetch(b, pos)
	default:
		s.enqueue(b)
	}
	stall0 := cs.stats.stall
	s.wait(cs, waitFor)
	if stall := cs.stats.stall - stall0; ts.backward {
		ts.stallB += stall
	} else {
		ts.stallF += stall
	}
	if s.err != nil {
		return 0
	}
	s.clock++
	b.inUse, b.lastUse = true, s.clock
	dur := s.seconds(w) + s.overhead(ev)
	mapped := cs.acts.Mapped
	t0 := s.now
	for j, e := range ev {
		s.now = t0 + dur*float64(j+1)/float64(len(ev)+1)
		s.advance(s.now)
		ts.note(e)
		s.apply(e, cs.acts)
	}
	touch := s.touchTime(cs.acts.Mapped-mapped, s.now)
	s.now = t0 + dur + touch
	cs.stats.compute += dur + touch
	cs.stats.actTouch += touch
	s.advance(s.now)
	b.inUse = false
	if ts.req.Full && ts.backward {
		// The block's update invalidates its device and host-tier copies:
		// the next run loads the new master values. A block the plan keeps
		// on the device is queued for loading again at once
		// (Executor.Invalidate).
		s.evict(b)
		if b.hostCopy != nil {
			s.host.release(b.hostCopy)
			b.hostCopy = nil
		}
		if cs.plan.Placement == residency.Resident || (cs.plan.Placement == residency.Stream && s.keeps(b)) {
			s.enqueue(b)
			s.advance(s.now)
		}
	} else if cs.plan.Placement == residency.Stream && !s.keeps(b) && !ts.runsSoon(block) {
		s.evict(b)
	}
	ts.lastCompute = dur + touch
	*into += dur + touch
	return dur + touch
}

// advance finds block's next run in the order from the cursor and moves
// the cursor past it (a block the step skips, such as LoRA's embed
// backward, only makes the search look further).
func (ts *trainSim) advance(block int) int {
	n := len(ts.order)
	for i := range n {
		p := (ts.cursor + i) % n
		if ts.order[p] == block {
			ts.cursor = (p + 1) % n
			return p
		}
	}
	return 0
}

// runsSoon is residency's runsNext: the block runs next in the order, or
// within the prefetch window after the next one (the executor keeps it
// rather than evict and load it again).
func (ts *trainSim) runsSoon(block int) bool {
	n := len(ts.order)
	next := ts.order[ts.cursor]
	if next == block {
		return true
	}
	var seen []int
	for i := 1; i < n && len(seen) < ts.cs.plan.Prefetch; i++ {
		x := ts.order[(ts.cursor+i)%n]
		if x == next || containsInt(seen, x) {
			continue
		}
		if x == block {
			return true
		}
		seen = append(seen, x)
	}
	return false
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// prefetch queues up to Prefetch distinct blocks that run after position
// pos within one cycle, leaving out b and blocks loaded and kept.
func (ts *trainSim) prefetch(b *simBlock, pos int) {
	s, cs := ts.s, ts.cs
	n := len(ts.order)
	var out []*simBlock
	for i := 1; i < n && len(out) < cs.plan.Prefetch; i++ {
		x := cs.blocks[ts.order[(pos+i)%n]]
		if x == b || (x.started && s.keeps(x)) || containsBlock(out, x) {
			continue
		}
		out = append(out, x)
	}
	for _, x := range out {
		s.enqueue(x)
	}
}

func containsBlock(bs []*simBlock, x *simBlock) bool {
	for _, b := range bs {
		if b == x {
			return true
		}
	}
	return false
}

// loraWork is the adapters' products in one block's forward.
func (ts *trainSim) loraWork() work {
	sh := ts.sh
	if len(sh.adapted) == 0 {
		return work{}
	}
	_, shapes := ts.p.Wan.LinearShapes()
	var g float64
	for name := range sh.adapted {
		s, ok := shapes["blocks.0."+name]
		if !ok {
			continue
		}
		rows := float64(sh.b * sh.l)
		if name == "attn2.to_k" || name == "attn2.to_v" {
			rows = float64(sh.b * sh.lt)
		}
		g += 2 * rows * float64(sh.rank) * float64(s[0]+s[1])
	}
	return work{gemm: g, mem: float64(sh.b*sh.l*sh.d) * 4 * float64(len(sh.adapted))}
}

// layerBackWork is one block's backward: the input-gradient GEMMs, the
// weight-gradient ones when every weight trains, the adapters' three
// products per forward one, the attention backward and the elementwise
// gradients.
func (ts *trainSim) layerBackWork() work {
	sh := ts.sh
	fw := wanLayerWork(ts.p, sh.b, sh.l, sh.lt, 0)
	g := bwdDX * fw.gemm
	if sh.full {
		g += bwdDW * fw.gemm
	}
	lw := ts.loraWork()
	return work{gemm: g + 3*lw.gemm, attn: [2]float64{bwdAttn * fw.attn[0], bwdAttn * fw.attn[1]}, mem: bwdMem*fw.mem + 2*lw.mem}
}

func (w work) scaled(f float64) work {
	out := work{gemm: w.gemm * f, mem: w.mem * f, attn: [2]float64{w.attn[0] * f, w.attn[1] * f}}
	for i := range w.conv {
		out.conv[i] = w.conv[i] * f
	}
	return out
}

// embedWork and outWork are the forward work of the embed and out blocks
// (as wanPass counts them).
func (ts *trainSim) embedWork() work {
	c, sh := ts.p.Wan, ts.sh
	d := c.InnerDim()
	return work{
		gemm: 2 * float64(sh.b) * (float64(sh.l)*float64(c.InChannels*sh.pv*d) + float64(sh.lt)*float64(c.TextDim*d+d*d) + float64(c.FreqDim*d+d*d+6*d*d)),
		mem:  float64(f32(sh.b, sh.l, c.InChannels*sh.pv)) * 2,
	}
}

func (ts *trainSim) outWork() work {
	c, sh := ts.p.Wan, ts.sh
	return work{gemm: 2 * float64(sh.b) * float64(sh.l) * float64(sh.d*c.OutChannels*sh.pv), mem: float64(f32(sh.b, sh.l, sh.d)) * 4}
}

// fill writes the peaks and sizes into pred.
func (ts *trainSim) fill(pred *TrainPrediction) {
	s := ts.s
	pred.PeakDeviceBytes = s.dev.PeakAllocated
	pred.PeakDeviceReservedBytes = s.dev.PeakReserved
	pred.PeakHostBytes = s.host.PeakReserved
	pred.WeightDeviceBytes = ts.p.Component(Transformer).DeviceBytesKeeping(ts.k.DType, nil)
	n := ts.trainableParams()
	pred.TrainableBytes = 4 * n
	pred.SavedBytes, pred.InputBytes = ts.savedBytes, ts.inputBytes
	pred.AttentionWeightsBytes = f32(ts.sh.b, ts.sh.heads, ts.sh.l, ts.sh.l+ts.sh.lt)
	// Host state: masters (the parameters' values), gradients, both
	// moments, and the EMA when it is on the host.
	copies := int64(4)
	if ts.req.EMA && ts.k.EMATier == TierHostT {
		copies++
	}
	pred.HostStateBytes = 4 * n * copies
	heapState := pred.HostStateBytes
	if ts.req.Full {
		heapState -= 4 * 4 * n // in the host tier, counted in its peak
	}
	pred.PeakRSSBytes = s.peakJoint + ts.heapBytes() + heapState
}

// heapBytes is the process's memory outside the devices and the optimizer
// state: the Go runtime, the batch on the host (latents, noise, the noisy
// input, the target, the downloaded prediction and its gradient) and the
// text context.
func (ts *trainSim) heapBytes() int64 {
	c, f, h, w := ts.req.asRequest().latent(ts.p)
	lat := f32(ts.sh.b, c, f, h, w)
	return heapBase + 6*lat + 2*f32(ts.sh.b, ts.sh.lt, ts.sh.textDim)
}

// DescribeTrainKnobs is a knob set in words, for messages.
func DescribeTrainKnobs(k TrainKnobs, ema bool) string {
	s := fmt.Sprintf("%s, checkpointing %s, activations on the %s", k.DTypeName(), k.Checkpointing, k.ActivationTier)
	if ema {
		s += ", EMA on the " + k.EMATier
	}
	return s
}
