package train

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/wan"
	"ferry/residency"
	"ferry/tensor"
	"ferry/trace"
)

// Residency puts the transformer's weights under a residency executor, as
// inference does, instead of fixing them all on the device as float32.
// With LoRA the frozen base weights are residency blocks read from the
// checkpoint under the executor's plan (resident, onload, streamed from
// the host or the disk tier). In full fine-tuning the float32 master
// weights, AdamW's moments and the gradients live in the host tier (Host),
// the device holds each block's working copy only while the plan says, and
// each block is updated on the host while the device computes the next
// blocks' backward (ZeRO-Offload's division of work, see zero.go).
type Residency struct {
	// Exec must be Dense (the backward kernels refuse packed matrices);
	// its plan's "transformer" entry places the weights. Its MatrixDType
	// may be BF16: the frozen (LoRA) or working (full) GEMM weights then
	// stay bf16 on the device, which the backward widens for dx.
	Exec *residency.Executor
	// Host is the host tier: full fine-tuning's master weights, moments
	// and gradients are allocated there, under its budget.
	Host tensor.Device
	// Trace, when set, gets a phase span for every forward and backward.
	Trace *trace.Recorder
}

// ComponentName is the residency component of the transformer's weights:
// plans place it under this name.
const ComponentName = "transformer"

// The executor phases a training step runs in (Stats.Phases keys).
const (
	PhaseForward  = "forward"
	PhaseBackward = "backward"
)

// MasterPlan is plan as full fine-tuning with host-tier master weights
// runs it: a transformer that moves (stream, onload) reads its working
// copies from the master copy, which AdamW changes every step, at every
// load (tier disk: "from the source"), never from a second host copy that
// would go stale. Other plans are returned as they are.
func MasterPlan(plan *residency.Plan) *residency.Plan {
	cp := plan.For(ComponentName)
	if !cp.FromHostCopy() {
		return plan
	}
	c := *plan
	c.Components = make(map[string]residency.ComponentPlan, len(plan.Components))
	for k, v := range plan.Components {
		c.Components[k] = v
	}
	cp.Tier = residency.TierDisk
	c.Components[ComponentName] = cp
	return &c
}

// checkShapes verifies that set holds every parameter cfg lists with the
// shape the config implies.
func checkShapes(cfg wan.Config, set *checkpoint.Set) error {
	for _, p := range cfg.Params() {
		info, ok := set.Lookup(p.Name)
		if !ok {
			return fmt.Errorf("transformer weights %s: no tensor %q (is this a Wan 2.1 transformer of this config?)", set.Path(), p.Name)
		}
		if !slices.Equal(info.Shape, p.Shape) {
			return fmt.Errorf("transformer weights %s: %s is %v, the config implies %v", set.Path(), p.Name, info.Shape, p.Shape)
		}
	}
	return nil
}

// setupFrozen registers the base weights, read from the checkpoint, with
// the executor (LoRA).
func (n *WanNet) setupFrozen(cfg wan.Config, set *checkpoint.Set) error {
	if err := checkShapes(cfg, set); err != nil {
		return err
	}
	comp := n.model.Component(ComponentName, residency.SourceOf(set))
	comp.Order = residency.TrainingOrder(len(comp.Blocks))
	return n.res.Exec.Register(comp)
}

// runner is what the model runs its blocks through for a phase, and what
// to call when the phase is over.
func (n *WanNet) runner(phase string) (residency.Runner, func(), error) {
	if n.res == nil {
		return residency.Fixed{Tensors: n.weights}, func() {}, nil
	}
	ex := n.res.Exec
	ex.SetPhase(phase)
	end := n.res.Trace.Begin(trace.Phase, trace.TrackPhase, phase, 0)
	// The phase stays current after the pass, so that a copy between
	// passes (the next pass's first blocks, prefetched) counts in it.
	done := func() { end() }
	if n.zero != nil && phase == PhaseBackward {
		r, err := n.zero.backwardRunner(n.ops, n.baseGrads)
		if err != nil {
			done()
			return nil, nil, err
		}
		return r, func() { r.release(); done() }, nil
	}
	return ex, done, nil
}

// masterSource serves the host master weights to the executor as a
// checkpoint would. A block whose update is pending (its backward has run
// in the step's last micro-batch, AdamW has not finished with it) cannot
// be read: a read waits, so that no load ever sees half-updated weights.
type masterSource struct {
	mu      sync.Mutex
	cond    *sync.Cond
	tensors map[string]masterTensor
	pending []bool // by block
	closed  bool
}

type masterTensor struct {
	block int
	shape []int
	data  []float32
}

func newMasterSource(blocks int) *masterSource {
	s := &masterSource{tensors: map[string]masterTensor{}, pending: make([]bool, blocks)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Info implements residency.Source: every master tensor is float32.
func (s *masterSource) Info(name string) (residency.TensorInfo, bool) {
	t, ok := s.tensors[name]
	if !ok {
		return residency.TensorInfo{}, false
	}
	return residency.TensorInfo{DType: dtype.F32, Shape: t.shape, Size: 4 * int64(len(t.data))}, true
}

// Read implements residency.Source, waiting while the tensor's block is
// being updated.
func (s *masterSource) Read(name string, off int64, dst []byte) error {
	t, ok := s.tensors[name]
	if !ok {
		return fmt.Errorf("master weights: no tensor %q", name)
	}
	s.mu.Lock()
	for s.pending[t.block] && !s.closed {
		s.cond.Wait()
	}
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errors.New("master weights: closed")
	}
	raw := f32Bytes(t.data)
	if off < 0 || off+int64(len(dst)) > int64(len(raw)) {
		return fmt.Errorf("master weights: read of %s [%d, %d) outside its %d bytes", name, off, off+int64(len(dst)), len(raw))
	}
	copy(dst, raw[off:])
	return nil
}

// Drop implements residency.Source: host memory has no page cache.
func (s *masterSource) Drop(string) {}

// setPending marks a block as being updated (reads wait) or done.
func (s *masterSource) setPending(block int, p bool) {
	s.mu.Lock()
	s.pending[block] = p
	s.cond.Broadcast()
	s.mu.Unlock()
}

// close releases every waiting read (with an error) and all later ones.
func (s *masterSource) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
}
