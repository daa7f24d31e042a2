package wan

import (
	"errors"
	"fmt"
	"math"

	"ferry/residency"
	"ferry/tensor"
)

// The training pass: ForwardTrain runs the forward like Forward and keeps,
// stage by stage (the embed block, each transformer block, the out block),
// what Backward needs; Backward (backward.go) walks the stages in reverse.
//
// Each block's tape holds the block's input apart from the activations it
// saved, and layerTrain recomputes a block from its input alone, so that a
// block may drop its activations (activation checkpointing) or move them to
// the host and have them back for its backward. What a block saves is what
// a cheap recomputation cannot give back: the outputs of GEMMs and
// attention. LayerNorm outputs, modulations, the residual after the
// self-attention, the q and k normalisations and rotations and the FFN's
// GELU are recomputed in the backward (elementwise work, a few percent of
// a block's time). At 1280 tokens a 1.3B block saves about 131 MB per
// sample: ten [L, dim] tensors, the FFN's [L, ffn_dim] pre-activation and
// the cross-attention's text-length keys and values.
//
// Model.Train (trainopts.go) says how much of that a block keeps after its
// forward (activation checkpointing), in which dtype, and where it waits
// for the backward (an ActivationStore).
//
// Options.FFNChunk is ignored by the training pass: the backward needs the
// FFN's whole intermediate anyway (its pre-activation is saved).

// Tape is what ForwardTrain keeps for Backward. Free it when done (Backward
// frees what it has used as it goes, and the rest when it returns).
type Tape struct {
	m *Model
	// p holds what every stage shares: the RoPE tables, the time embedding,
	// the modulation input and the projected text (p.hidden is unused).
	p       pass
	context *tensor.Tensor // borrowed from the caller, for the text embedder's gradients
	textLen int            // context's length
	pred    []int          // the prediction's shape, for Backward's dpred
	embed   *embedSaved
	layers  []layerTape
	out     outTape
	used    bool // Backward ran (or started) on it
	// store holds the blocks whose stored flag is set (Model.Train.Store
	// when ForwardTrain ran); stats are what each block kept and
	// deviceBytes what the tape held on the device after the forward.
	store       ActivationStore
	stored      []bool
	stats       []BlockTape
	deviceBytes int64
}

// layerTape is one transformer block's part of the tape: its input and the
// activations its backward reads (nil once used or dropped; layerTrain can
// compute them again from in).
type layerTape struct {
	in    *tensor.Tensor
	saved *layerSaved
}

// outTape is the out block's part: its input (the last block's output) and
// the modulation it applied.
type outTape struct {
	in    *tensor.Tensor
	saved *outSaved
}

// embedSaved is what the embed block's backward reads besides the tape's
// shared tensors and the borrowed context.
type embedSaved struct {
	patches *tensor.Tensor // patch embedding input [B, L, C·pt·ph·pw]
	freq    *tensor.Tensor // timestep sinusoid [B, freq_dim]
	t1      *tensor.Tensor // time_embedder.linear_1 output before SiLU [B, dim]
	t1Act   *tensor.Tensor // its SiLU: linear_2's input
	tembAct *tensor.Tensor // SiLU(temb): time_proj's input
	u       *tensor.Tensor // text_embedder.linear_1 output before GELU [B, Ltext, dim]
	// Each Linear's adapters' x·Aᵀ (see projectTrain).
	time1Low, time2Low, projLow, text1Low, text2Low []*tensor.Tensor
}

func (s *embedSaved) tensors() []*tensor.Tensor {
	if s == nil {
		return nil
	}
	ts := []*tensor.Tensor{s.patches, s.freq, s.t1, s.t1Act, s.tembAct, s.u}
	for _, l := range [][]*tensor.Tensor{s.time1Low, s.time2Low, s.projLow, s.text1Low, s.text2Low} {
		ts = append(ts, l...)
	}
	return ts
}

// attnSaved is what one attention's backward reads besides its inputs.
type attnSaved struct {
	qPre, kPre *tensor.Tensor // q and k projections before the RMSNorm [B, L, dim]
	v          *tensor.Tensor // [B, Lk, heads, head_dim]
	o, lse     *tensor.Tensor // attention output [B, L, heads, head_dim] and its log-sum-exp [B, heads, L]
	// Each projection's adapters' x·Aᵀ.
	qLow, kLow, vLow, oLow []*tensor.Tensor
}

func (s *attnSaved) tensors() []*tensor.Tensor { return deref(s.ptrs()) }

// layerSaved is what one transformer block's backward reads besides its
// input.
type layerSaved struct {
	// mod is scale_shift_table + mods split in six [B, 1, dim]: shift,
	// 1+scale, gate of the self-attention, then of the feed-forward.
	mod          [6]*tensor.Tensor
	attn1, attn2 *attnSaved
	a            *tensor.Tensor // self-attention output (the gate's other factor)
	h2           *tensor.Tensor // hidden after the cross-attention: norm3's input
	f1           *tensor.Tensor // ffn.net.0.proj output before GELU [B, L, ffn_dim]
	y            *tensor.Tensor // ffn.net.2 output (the feed-forward gate's other factor)
	ff1Low       []*tensor.Tensor
	ff2Low       []*tensor.Tensor
}

func (s *layerSaved) tensors() []*tensor.Tensor { return deref(s.ptrs()) }

// outSaved is the out block's modulation, shift and 1+scale [B, 1, dim],
// and proj_out's adapters' x·Aᵀ.
type outSaved struct {
	shift, opsc *tensor.Tensor
	low         []*tensor.Tensor
}

func (s *outSaved) tensors() []*tensor.Tensor {
	if s == nil {
		return nil
	}
	return append([]*tensor.Tensor{s.shift, s.opsc}, s.low...)
}

// tensors lists everything the tape holds (each once).
func (t *Tape) tensors() []*tensor.Tensor {
	ts := []*tensor.Tensor{t.p.temb, t.p.mods, t.p.text, t.p.cos, t.p.sin, t.out.in}
	ts = append(ts, t.embed.tensors()...)
	for _, l := range t.layers {
		ts = append(ts, l.in)
		ts = append(ts, l.saved.tensors()...)
	}
	return append(ts, t.out.saved.tensors()...)
}

// Free releases everything the tape holds; the tape cannot be used after.
// Safe on nil and more than once.
func (t *Tape) Free() {
	if t == nil {
		return
	}
	for i := range t.stored {
		if t.stored[i] {
			t.stored[i] = false
			t.store.Release(i)
		}
	}
	tensor.Free(t.tensors()...)
	t.p = pass{}
	t.embed = nil
	for i := range t.layers {
		t.layers[i] = layerTape{}
	}
	t.out = outTape{}
	t.context = nil
	t.used = true
}

// Bytes is the device memory the tape holds now (what it gave an
// ActivationStore not counted).
func (t *Tape) Bytes() int64 {
	if t == nil {
		return 0
	}
	return bytesOf(t.tensors())
}

// layerBytes is the part of Bytes the transformer blocks hold (their
// inputs and kept activations).
func (t *Tape) layerBytes() int64 {
	if t == nil {
		return 0
	}
	var n int64
	for i := range t.layers {
		n += bytesOf(deref(t.layers[i].ptrs(true)))
	}
	return n
}

// free releases a block's tape.
func (l *layerTape) free() {
	tensor.Free(l.in)
	tensor.Free(l.saved.tensors()...)
	*l = layerTape{}
}

// ForwardTrain runs the forward like Forward and keeps, per block, what
// Backward needs. The prediction [B, out_channels, F, H, W] is the
// caller's to free, and so is the tape (Free). The tape borrows context:
// keep it alive and unchanged until Backward has returned (latents are
// not needed after ForwardTrain).
func (m *Model) ForwardTrain(r residency.Runner, ops *tensor.Ops, latents *tensor.Tensor, timesteps []float32, context *tensor.Tensor) (pred *tensor.Tensor, tape *Tape, err error) {
	if err := m.cfg.Trainable(); err != nil {
		return nil, nil, err
	}
	if m.comp == nil {
		return nil, nil, errors.New("wan: Component must be declared before ForwardTrain")
	}
	if err := ops.Err(); err != nil {
		return nil, nil, fmt.Errorf("wan: ops already failed: %w", err)
	}
	if err := m.checkInputs(latents, timesteps, context); err != nil {
		return nil, nil, err
	}
	if err := m.Train.check(); err != nil {
		return nil, nil, err
	}
	s := latents.Shape()
	grid, err := m.cfg.newRopeGrid(s[2], s[3], s[4])
	if err != nil {
		return nil, nil, err
	}
	t := &Tape{
		m: m, p: pass{batch: s[0], tokens: grid.tokens(), grid: grid}, context: context, textLen: context.Dim(1),
		pred: append([]int{s[0], m.cfg.OutChannels}, s[2:]...),
	}
	t.initLayers()
	defer func() {
		if err != nil {
			pred.Free()
			t.Free()
			pred, tape = nil, nil
		}
	}()
	t.p.uploadRope(ops, m.cfg.AttentionHeadDim)

	blocks := m.comp.Blocks
	var h *tensor.Tensor
	err = runBlock(r, ops, blocks[0], func() {
		t.embed = &embedSaved{}
		h = m.embedTrain(ops, &t.p, t.embed, latents, timesteps, context)
	})
	if err != nil {
		h.Free()
		return nil, nil, err
	}
	for i := range m.layers {
		lt := &t.layers[i]
		lt.in = h
		err = runBlock(r, ops, blocks[1+i], func() { h, lt.saved = m.layerTrain(ops, &m.layers[i], &t.p, lt.in, nil) })
		if err == nil {
			if serr := t.stash(ops, i, true); serr != nil {
				err = fmt.Errorf("wan: %s: %w", blocks[1+i].Name, serr)
			}
		}
		if err != nil {
			h.Free()
			return nil, nil, err
		}
	}
	t.out.in = h
	err = runBlock(r, ops, blocks[len(blocks)-1], func() { pred, t.out.saved = m.outTrain(ops, &t.p, h) })
	if err != nil {
		return nil, nil, err
	}
	t.deviceBytes = t.Bytes()
	return pred, t, nil
}

// initLayers sizes the tape's per-block state and takes the model's
// activation store.
func (t *Tape) initLayers() {
	n := len(t.m.layers)
	t.layers, t.stored, t.stats = make([]layerTape, n), make([]bool, n), make([]BlockTape, n)
	t.store = t.m.Train.Store
}

// runBlock runs fn with b's weights bound and reports ops' first error.
func runBlock(r residency.Runner, ops *tensor.Ops, b *residency.Block, fn func()) error {
	err := r.Run(b, func() error { fn(); return ops.Err() })
	if err != nil {
		return fmt.Errorf("wan: %s: %w", b.Name, err)
	}
	return nil
}

// projectTrain is project keeping, for the backward, each adapter's x·Aᵀ
// (rank-sized: a few bytes per token). The adapters' products are added a
// block of rows at a time (see byRows).
func projectTrain(ops *tensor.Ops, x *tensor.Tensor, l linear) (*tensor.Tensor, []*tensor.Tensor) {
	y := ops.Linear(x, l.W, l.B)
	var lows []*tensor.Tensor
	for _, a := range l.lora {
		if a.Bias != nil {
			ops.AddInPlace(y, a.Bias)
		}
		if a.A == nil {
			lows = append(lows, nil) // a bias alone: nothing for the backward
			continue
		}
		low := ops.Linear(x, a.A, nil)
		byRows(ops, y.Dim(-1), func(r []*tensor.Tensor) {
			up := ops.Linear(r[1], a.B, nil)
			if a.Scale != 1 {
				ops.AffineInPlace(up, a.Scale, 0)
			}
			ops.AddInPlace(r[0], up)
			up.Free()
		}, y, low)
		lows = append(lows, low)
	}
	return y, lows
}

// rowBlockBytes is the size of the row blocks byRows works in (tests make
// it small to cut their tiny tensors in several blocks).
var rowBlockBytes = 4 << 20

// RowBlockBytes is the size of the row blocks a LoRA adapter's product is
// added in (the planner replays them).
func RowBlockBytes() int { return rowBlockBytes }

// byRows calls fn on views of the same block of rows of every tensor in
// ts (each seen as [rows, last dim]; they have the same rows), a few MB of
// width-wide rows at a time: an adapter's product, added into a Linear's
// output or input gradient, then never takes a second tensor of that size
// (at 32760 tokens an FFN's [L, ffn_dim] is 1.2 GB).
func byRows(ops *tensor.Ops, width int, fn func([]*tensor.Tensor), ts ...*tensor.Tensor) {
	rows := ts[0].Len() / max(ts[0].Dim(-1), 1)
	flat := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		flat[i] = view(ops, t, rows, t.Dim(-1))
	}
	step := max(1, rowBlockBytes/(4*max(width, 1)))
	part := make([]*tensor.Tensor, len(ts))
	for start := 0; start < rows && ops.Err() == nil; start += step {
		n := min(step, rows-start)
		for i, t := range flat {
			v, err := t.Rows(start, n)
			if err != nil {
				ops.Fail(err)
				return
			}
			part[i] = v
		}
		fn(part)
	}
}

// embedTrain is embedForward keeping what its backward reads in s; it sets
// p.temb, p.mods and p.text and returns the patch embedding, the first
// block's input.
func (m *Model) embedTrain(ops *tensor.Ops, p *pass, s *embedSaved, latents *tensor.Tensor, timesteps []float32, context *tensor.Tensor) *tensor.Tensor {
	c, w, dim := m.cfg, &m.embed, m.cfg.InnerDim()
	s.patches = m.patchify(ops, latents)
	h := ops.Linear(s.patches, view(ops, w.Patch.W, dim, -1), w.Patch.B)

	s.freq = ops.Upload(timestepEmbedding(timesteps, c.FreqDim), p.batch, c.FreqDim)
	s.t1, s.time1Low = projectTrain(ops, s.freq, w.Time1)
	s.t1Act = ops.Unary(s.t1, tensor.SiLU)
	p.temb, s.time2Low = projectTrain(ops, s.t1Act, w.Time2)
	s.tembAct = ops.Unary(p.temb, tensor.SiLU)
	p.mods, s.projLow = projectTrain(ops, s.tembAct, w.TimeProj)
	reshape(ops, p.mods, p.batch, 6, dim)

	s.u, s.text1Low = projectTrain(ops, context, w.Text1)
	g := ops.Unary(s.u, tensor.GELUTanh)
	p.text, s.text2Low = projectTrain(ops, g, w.Text2)
	g.Free()
	return h
}

// blockMods is (scale_shift_table + mods) in six [B, 1, dim] parts, with
// 1 added to the two scales (as layerForward computes them).
func blockMods(ops *tensor.Ops, mods, table *tensor.Tensor) [6]*tensor.Tensor {
	sum := ops.Add(mods, table)
	parts := ops.Split(sum, 1, 1, 1, 1, 1, 1, 1)
	sum.Free()
	ops.AffineInPlace(parts[1], 1, 1)
	ops.AffineInPlace(parts[4], 1, 1)
	return [6]*tensor.Tensor(parts)
}

// layerTrain is layerForward from the block input in (which it leaves
// alone) without FFN chunking, keeping what its backward reads; it returns
// the block's output. It depends on nothing but in, the weights and p's
// shared tensors, so a backward may run it again from in. kept, when not
// nil, is the self-attention's output and log-sum-exp a previous run
// computed (selective checkpointing): they are taken over, not computed.
func (m *Model) layerTrain(ops *tensor.Ops, l *layerWeights, p *pass, in *tensor.Tensor, kept *attnSaved) (*tensor.Tensor, *layerSaved) {
	c, eps := &l.Core, float32(m.cfg.Eps)
	s := &layerSaved{mod: blockMods(ops, p.mods, c.Table)}

	// Self-attention on norm1(h)·(1+scale)+shift, gated into the residual.
	x1 := modulate(ops, in, s.mod[0], s.mod[1], eps)
	s.a, s.attn1 = m.attnTrain(ops, &c.Attn1, x1, x1, p, true, kept)
	x1.Free()
	h1 := afterSelfAttention(ops, in, s)

	// Cross-attention on norm2(h) (nn.Identity without cross_attn_norm).
	x2 := h1
	if m.cfg.CrossAttnNorm {
		x2 = ops.LayerNorm(h1, l.Norm2.W, l.Norm2.B, eps)
	}
	a2, attn2 := m.attnTrain(ops, &c.Attn2, x2, p.text, p, false, nil)
	s.attn2 = attn2
	if x2 != h1 {
		x2.Free()
	}
	s.h2 = ops.Add(h1, a2)
	tensor.Free(h1, a2)

	// Feed-forward on norm3(h)·(1+c_scale)+c_shift, gated.
	x3 := modulate(ops, s.h2, s.mod[3], s.mod[4], eps)
	s.f1, s.ff1Low = projectTrain(ops, x3, c.FF1)
	x3.Free()
	g := ops.Unary(s.f1, tensor.GELUTanh)
	s.y, s.ff2Low = projectTrain(ops, g, c.FF2)
	g.Free()
	out := ops.Mul(s.y, s.mod[5])
	ops.AddInPlace(out, s.h2)
	return out, s
}

// afterSelfAttention is the hidden states after the gated self-attention,
// in + a·gate, from the block's input and its saved self-attention output:
// the forward computes it this way and the backward again, the same.
func afterSelfAttention(ops *tensor.Ops, in *tensor.Tensor, s *layerSaved) *tensor.Tensor {
	h1 := ops.Mul(s.a, s.mod[2])
	ops.AddInPlace(h1, in)
	return h1
}

// attnTrain is an attention (self: q, k, v from x with RoPE; cross: k and
// v from kv, no RoPE) keeping what its backward reads. It returns the
// output projection's result. With kept (its o and lse) the attention
// itself does not run again: its inputs' projections do, for the backward.
func (m *Model) attnTrain(ops *tensor.Ops, w *attention, x, kv *tensor.Tensor, p *pass, self bool, kept *attnSaved) (*tensor.Tensor, *attnSaved) {
	s := &attnSaved{}
	s.qPre, s.qLow = projectTrain(ops, x, w.Q)
	s.kPre, s.kLow = projectTrain(ops, kv, w.K)
	s.v, s.vLow = projectTrain(ops, kv, w.V)
	reshape(ops, s.v, kv.Dim(0), kv.Dim(1), m.cfg.NumAttentionHeads, m.cfg.AttentionHeadDim)
	if kept != nil && kept.o != nil {
		s.o, s.lse = kept.o, kept.lse
	} else {
		q := m.qkHeads(ops, s.qPre, w.NormQ, p, self)
		k := m.qkHeads(ops, s.kPre, w.NormK, p, self)
		s.o, s.lse = ops.AttentionLSE(q, k, s.v, m.attnScale())
		tensor.Free(q, k)
	}
	a, oLow := projectTrain(ops, view(ops, s.o, x.Dim(0), x.Dim(1), m.cfg.InnerDim()), w.Out)
	s.oLow = oLow
	return a, s
}

// attnScale is SDPA's default scale, 1/√head_dim.
func (m *Model) attnScale() float32 {
	return float32(1 / math.Sqrt(float64(m.cfg.AttentionHeadDim)))
}

// qkHeads is the RMSNorm across heads of a q or k projection pre [B, L,
// dim], split into heads [B, L, heads, head_dim] and, with rope, rotated
// by p's tables: the attention's q or k, in a new tensor.
func (m *Model) qkHeads(ops *tensor.Ops, pre, norm *tensor.Tensor, p *pass, rope bool) *tensor.Tensor {
	n := ops.RMSNorm(pre, norm, float32(m.cfg.Eps))
	reshape(ops, n, pre.Dim(0), pre.Dim(1), m.cfg.NumAttentionHeads, m.cfg.AttentionHeadDim)
	if !rope {
		return n
	}
	r := ops.Rope(n, p.cos, p.sin)
	n.Free()
	return r
}

// outMods is (scale_shift_table + temb) split in shift and 1+scale,
// [B, 1, dim] each.
func (m *Model) outMods(ops *tensor.Ops, p *pass) (shift, opsc *tensor.Tensor) {
	sum := ops.Add(view(ops, p.temb, p.batch, 1, m.cfg.InnerDim()), m.out.Table)
	parts := ops.Split(sum, 1, 1, 1)
	sum.Free()
	ops.AffineInPlace(parts[1], 1, 1)
	return parts[0], parts[1]
}

// outTrain is outForward keeping what its backward reads; in stays the
// caller's (the tape's).
func (m *Model) outTrain(ops *tensor.Ops, p *pass, in *tensor.Tensor) (*tensor.Tensor, *outSaved) {
	s := &outSaved{}
	s.shift, s.opsc = m.outMods(ops, p)
	x := modulate(ops, in, s.shift, s.opsc, float32(m.cfg.Eps))
	y, low := projectTrain(ops, x, m.out.Proj)
	s.low = low
	x.Free()
	return m.unpatchify(ops, y, p), s
}

// TrainBlock times a training step of transformer block i alone, for
// benchmarks (train_bench_test.go, bench/): the block's training forward
// from hidden [B, L, dim] with the modulation input mods [B, 6, dim] and
// the projected text [B, Ltext, dim], RoPE over the token grid of a
// latent of latent = (frames, height, width) before patching, then its
// backward from dout, the gradient of the block's output. It returns the
// gradient of hidden and accumulates the block's parameter gradients into
// grads (names as in Backward) and its adapters', and the gradients of
// mods and text into dmods and dtext when they are not nil. hidden, mods,
// text and dout stay the caller's.
func (m *Model) TrainBlock(r residency.Runner, ops *tensor.Ops, i int, latent [3]int, hidden, mods, text, dout *tensor.Tensor,
	grads map[string]*tensor.Tensor, dmods, dtext *tensor.Tensor) (*tensor.Tensor, error) {
	if err := m.cfg.Trainable(); err != nil {
		return nil, err
	}
	if m.comp == nil {
		return nil, errors.New("wan: Component must be declared before TrainBlock")
	}
	if i < 0 || i >= len(m.layers) {
		return nil, fmt.Errorf("wan: TrainBlock: no block %d (the model has %d)", i, len(m.layers))
	}
	if err := m.checkGrads(grads); err != nil {
		return nil, err
	}
	grid, err := m.cfg.newRopeGrid(latent[0], latent[1], latent[2])
	if err != nil {
		return nil, err
	}
	if hidden == nil || hidden.Rank() != 3 || hidden.Dim(1) != grid.tokens() {
		return nil, fmt.Errorf("wan: TrainBlock: hidden %v, want [B, %d, %d]", hidden, grid.tokens(), m.cfg.InnerDim())
	}
	if err := m.Train.check(); err != nil {
		return nil, err
	}
	t := &Tape{m: m, p: pass{batch: hidden.Dim(0), tokens: grid.tokens(), grid: grid, mods: mods, text: text}}
	t.initLayers()
	t.p.uploadRope(ops, m.cfg.AttentionHeadDim)
	lt := &t.layers[i]
	lt.in = hidden
	defer func() {
		tensor.Free(t.p.cos, t.p.sin)
		if t.stored[i] {
			t.store.Release(i)
		}
		tensor.Free(lt.saved.tensors()...)
	}()
	b := &bwd{m: m, ops: ops, t: t, grads: grads, dmods: dmods, dtext: dtext}
	block, l := m.comp.Blocks[1+i], &m.layers[i]
	err = runBlock(r, ops, block, func() {
		var out *tensor.Tensor
		out, lt.saved = m.layerTrain(ops, l, &t.p, hidden, nil)
		out.Free()
	})
	if err == nil {
		err = t.stash(ops, i, false)
	}
	if err == nil {
		err = t.unstash(ops, i, false)
	}
	if err != nil {
		return nil, fmt.Errorf("wan: TrainBlock %d: %w", i, err)
	}
	var dh *tensor.Tensor
	err = runBlock(r, ops, block, func() { dh = b.layerBack(l, i, lt, ops.Copy(dout), true) })
	if err != nil {
		dh.Free()
		return nil, err
	}
	return dh, nil
}
