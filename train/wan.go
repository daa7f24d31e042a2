package train

import (
	"errors"
	"fmt"
	"slices"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/lora"
	"ferry/model/wan"
	"ferry/tensor"
)

// LoRAOptions say which Linears get adapters and how they start.
type LoRAOptions struct {
	Rank  int
	Alpha float64
	// Targets select modules by suffix (lora.Targets); nil means
	// lora.DefaultTargets.
	Targets []string
	// Init, when set, gives every selected module's A and B (--lora-init);
	// otherwise A is Kaiming-uniform from the RNG and B is zero, as PEFT
	// initialises them.
	Init []lora.Adapter
}

// WanOptions choose what a WanNet trains.
type WanOptions struct {
	// Full trains every parameter of the transformer (fp32 master
	// weights); otherwise LoRA adapters do.
	Full bool
	LoRA LoRAOptions
	// Residency, when set, puts the weights under an executor (frozen
	// base weights with LoRA; host-tier master weights with Full, see
	// zero.go); nil fixes them all on the device as float32.
	Residency *Residency
	// Train are the training pass's memory knobs (checkpointing, the saved
	// activations' dtype and where they wait: wan.TrainOptions). With
	// DType BF16 and no Residency, the fixed GEMM weights are kept bf16 on
	// the device too (autocast.go).
	Train wan.TrainOptions
}

// WanNet is a Wan transformer as a Net. Its weights live on the compute
// device as float32 and are bound by name (residency.Fixed); in full
// fine-tuning they are the parameters (their host masters are synced back
// after every update), with LoRA they are frozen and the adapters' A and B
// are the parameters.
type WanNet struct {
	model   *wan.Model
	ops     *tensor.Ops
	weights map[string]*tensor.Tensor
	full    bool
	lopt    LoRAOptions
	modules []string // LoRA: the adapted modules, sorted

	params []*Param
	dev    []*tensor.Tensor // device tensor of every parameter
	grads  []*tensor.Tensor // device gradient of every parameter
	// baseGrads are the gradients Backward fills by parameter name (full
	// fine-tuning; empty with LoRA).
	baseGrads map[string]*tensor.Tensor

	tape      *wan.Tape
	tapeStats wan.TapeStats  // the largest tape a Forward kept (autocast.go)
	context   *tensor.Tensor // borrowed by the tape until Backward
	predShape []int          // the shape of the tape's prediction

	res  *Residency // nil: the weights are fixed on the device
	zero *zeroState // full fine-tuning with host-tier master weights
}

// NewWanNet loads the transformer's weights from set as float32 onto ops'
// device and sets up what opt trains. rng initialises LoRA A matrices
// that opt.LoRA.Init does not give.
func NewWanNet(ops *tensor.Ops, cfg wan.Config, set *checkpoint.Set, opt WanOptions, rng *RNG) (*WanNet, error) {
	n := &WanNet{model: wan.New(cfg), ops: ops, weights: map[string]*tensor.Tensor{}, full: opt.Full,
		lopt: opt.LoRA, baseGrads: map[string]*tensor.Tensor{}, res: opt.Residency}
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	var err error
	switch {
	case n.res == nil:
		n.model.Component(ComponentName, nil)
		err = n.loadWeights(cfg, set)
	case opt.Full:
		err = n.setupZero(cfg, set)
	default:
		err = n.setupFrozen(cfg, set)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case opt.Full && n.zero != nil:
	case opt.Full:
		err = n.setupFull(cfg)
	default:
		err = n.setupLoRA(cfg, rng)
	}
	if err == nil {
		err = n.setupTraining(opt.Train)
	}
	if err != nil {
		return nil, err
	}
	ok = true
	return n, nil
}

// loadWeights uploads every parameter cfg lists, as float32.
func (n *WanNet) loadWeights(cfg wan.Config, set *checkpoint.Set) error {
	if err := checkShapes(cfg, set); err != nil {
		return err
	}
	for _, p := range cfg.Params() {
		info, _ := set.Lookup(p.Name)
		d, err := set.ReadF32(info)
		if err != nil {
			return err
		}
		t := n.ops.Upload(d, p.Shape...)
		if err := n.ops.Err(); err != nil {
			return fmt.Errorf("upload %s: %w", p.Name, err)
		}
		n.weights[p.Name] = t
		if n.full {
			n.params = append(n.params, &Param{Name: p.Name, Shape: slices.Clone(p.Shape), Data: d})
			n.dev = append(n.dev, t)
		}
	}
	return nil
}

// setupFull makes a zero gradient for every parameter.
func (n *WanNet) setupFull(cfg wan.Config) error {
	for _, p := range n.params {
		g := n.ops.Zeros(p.Shape...)
		n.grads = append(n.grads, g)
		n.baseGrads[p.Name] = g
	}
	return n.ops.Err()
}

// loraName is the tensor name of a module's A (or B) matrix, as PEFT
// names it: "<module>.lora_A.weight".
func loraName(module string, b bool) string {
	if b {
		return module + ".lora_B.weight"
	}
	return module + ".lora_A.weight"
}

// setupLoRA selects the modules, initialises A and B and attaches the
// adapters (with gradients) to the model.
func (n *WanNet) setupLoRA(cfg wan.Config, rng *RNG) error {
	o := n.lopt
	if o.Rank <= 0 {
		return fmt.Errorf("LoRA rank must be > 0, got %d", o.Rank)
	}
	if !(o.Alpha > 0) {
		return fmt.Errorf("LoRA alpha must be > 0, got %g", o.Alpha)
	}
	targets := o.Targets
	if targets == nil {
		targets = lora.DefaultTargets
	}
	names, shapes := cfg.LinearShapes()
	for _, t := range targets {
		if len(lora.Targets(names, []string{t})) == 0 {
			return fmt.Errorf("LoRA target %q selects no Linear of the transformer (module names look like blocks.0.attn1.to_q)", t)
		}
	}
	n.modules = lora.Targets(names, targets)
	init, err := n.initAdapters(shapes)
	if err != nil {
		return err
	}
	var ls []wan.LoRA
	for _, mod := range n.modules {
		s := shapes[mod]
		a := &Param{Name: loraName(mod, false), Shape: []int{o.Rank, s[1]}}
		b := &Param{Name: loraName(mod, true), Shape: []int{s[0], o.Rank}}
		if ad, ok := init[mod]; ok {
			a.Data, b.Data = slices.Clone(ad.A), slices.Clone(ad.B)
		} else {
			a.Data, b.Data = make([]float32, o.Rank*s[1]), make([]float32, s[0]*o.Rank)
			rng.KaimingUniform(a.Data, s[1])
		}
		l := wan.LoRA{Module: mod, Scale: float32(o.Alpha / float64(o.Rank))}
		l.A, l.B = n.ops.Zeros(a.Shape...), n.ops.Zeros(b.Shape...)
		l.GradA, l.GradB = n.ops.Zeros(a.Shape...), n.ops.Zeros(b.Shape...)
		n.params = append(n.params, a, b)
		n.dev = append(n.dev, l.A, l.B)
		n.grads = append(n.grads, l.GradA, l.GradB)
		ls = append(ls, l)
	}
	if err := n.ops.Err(); err != nil {
		return fmt.Errorf("LoRA adapters: %w", err)
	}
	return n.model.SetLoRA(ls)
}

// initAdapters checks --lora-init against the selected modules: each must
// have an adapter of the run's rank, and the file must hold no other.
func (n *WanNet) initAdapters(shapes map[string][2]int) (map[string]lora.Adapter, error) {
	if n.lopt.Init == nil {
		return nil, nil
	}
	if err := lora.Check(n.lopt.Init, shapes); err != nil {
		return nil, fmt.Errorf("LoRA init: %w", err)
	}
	init := map[string]lora.Adapter{}
	for _, a := range n.lopt.Init {
		if a.Rank != n.lopt.Rank {
			return nil, fmt.Errorf("LoRA init: %s has rank %d, the run trains rank %d (set --lora-rank %d)", a.Module, a.Rank, n.lopt.Rank, a.Rank)
		}
		if !slices.Contains(n.modules, a.Module) {
			return nil, fmt.Errorf("LoRA init: %s is not among the modules the LoRA targets select", a.Module)
		}
		init[a.Module] = a
	}
	for _, m := range n.modules {
		if _, ok := init[m]; !ok {
			return nil, fmt.Errorf("LoRA init: no adapter for %s, which the targets select", m)
		}
	}
	return init, nil
}

// Params are the trainable parameters: every transformer weight in
// Config.Params order (full), or each adapted module's A and B in module
// order (LoRA).
func (n *WanNet) Params() []*Param { return n.params }

// Config is the transformer's configuration.
func (n *WanNet) Config() wan.Config { return n.model.Config() }

// Sync uploads the parameters' host values into their device tensors.
func (n *WanNet) Sync() error {
	if n.zero != nil {
		n.zero.invalidateAll() // the executor loads them from the masters
		return nil
	}
	for i, p := range n.params {
		if err := n.ops.B.Upload(n.dev[i], f32Bytes(p.Data), dtype.F32); err != nil {
			return fmt.Errorf("sync %s: %w", p.Name, err)
		}
	}
	return nil
}

// Forward runs the transformer's training forward and keeps its tape.
func (n *WanNet) Forward(xt []float32, shape []int, timesteps []float32, context []float32, ctxShape []int) ([]float32, error) {
	if n.tape != nil {
		return nil, errors.New("wan net: Forward twice without Backward")
	}
	x := n.ops.Upload(xt, shape...)
	c := n.ops.Upload(context, ctxShape...)
	defer x.Free()
	if err := n.ops.Err(); err != nil {
		c.Free()
		return nil, err
	}
	r, done, err := n.runner(PhaseForward)
	if err != nil {
		c.Free()
		return nil, err
	}
	pred, tape, err := n.model.ForwardTrain(r, n.ops, x, timesteps, c)
	done()
	if err != nil {
		c.Free()
		return nil, err
	}
	n.noteTape(tape)
	out := n.ops.Download(pred)
	n.predShape = slices.Clone(pred.Shape())
	pred.Free()
	if err := n.ops.Err(); err != nil {
		tape.Free()
		c.Free()
		return nil, err
	}
	n.tape, n.context = tape, c
	return out, nil
}

// Backward runs the transformer's backward from dpred, accumulating into
// the parameters' device gradients.
func (n *WanNet) Backward(dpred []float32) error {
	if n.tape == nil {
		return errors.New("wan net: Backward without Forward")
	}
	tape, c := n.tape, n.context
	n.tape, n.context = nil, nil
	defer c.Free()
	defer tape.Free()
	d := n.ops.Upload(dpred, n.predShape...)
	defer d.Free()
	if err := n.ops.Err(); err != nil {
		return err
	}
	r, done, err := n.runner(PhaseBackward)
	if err != nil {
		return err
	}
	defer done()
	return n.model.Backward(r, n.ops, tape, d, n.baseGrads)
}

// TakeGrads downloads the accumulated gradients and zeroes them.
func (n *WanNet) TakeGrads(dst [][]float32) error {
	if n.zero != nil {
		return n.zero.takeGrads(dst)
	}
	if err := checkGrads(n.params, dst); err != nil {
		return err
	}
	for i, g := range n.grads {
		if err := n.ops.B.Download(dst[i], g); err != nil {
			return fmt.Errorf("gradient of %s: %w", n.params[i].Name, err)
		}
		if err := n.ops.B.Fill(g, 0); err != nil {
			return fmt.Errorf("gradient of %s: %w", n.params[i].Name, err)
		}
	}
	return nil
}

// Adapters returns the LoRA adapters with values (one per parameter, as
// Params orders them: the parameters' own Data, or an EMA's).
func (n *WanNet) Adapters(values [][]float32) ([]lora.Adapter, error) {
	if n.full {
		return nil, errors.New("wan net: full fine-tuning has no adapters")
	}
	if len(values) != len(n.params) {
		return nil, fmt.Errorf("wan net: %d value slices for %d parameters", len(values), len(n.params))
	}
	out := make([]lora.Adapter, len(n.modules))
	for i, mod := range n.modules {
		a, b := n.params[2*i], n.params[2*i+1]
		out[i] = lora.Adapter{Module: mod, A: values[2*i], B: values[2*i+1], Rank: a.Shape[0], In: a.Shape[1],
			Out: b.Shape[0], Alpha: float32(n.lopt.Alpha)}
	}
	return out, nil
}

// Close frees every device tensor the net holds.
func (n *WanNet) Close() {
	if n.tape != nil {
		n.tape.Free()
		n.context.Free()
		n.tape, n.context = nil, nil
	}
	for _, t := range n.weights {
		t.Free()
	}
	if !n.full {
		tensor.Free(n.dev...)
	}
	tensor.Free(n.grads...)
	if n.zero != nil {
		n.zero.close()
		n.zero = nil
	}
	n.weights, n.dev, n.grads, n.baseGrads = nil, nil, nil, nil
}
