package train

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
)

// Full fine-tuning with the master weights in the host tier
// (ZeRO-Offload's division of work):
//
//   - the float32 master weights, AdamW's moments and the gradients live in
//     host buffers allocated from the host tier (Residency.Host), so the
//     host budget caps them;
//   - the executor's source for a block's weights is its master copy: the
//     device holds a working copy only while the plan says (resident,
//     streamed...), and a copy made before the block's update is
//     invalidated after it, so the next load reads the new values;
//   - the gradients of a block accumulate on the device during the block's
//     backward only, in one buffer the size of the largest block's
//     gradients, and are downloaded to the host as soon as that block's
//     backward is done (micro-batches accumulate on the host);
//   - in a step's last micro-batch, each block's AdamW update runs on the
//     host (a goroutine) while the device computes the next blocks'
//     backward; FinishStep waits for the last one before the next forward.

// Offloader is a Net that updates its own parameters on the host, block
// by block, while its backward runs. The trainer drives it with StartStep
// and FinishStep instead of TakeGrads and AdamW.Step.
type Offloader interface {
	Net
	// Offloads reports whether the net updates its parameters itself.
	Offloads() bool
	// StartStep begins an optimizer step of u.Accum micro-batches: the
	// last one's Backward launches the block updates.
	StartStep(u StepUpdate) error
	// FinishStep waits for every block's update and returns the global
	// gradient norm before clipping.
	FinishStep() (float64, error)
	// AbandonStep ends a step whose micro-batch failed, updating no
	// further block.
	AbandonStep()
}

// StepUpdate is what one optimizer step does with the gradients.
type StepUpdate struct {
	Opt         *AdamW
	Accum       int
	MaxGradNorm float64
	// OnGrads, when set, receives every gradient after averaging and
	// before clipping (--grads-out); like clipping, it makes the updates
	// wait for the last block.
	OnGrads func(params []*Param, grads [][]float32) error
}

// zeroState is full fine-tuning's host side.
type zeroState struct {
	exec   *residency.Executor
	src    *masterSource
	blocks []*residency.Block
	index  map[*residency.Block]int
	params []*Param
	ranges [][]int // the parameters of each block (indices into params)
	offs   []int64 // each parameter's offset in its block's gradient layout
	// gradBytes is the largest block's gradients: the device buffer.
	gradBytes int64
	host      []*tensor.Buffer
	grads     [][]float32 // host gradients, one per parameter
	m, v      [][]float32 // host moments, swapped into the optimizer
	bound     bool        // the optimizer's moments are m and v
	fresh     []bool      // by block: the host gradients hold nothing yet
	scratch   []float32
	step      *stepState
}

// stepState is one optimizer step in flight.
type stepState struct {
	u     StepUpdate
	micro int    // micro-batches whose backward has started
	sent  []bool // by block: handed to the updater
	work  chan int
	done  chan struct{}
	err   error
	norm  float64
	// abandoned: a micro-batch failed, no further block is updated.
	abandoned atomic.Bool
}

// setupZero reads the master weights into the host tier and registers
// the transformer with the executor over them.
func (n *WanNet) setupZero(cfg wan.Config, set *checkpoint.Set) error {
	if err := checkShapes(cfg, set); err != nil {
		return err
	}
	if n.res.Exec.Placement(ComponentName).FromHostCopy() {
		return errors.New("full fine-tuning: the plan keeps a host copy of the transformer's weights, which the updates would leave stale; run it as MasterPlan returns it")
	}
	specs := cfg.Params()
	comp := n.model.Component(ComponentName, nil)
	z := &zeroState{exec: n.res.Exec, blocks: comp.Blocks, index: map[*residency.Block]int{},
		src: newMasterSource(len(comp.Blocks)), ranges: make([][]int, len(comp.Blocks)), fresh: make([]bool, len(comp.Blocks))}
	n.zero = z
	comp.Source = z.src
	comp.Order = residency.TrainingOrder(len(comp.Blocks))
	byName := map[string]int{}
	for i, b := range comp.Blocks {
		z.index[b] = i
		byName[b.Name] = i
		z.fresh[i] = true
	}
	bytes := make([]int64, len(comp.Blocks))
	z.offs = make([]int64, len(specs))
	blockOf := make([]int, len(specs))
	maxLen := 0
	for i, p := range specs {
		bi, ok := byName[ComponentName+"."+p.Block]
		if !ok {
			return fmt.Errorf("full fine-tuning: parameter %s belongs to block %q, which the model does not declare", p.Name, p.Block)
		}
		z.ranges[bi] = append(z.ranges[bi], i)
		blockOf[i] = bi
		z.offs[i] = bytes[bi]
		bytes[bi] += alignUp(4 * int64(tensor.NumElems(p.Shape)))
		maxLen = max(maxLen, tensor.NumElems(p.Shape))
	}
	for _, b := range bytes {
		z.gradBytes = max(z.gradBytes, b)
	}
	z.scratch = make([]float32, maxLen)
	if err := z.allocHost(n.res.Host, specs, bytes); err != nil {
		return err
	}
	n.params = z.params
	for i, p := range specs {
		info, _ := set.Lookup(p.Name)
		d, err := set.ReadF32(info)
		if err != nil {
			return err
		}
		prm := z.params[i]
		copy(prm.Data, d)
		z.src.tensors[p.Name] = masterTensor{block: blockOf[i], shape: prm.Shape, data: prm.Data}
	}
	return n.res.Exec.Register(comp)
}

// allocHost makes each block's four host buffers (master weights,
// gradients, first and second moments) and the parameters over them.
func (z *zeroState) allocHost(host tensor.Device, specs []residency.ParamSpec, bytes []int64) error {
	views := make([][][]float32, 4) // kind, parameter
	for k := range views {
		views[k] = make([][]float32, len(specs))
	}
	kinds := []string{"master weights", "gradients", "adam m", "adam v"}
	for bi, size := range bytes {
		if size == 0 {
			continue
		}
		for k, kind := range kinds {
			buf, err := host.Alloc(size, z.blocks[bi].Name+" "+kind)
			if err != nil {
				return fmt.Errorf("host tier: %s of %s: %w", kind, z.blocks[bi].Name, err)
			}
			z.host = append(z.host, buf)
			for _, i := range z.ranges[bi] {
				t, err := tensor.View(buf, z.offs[i], dtype.F32, specs[i].Shape...)
				if err != nil {
					return err
				}
				views[k][i] = t.F32()
				if k != 0 {
					clear(views[k][i]) // fresh memory may be reused
				}
			}
		}
	}
	for i, p := range specs {
		z.params = append(z.params, &Param{Name: p.Name, Shape: append([]int(nil), p.Shape...), Data: views[0][i]})
	}
	z.grads, z.m, z.v = views[1], views[2], views[3]
	return nil
}

func alignUp(n int64) int64 { return (n + 63) &^ 63 }

// backwardRunner makes the device gradient buffer, points grads' entries
// at views of it, and returns the runner that moves each block's
// gradients to the host after its backward.
func (z *zeroState) backwardRunner(ops *tensor.Ops, grads map[string]*tensor.Tensor) (*zeroRunner, error) {
	buf, err := ops.B.Device().Alloc(z.gradBytes, "gradients (one block)")
	if err != nil {
		return nil, fmt.Errorf("gradient buffer: %w", err)
	}
	r := &zeroRunner{z: z, ops: ops, buf: buf, views: make([]*tensor.Tensor, len(z.params))}
	for i, p := range z.params {
		v, err := tensor.View(buf, z.offs[i], dtype.F32, p.Shape...)
		if err != nil {
			buf.Free()
			return nil, err
		}
		r.views[i] = v
		grads[p.Name] = v
	}
	if st := z.step; st != nil {
		st.micro++
		r.last = st.micro == st.u.Accum
	}
	return r, nil
}

// zeroRunner runs the backward's blocks through the executor, with their
// gradients on the device only during their backward.
type zeroRunner struct {
	z     *zeroState
	ops   *tensor.Ops
	buf   *tensor.Buffer
	views []*tensor.Tensor
	last  bool // the step's last micro-batch: blocks are updated after
}

// Run implements residency.Runner.
func (r *zeroRunner) Run(b *residency.Block, fn func() error) error {
	z := r.z
	bi, ok := z.index[b]
	if !ok {
		return fmt.Errorf("full fine-tuning: block %s is not the transformer's", b.Name)
	}
	update := r.last && !z.step.sent[bi]
	err := z.exec.Run(b, func() error {
		if update {
			// From now on a load of this block waits for its update.
			z.src.setPending(bi, true)
		}
		for _, i := range z.ranges[bi] {
			if err := r.ops.B.Fill(r.views[i], 0); err != nil {
				return err
			}
		}
		if err := fn(); err != nil {
			return err
		}
		return z.download(r.ops, bi, r.views)
	})
	if err != nil {
		if update {
			z.src.setPending(bi, false)
		}
		return err
	}
	if update {
		z.step.sent[bi] = true
		z.step.work <- bi
	}
	return nil
}

// release frees the device gradient buffer.
func (r *zeroRunner) release() { r.buf.Free() }

// download adds block bi's device gradients into the host's (or sets
// them, for the step's first contribution).
func (z *zeroState) download(ops *tensor.Ops, bi int, views []*tensor.Tensor) error {
	for _, i := range z.ranges[bi] {
		g := z.grads[i]
		if z.fresh[bi] {
			if err := ops.B.Download(g, views[i]); err != nil {
				return fmt.Errorf("gradient of %s: %w", z.params[i].Name, err)
			}
			continue
		}
		tmp := z.scratch[:len(g)]
		if err := ops.B.Download(tmp, views[i]); err != nil {
			return fmt.Errorf("gradient of %s: %w", z.params[i].Name, err)
		}
		for j, x := range tmp {
			g[j] += x
		}
	}
	z.fresh[bi] = false
	return nil
}

// Offloads implements Offloader: full fine-tuning under an executor
// updates on the host, block by block.
func (n *WanNet) Offloads() bool { return n.zero != nil }

// StartStep implements Offloader.
func (n *WanNet) StartStep(u StepUpdate) error {
	z := n.zero
	if z == nil {
		return errors.New("wan net: StartStep without offloaded full fine-tuning")
	}
	if z.step != nil {
		return errors.New("wan net: StartStep twice without FinishStep")
	}
	if u.Accum <= 0 {
		u.Accum = 1
	}
	if err := z.bind(u.Opt); err != nil {
		return err
	}
	st := &stepState{u: u, sent: make([]bool, len(z.blocks)), work: make(chan int, len(z.blocks)), done: make(chan struct{})}
	z.step = st
	go z.updater(st)
	return nil
}

// bind makes the optimizer's moments the host-tier buffers, keeping their
// values (zero, or restored from a checkpoint).
func (z *zeroState) bind(o *AdamW) error {
	if len(o.M) != len(z.params) || len(o.V) != len(z.params) {
		return fmt.Errorf("wan net: optimizer state for %d parameters, the net has %d", len(o.M), len(z.params))
	}
	for i := range z.params {
		if len(o.M[i]) != len(z.m[i]) || len(o.V[i]) != len(z.v[i]) {
			return fmt.Errorf("wan net: optimizer state of %s has the wrong size", z.params[i].Name)
		}
		if &o.M[i][0] != &z.m[i][0] {
			copy(z.m[i], o.M[i])
			o.M[i] = z.m[i]
		}
		if &o.V[i][0] != &z.v[i][0] {
			copy(z.v[i], o.V[i])
			o.V[i] = z.v[i]
		}
	}
	z.bound = true
	return nil
}

// updater updates each block handed to it. Clipping by the global norm
// (and --grads-out) needs every gradient before any update: then the
// updates wait for the last block's backward.
func (z *zeroState) updater(st *stepState) {
	defer close(st.done)
	waitAll := st.u.MaxGradNorm > 0 || st.u.OnGrads != nil
	var held []int
	for bi := range st.work {
		if st.err != nil || st.abandoned.Load() {
			z.src.setPending(bi, false)
			continue
		}
		AverageGrads(z.blockGrads(bi), st.u.Accum)
		if waitAll {
			held = append(held, bi)
			continue
		}
		st.err = z.update(st, bi)
	}
	if st.abandoned.Load() && st.err == nil {
		st.err = errors.New("step abandoned")
	}
	if waitAll && st.err == nil && st.u.OnGrads != nil {
		st.err = st.u.OnGrads(z.params, z.grads)
	}
	if st.err == nil {
		st.norm = ClipGradNorm(z.grads, st.u.MaxGradNorm)
	}
	for _, bi := range held {
		if st.err == nil {
			st.err = z.update(st, bi)
		} else {
			z.src.setPending(bi, false)
		}
	}
}

// blockGrads are block bi's host gradients.
func (z *zeroState) blockGrads(bi int) [][]float32 {
	out := make([][]float32, len(z.ranges[bi]))
	for k, i := range z.ranges[bi] {
		out[k] = z.grads[i]
	}
	return out
}

// update runs AdamW on block bi's parameters (as step Opt.Steps+1, the
// same arithmetic as one Step over all parameters), then lets the
// executor load the new values.
func (z *zeroState) update(st *stepState, bi int) error {
	defer z.src.setPending(bi, false)
	idx := z.ranges[bi]
	o := &AdamW{Config: st.u.Opt.Config, Steps: st.u.Opt.Steps}
	ps, gs := make([]*Param, len(idx)), make([][]float32, len(idx))
	for k, i := range idx {
		ps[k], gs[k] = z.params[i], z.grads[i]
		o.M, o.V = append(o.M, st.u.Opt.M[i]), append(o.V, st.u.Opt.V[i])
	}
	if err := o.Step(ps, gs); err != nil {
		return err
	}
	z.exec.Invalidate(z.blocks[bi])
	return nil
}

// FinishStep implements Offloader: blocks whose backward did not run in
// the last micro-batch are updated too (with their accumulated
// gradients), and every update is waited for.
func (n *WanNet) FinishStep() (float64, error) {
	z := n.zero
	if z == nil || z.step == nil {
		return 0, errors.New("wan net: FinishStep without StartStep")
	}
	st := z.step
	z.step = nil
	for bi, sent := range st.sent {
		if !sent {
			z.src.setPending(bi, true)
			st.work <- bi
		}
	}
	close(st.work)
	<-st.done
	for i := range z.fresh {
		z.fresh[i] = true
	}
	if st.err != nil {
		return 0, fmt.Errorf("update: %w", st.err)
	}
	st.u.Opt.Steps++
	return st.norm, nil
}

// AbandonStep implements Offloader: a micro-batch failed, so the step
// ends without updating the blocks not updated yet.
func (n *WanNet) AbandonStep() {
	if z := n.zero; z != nil {
		z.abandon()
	}
}

func (z *zeroState) abandon() {
	st := z.step
	if st == nil {
		return
	}
	z.step = nil
	st.abandoned.Store(true)
	close(st.work)
	<-st.done
	for i := range z.fresh {
		z.fresh[i] = true
	}
}

// takeGrads is TakeGrads for offloaded full fine-tuning outside a step
// (a trainer that does not drive it as an Offloader).
func (z *zeroState) takeGrads(dst [][]float32) error {
	if err := checkGrads(z.params, dst); err != nil {
		return err
	}
	for bi := range z.blocks {
		for _, i := range z.ranges[bi] {
			if z.fresh[bi] {
				clear(dst[i])
			} else {
				copy(dst[i], z.grads[i])
			}
		}
		z.fresh[bi] = true
	}
	return nil
}

// invalidateAll makes every block load its master values again (after a
// restore changed them).
func (z *zeroState) invalidateAll() {
	for _, b := range z.blocks {
		z.exec.Invalidate(b)
	}
}

// close ends a step in flight, releases waiting reads and frees the host
// buffers (the parameters' Data with them).
func (z *zeroState) close() {
	z.abandon()
	z.src.close()
	z.exec.Done(ComponentName) // no load reads the masters after this
	for _, b := range z.host {
		b.Free()
	}
	z.host = nil
}

// trainOffloaded is Train for a net that updates its blocks itself while
// its backward runs (see Offloader).
func (t *Trainer) trainOffloaded(z Offloader) (StepStat, error) {
	start := time.Now()
	t.grads = nil // the net keeps the gradients in the host tier
	u := StepUpdate{Opt: t.opt, Accum: t.cfg.GradAccum, MaxGradNorm: t.cfg.MaxGradNorm}
	if t.step == 0 && t.OnFirstGrads != nil {
		u.OnGrads = t.OnFirstGrads
	}
	if err := z.StartStep(u); err != nil {
		return StepStat{}, err
	}
	var lossSum float64
	for range t.cfg.GradAccum {
		b, err := t.data.Next()
		if err == nil {
			var loss float32
			loss, err = t.micro(b)
			lossSum += float64(loss)
		}
		if err != nil {
			z.AbandonStep()
			return StepStat{}, err
		}
	}
	norm, err := z.FinishStep()
	if err != nil {
		return StepStat{}, err
	}
	if t.ema != nil {
		if err := t.ema.Update(t.net.Params()); err != nil {
			return StepStat{}, err
		}
	}
	t.step++
	s := StepStat{Step: t.step, Loss: float32(lossSum / float64(t.cfg.GradAccum)), GradNorm: norm, Seconds: time.Since(start).Seconds()}
	t.History = append(t.History, s)
	return s, nil
}
