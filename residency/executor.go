package residency

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"ferry/dtype"
	"ferry/tensor"
	"ferry/trace"
)

// Component is a named, ordered list of blocks whose weights come from one
// Source. Blocks run in this order; a streamed component prefetches in it,
// wrapping around (the denoiser's blocks run once per step).
type Component struct {
	Name   string
	Source Source
	Blocks []*Block
	// Order, when set, is the cyclic order the blocks run in, by index,
	// instead of declaration order: a training step runs its blocks
	// forward and then backward (TrainingOrder). A streamed component
	// prefetches along it, and a block that runs twice in a row (the turn)
	// stays on the device in between.
	Order []int
}

// Block is the unit of residency: a set of weights that move together.
type Block struct {
	// Name is unique in the pipeline ("transformer.blocks.3").
	Name string
	// Prefix is prepended to the weights' tags to get checkpoint names.
	Prefix string
	// Weights points to the struct the executor binds tensors into.
	Weights any

	comp     *compState
	index    int
	params   []param
	rows     []rowsParam
	devBytes int64 // compute-ready bytes on the device (after the upcast)
	rawBytes int64 // bytes in storage dtype (host tier, disk reads)

	// Guarded by Executor.mu.
	dev *tensor.Buffer // the weights on the device (nil: absent)
	// prealloc is the block's memory, taken when it was queued to an idle
	// copy worker (enqueue); the worker loads into it.
	prealloc *tensor.Buffer
	// preHost is its host-tier copy's memory, taken with prealloc when the
	// plan reads from a host copy the block does not have yet.
	preHost *tensor.Buffer
	ready   chan struct{} // non-nil while loading or loaded; closed when done
	loadErr error
	host    *tensor.Buffer // host-tier copy in storage dtype
	loads   int            // completed loads (the copy worker reads it before loading)
	inUse   bool
	lastUse uint64
}

// rowsParam is a table gathered by row (see Rows); it is bound, never moved.
type rowsParam struct {
	slot reflect.Value
	rows *Rows
}

type param struct {
	field
	info    TensorInfo
	devType dtype.DType
	devOff  int64
	rawOff  int64
	view    *tensor.Tensor
	// layout is the backend's packed layout of a GEMM weight ("" dense):
	// it is packed as it is copied, in groups of rows (see
	// tensor.MatrixPacker).
	layout string
	group  int
}

// Bytes is the block's size on the device.
func (b *Block) Bytes() int64 { return b.devBytes }

// StoredBytes is the block's size in its storage dtype.
func (b *Block) StoredBytes() int64 { return b.rawBytes }

type compState struct {
	*Component
	plan ComponentPlan
	ops  *tensor.Ops
	// cursor is the position in Order after the block that ran last
	// (guarded by Executor.mu).
	cursor int
	// next is the component prefetch runs on into past this one's end
	// (Handoff; guarded by Executor.mu).
	next *compState
}

// Config sets up an Executor.
type Config struct {
	// Backend computes; its Device is the device tier.
	Backend tensor.Backend
	// HostBackend computes components placed on the host; its Device is the
	// host tier (host-tier copies and read staging are allocated there).
	HostBackend tensor.Backend
	Plan        *Plan
	Trace       *trace.Recorder
	// ChunkBytes is the staging size for reads from disk (default 8 MiB).
	ChunkBytes int64
	// Context, when set, stops a run at the next block once it is
	// cancelled (Ctrl-C): Run returns its error without running the block.
	Context context.Context
	// MatrixDType is the device dtype of weights tagged "matrix" (GEMM
	// weights): F32 (the default, also when zero) or BF16.
	MatrixDType dtype.DType
	// KeepStored, when set, reports the storage dtypes of GEMM weights
	// the backend multiplies as stored (16- and 8-bit floats widened inside
	// the GEMM): such weights keep their storage dtype on the device (see
	// MatrixDeviceType).
	KeepStored func(dtype.DType) bool
	// OnBlock, when set, is called after each block's compute with the
	// component and block names (progress reporting).
	OnBlock func(component, block string)
	// Dense keeps GEMM weights unpacked: training needs it, the backward
	// kernels refuse packed matrices.
	Dense bool
}

// Stats are the executor's measurements.
type Stats struct {
	CopyWait      time.Duration // compute stalled waiting for weights
	CopyTime      time.Duration // time the copy worker spent moving weights
	BytesCopied   int64         // bytes written to the compute location
	BytesReadDisk int64         // bytes read from checkpoints
	Loads         int           // block loads
	Evictions     int
	// Phases splits CopyWait and CopyTime by the phase the caller named
	// with SetPhase (a training step's "forward" and "backward"); nil
	// when no phase was ever set.
	Phases map[string]PhaseStats
}

// PhaseStats are the streaming figures of one phase: the stalls of its
// blocks' runs, and the copies that started while it was current.
type PhaseStats struct {
	CopyWait time.Duration
	CopyTime time.Duration
	Loads    int
}

// Executor runs blocks with their weights in place, as a Plan says.
type Executor struct {
	cfg  Config
	dev  tensor.Device
	host tensor.Device

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*Block
	loading *Block
	closed  bool
	comps   map[string]*compState
	order   []*compState
	current *compState
	clock   uint64
	stats   Stats
	phase   string
	staging *tensor.Buffer
	done    chan struct{}
}

var (
	errCancelled = errors.New("load cancelled")
	errClosed    = errors.New("residency: executor is closed")
)

// New starts an executor and its copy worker.
func New(cfg Config) (*Executor, error) {
	if cfg.Backend == nil || cfg.HostBackend == nil {
		return nil, errors.New("residency: Backend and HostBackend are required")
	}
	if cfg.Plan != nil {
		if err := cfg.Plan.Validate(); err != nil {
			return nil, err
		}
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = 8 << 20
	}
	e := &Executor{
		cfg:   cfg,
		dev:   cfg.Backend.Device(),
		host:  cfg.HostBackend.Device(),
		comps: map[string]*compState{},
		done:  make(chan struct{}),
	}
	e.cond = sync.NewCond(&e.mu)
	if r, ok := e.dev.(interface{ OnReclaim(func(int64) bool) }); ok {
		r.OnReclaim(e.reclaim)
	}
	go e.copyWorker()
	return e, nil
}

// Register declares a component: it resolves every block's weights against
// the source and checks that the plan can hold the largest block, so a
// budget that is too small fails before any compute.
func (e *Executor) Register(c *Component) error {
	if _, dup := e.comps[c.Name]; dup {
		return fmt.Errorf("residency: component %q registered twice", c.Name)
	}
	cs := &compState{Component: c, plan: e.cfg.Plan.For(c.Name)}
	backend := e.cfg.Backend
	if cs.plan.Placement == Host {
		backend = e.cfg.HostBackend
	}
	cs.ops = tensor.NewOps(backend)
	if err := checkOrder(c); err != nil {
		return err
	}
	for i, b := range c.Blocks {
		b.comp, b.index = cs, i
		if err := e.resolve(b); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	if err := e.checkFits(cs); err != nil {
		return err
	}
	e.mu.Lock()
	e.comps[c.Name] = cs
	e.order = append(e.order, cs)
	e.mu.Unlock()
	return nil
}

// resolve finds the block's tensors in the source and lays them out.
func (e *Executor) resolve(b *Block) error {
	fs, err := fields(b.Weights, b.Prefix)
	if err != nil {
		return fmt.Errorf("block %s: %w", b.Name, err)
	}
	b.params, b.rows = b.params[:0], b.rows[:0]
	b.devBytes, b.rawBytes = 0, 0
	for _, f := range fs {
		info, ok := b.comp.Source.Info(f.name)
		if !ok {
			if f.optional {
				continue
			}
			return fmt.Errorf("block %s: tensor %q is missing from the checkpoint", b.Name, f.name)
		}
		if f.rows {
			if info.Scale != 0 && info.Scale != 1 {
				return fmt.Errorf("block %s: %q has a scale_weight; row tables of a scaled checkpoint are not supported", b.Name, f.name)
			}
			if len(info.Shape) != 2 {
				return fmt.Errorf("block %s: %q is %v, a row table must be 2-D", b.Name, f.name, info.Shape)
			}
			r := &Rows{name: f.name, info: info, src: b.comp.Source, onRead: e.countRead}
			b.rows = append(b.rows, rowsParam{slot: f.slot, rows: r})
			continue
		}
		p := param{field: f, info: info, devType: computeType(info.DType)}
		if f.matrix && info.DType.IsFloat() {
			p.devType = MatrixDeviceType(info.DType, e.cfg.MatrixDType, e.cfg.KeepStored)
			if !e.cfg.Dense {
				p.layout, p.group = e.packing(b.comp, info, p.devType)
			}
		}
		p.devOff = b.devBytes
		p.rawOff = b.rawBytes
		b.devBytes += alignUp(int64(tensor.NumElems(info.Shape)) * int64(p.devType.Size()))
		b.rawBytes += alignUp(info.Size)
		b.params = append(b.params, p)
	}
	return nil
}

// packing asks the backend that computes cs whether it packs a GEMM weight
// of this shape and device dtype, and in groups of how many rows. A group
// must fit the read staging buffer, which packing reads whole groups
// through.
func (e *Executor) packing(cs *compState, info TensorInfo, dt dtype.DType) (string, int) {
	mp, ok := cs.ops.B.(tensor.MatrixPacker)
	if !ok || len(info.Shape) != 2 {
		return "", 0
	}
	layout, group, ok := mp.PackedLayout(dt, info.Shape[0], info.Shape[1])
	if !ok || group <= 0 || int64(group)*int64(info.Shape[1])*int64(info.DType.Size()) > e.cfg.ChunkBytes {
		return "", 0
	}
	return layout, group
}

// MatrixDeviceType is the device dtype of a GEMM weight stored as stored,
// under matrix dtype matrix (F32 or BF16) with a backend that multiplies
// the storage dtypes keep reports (nil: none) as stored. The executor lays
// blocks out by it and the planner counts their bytes by it. Under BF16
// every weight of 16 bits or more takes bf16 (the bf16 GEMM's operand);
// otherwise a kept type stays as stored (fp8 stays fp8 under BF16 too,
// half the bytes) and the rest is float32 or bf16 as matrix says.
func MatrixDeviceType(stored, matrix dtype.DType, keep func(dtype.DType) bool) dtype.DType {
	switch {
	case !stored.IsFloat():
		return stored
	case matrix == dtype.BF16 && stored.Size() >= 2:
		return dtype.BF16
	case keep != nil && keep(stored):
		return stored
	case matrix == dtype.BF16:
		return dtype.BF16
	}
	return dtype.F32
}

// computeType is the dtype a stored type is computed in on the device.
func computeType(d dtype.DType) dtype.DType {
	if d.IsFloat() {
		return dtype.F32
	}
	return d
}

// alignUp keeps every tensor 64-byte aligned inside a block's buffer.
// BudgetError says a block can never fit its budget: found at Register,
// before anything computes.
type BudgetError struct {
	Block  string
	Bytes  int64
	Where  string // "device" or "host"
	Budget int64
}

func (e *BudgetError) Error() string {
	fix := "raise the budget or choose a plan that keeps this component on the host"
	if e.Where == "host" {
		fix = "raise --host-mem"
	}
	return fmt.Sprintf("block %s needs %s on the %s but the %s budget is %s: %s",
		e.Block, tensor.FormatBytes(e.Bytes), e.Where, e.Where, tensor.FormatBytes(e.Budget), fix)
}

func alignUp(n int64) int64 { return (n + 63) &^ 63 }

func (e *Executor) checkFits(cs *compState) error {
	capacity := e.dev.Stats().Capacity
	if cs.plan.Placement == Host {
		capacity = e.host.Stats().Capacity
	}
	if capacity <= 0 {
		return nil
	}
	for _, b := range cs.Blocks {
		if b.devBytes > capacity {
			where := "device"
			if cs.plan.Placement == Host {
				where = "host"
			}
			return &BudgetError{Block: b.Name, Bytes: b.devBytes, Where: where, Budget: capacity}
		}
	}
	return nil
}

// Ops returns the compute front end for a component: on the device, or on
// the host for a component placed there. The same Ops is returned each time.
func (e *Executor) Ops(component string) *tensor.Ops {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cs, ok := e.comps[component]; ok {
		return cs.ops
	}
	return tensor.NewOps(e.cfg.Backend)
}

// Blocks is the number of blocks a registered component declares.
func (e *Executor) Blocks(component string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cs, ok := e.comps[component]; ok {
		return len(cs.Blocks)
	}
	return 0
}

// Placement reports the plan for a registered component.
func (e *Executor) Placement(component string) ComponentPlan { return e.cfg.Plan.For(component) }

// Run makes b's weights ready, binds them, runs fn, and releases or
// prefetches as the plan says. fn's error is returned as is.
func (e *Executor) Run(b *Block, fn func() error) error {
	cs := b.comp
	if cs == nil {
		return fmt.Errorf("residency: block %s is not registered", b.Name)
	}
	if ctx := e.cfg.Context; ctx != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errClosed
	}
	e.current = cs
	switch cs.plan.Placement {
	case Onload:
		for _, x := range cs.Blocks {
			e.enqueue(x)
		}
	case Stream:
		e.enqueue(b)
		e.prefetch(b, cs.advance(b))
	default:
		e.enqueue(b)
	}
	waitFor := []*Block{b}
	if cs.plan.Placement == Onload {
		waitFor = cs.Blocks
	}
	e.mu.Unlock()

	for {
		if err := e.wait(b.Name, waitFor); err != nil {
			return err
		}
		e.mu.Lock()
		if loaded(waitFor) {
			break
		}
		// Another goroutine evicted a block between its load and now
		// (DemoteDevice, Invalidate): wait loads it again.
		e.mu.Unlock()
	}
	e.clock++
	b.inUse, b.lastUse = true, e.clock
	bind(b)
	e.mu.Unlock()

	end := e.cfg.Trace.Begin(trace.Compute, trace.TrackCompute, b.Name, 0)
	err := fn()
	end()
	if e.cfg.OnBlock != nil && err == nil {
		e.cfg.OnBlock(cs.Name, b.Name)
	}

	e.mu.Lock()
	unbind(b)
	b.inUse = false
	if cs.plan.Placement == Stream && !e.keeps(b) && !cs.runsNext(b) {
		e.evict(b)
	}
	e.mu.Unlock()
	return err
}

// keeps reports whether a streamed block stays on the device after use.
func (e *Executor) keeps(b *Block) bool {
	p := b.comp.plan
	return b.index < p.Persistent || p.Blocks[b.Name] == Resident
}

// prefetch queues the next Prefetch blocks after position pos of the
// component's order (wrapping around), skipping b itself and blocks that
// stay resident anyway. Caller holds e.mu.
func (e *Executor) prefetch(b *Block, pos int) {
	cs := b.comp
	skip := func(x *Block) bool { return x == b || (x.dev != nil && e.keeps(x)) }
	for _, x := range cs.aheadAcross(pos, cs.plan.Prefetch, skip) {
		e.enqueue(x)
	}
}

// enqueue asks the copy worker for x unless it is loaded or on its way.
// Caller holds e.mu.
func (e *Executor) enqueue(x *Block) {
	if x.ready != nil {
		return
	}
	x.ready = make(chan struct{})
	x.loadErr = nil
	if e.loading == nil && len(e.queue) == 0 {
		e.preallocate(x)
	}
	e.queue = append(e.queue, x)
	e.cond.Broadcast() // Done may be waiting on the same condition
}

// preallocate takes x's memory now, on the goroutine that queues it to an
// idle copy worker, before that goroutine allocates anything else: the
// planner replays the copy as starting (and allocating) at that moment,
// the compute buffer then the host-tier copy. A worker waking up to
// allocate would race the compute's own allocations for first-fit places
// in the arena (one order in a few reserved an extra segment), and the
// other frees the compute makes meanwhile: a host copy allocated after a
// retired expert freed its copies fits where the planner, which allocates
// it before, maps more. Memory that is not free yet is left to the
// worker, which allocates when it gets to the block, as it does for a
// busy queue. Caller holds e.mu.
func (e *Executor) preallocate(x *Block) {
	if x.devBytes == 0 {
		return
	}
	dev := e.dev
	if x.comp.plan.Placement == Host {
		dev = e.host
	}
	buf, err := tryAlloc(dev, x.devBytes, x.Name)
	if err != nil {
		return
	}
	x.prealloc = buf
	if x.comp.plan.FromHostCopy() && x.host == nil {
		x.preHost, _ = tryAlloc(e.host, x.rawBytes, x.Name+" (host copy)")
	}
}

// tryAlloc allocates on dev without reclaiming (the reclaimer, e.reclaim,
// takes e.mu, which preallocate holds); an error where it cannot.
func tryAlloc(dev tensor.Device, n int64, name string) (*tensor.Buffer, error) {
	try, ok := dev.(interface {
		TryAlloc(int64, string) (*tensor.Buffer, error)
	})
	if !ok {
		return nil, fmt.Errorf("residency: %s: no TryAlloc", name)
	}
	return try.TryAlloc(n, name)
}

// unqueue drops x from a cancelled queue: its waiters see errCancelled and
// memory taken for it is returned. Caller holds e.mu.
func unqueue(x *Block) {
	x.loadErr = errCancelled
	close(x.ready)
	x.ready = nil
	if x.prealloc != nil {
		x.prealloc.Free()
		x.prealloc = nil
	}
	if x.preHost != nil {
		x.preHost.Free()
		x.preHost = nil
	}
}

// loaded reports whether every block in bs is on the device. Caller holds
// e.mu.
func loaded(bs []*Block) bool {
	for _, x := range bs {
		if x.dev == nil {
			return false
		}
	}
	return true
}

// wait blocks until every block in bs is loaded, recording the stall. A
// block whose load was cancelled (Done) or that was evicted since Run
// queued it has no ready channel: it is queued again, since a receive
// from a nil channel would never return.
func (e *Executor) wait(name string, bs []*Block) error {
	var t0 time.Time
	stalled := false
	for _, x := range bs {
		e.mu.Lock()
		if x.ready == nil && !e.closed {
			e.enqueue(x)
		}
		ch := x.ready
		e.mu.Unlock()
		if ch == nil {
			return fmt.Errorf("load %s: %w", x.Name, errClosed)
		}
		select {
		case <-ch:
		default:
			if !stalled {
				stalled, t0 = true, time.Now()
			}
			<-ch
		}
		e.mu.Lock()
		err := x.loadErr
		if err != nil && x.ready == ch {
			x.ready = nil // a later Run may try again
		}
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("load %s: %w", x.Name, err)
		}
	}
	if stalled {
		d := time.Since(t0)
		e.mu.Lock()
		phase := e.phase
		e.stats.CopyWait += d
		e.addPhase(phase, d, 0, 0)
		e.mu.Unlock()
		e.traceWait(name, phase, d)
	}
	return nil
}

func bind(b *Block) {
	for i := range b.params {
		b.params[i].slot.Set(reflect.ValueOf(b.params[i].view))
	}
	for _, r := range b.rows {
		r.slot.Set(reflect.ValueOf(r.rows))
	}
}

func unbind(b *Block) {
	for i := range b.params {
		b.params[i].slot.Set(reflect.Zero(tensorPtr))
	}
	for _, r := range b.rows {
		r.slot.Set(reflect.Zero(rowsPtr))
	}
}

// countRead adds row reads to the disk statistics.
func (e *Executor) countRead(n int64) {
	e.mu.Lock()
	e.stats.BytesReadDisk += n
	e.mu.Unlock()
}

// evict frees b's device copy. Caller holds e.mu; b is loaded and idle.
func (e *Executor) evict(b *Block) {
	if b.dev == nil || b.inUse {
		return
	}
	b.dev.Free()
	b.dev, b.ready = nil, nil
	for i := range b.params {
		b.params[i].view = nil
	}
	e.stats.Evictions++
}

// reclaim is the device's out-of-memory hook: it evicts the least recently
// used onload component that is idle, which is what "moves out when another
// component needs the room" means.
func (e *Executor) reclaim(need int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	var victim *compState
	var victimUse uint64
	for _, cs := range e.order {
		if cs.plan.Placement != Onload || cs == e.current || (e.loading != nil && e.loading.comp == cs) {
			continue
		}
		use, loaded, busy := uint64(0), false, false
		for _, b := range cs.Blocks {
			loaded = loaded || b.dev != nil
			busy = busy || b.inUse || (b.ready != nil && b.dev == nil)
			use = max(use, b.lastUse)
		}
		if loaded && !busy && (victim == nil || use < victimUse) {
			victim, victimUse = cs, use
		}
	}
	if victim == nil {
		return false
	}
	for _, b := range victim.Blocks {
		e.evict(b)
	}
	return true
}

// Done says the pipeline will not run the component again in this request:
// queued prefetches are cancelled and streamed blocks leave the device.
// Resident and persistent blocks stay (that is what the plan asked), onload
// components stay until the room is needed.
func (e *Executor) Done(component string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cs, ok := e.comps[component]
	if !ok {
		return
	}
	kept := e.queue[:0]
	for _, x := range e.queue {
		if x.comp == cs {
			unqueue(x)
			continue
		}
		kept = append(kept, x)
	}
	e.queue = kept
	for e.loading != nil && e.loading.comp == cs {
		e.cond.Wait()
	}
	if cs.plan.Placement == Stream {
		for _, b := range cs.Blocks {
			if !e.keeps(b) {
				e.evict(b)
			}
		}
	}
	if e.current == cs {
		e.current = nil
	}
}

// Stats returns the measurements so far.
func (e *Executor) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	if s.Phases != nil {
		s.Phases = make(map[string]PhaseStats, len(e.stats.Phases))
		for k, v := range e.stats.Phases {
			s.Phases[k] = v
		}
	}
	return s
}

// Close stops the copy worker and frees every buffer the executor holds.
func (e *Executor) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	for _, x := range e.queue {
		unqueue(x)
	}
	e.queue = nil
	e.cond.Broadcast()
	e.mu.Unlock()
	<-e.done

	e.mu.Lock()
	defer e.mu.Unlock()
	for _, cs := range e.order {
		for _, b := range cs.Blocks {
			b.inUse = false
			e.evict(b)
			b.host.Free()
			b.host = nil
		}
	}
	e.staging.Free()
	e.staging = nil
}
