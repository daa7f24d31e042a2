package wan

import (
	"errors"
	"fmt"
	"strings"

	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
)

// bwd is one Backward's state: the gradients asked for and the gradients
// of the embed block's outputs, accumulated over the blocks (nil when the
// embed block needs them not).
type bwd struct {
	m     *Model
	ops   *tensor.Ops
	t     *Tape
	grads map[string]*tensor.Tensor
	dmods *tensor.Tensor // [B, 6, dim]: time_proj's output
	dtemb *tensor.Tensor // [B, dim]: time_embedder's output
	dtext *tensor.Tensor // [B, Ltext, dim]: text_embedder's output
}

// backPlan says which stages Backward runs and how far back each carries
// the hidden states' gradient.
type backPlan struct {
	patch bool // the patch embedding trains: the first block's input gradient is needed
	time1 bool // time_embedder.linear_1 trains: its output's gradient is needed
	time2 bool // time1 or linear_2 trains: dtemb is needed
	mods  bool // time2 or time_proj trains: dmods is needed
	text1 bool // text_embedder.linear_1 trains
	text  bool // text1 or linear_2 trains: dtext is needed
	// Per block: whether its backward runs, and whether it computes the
	// gradient of its input (something before it needs it).
	layer, wantIn []bool
	// The same for the out block.
	out, outIn bool
}

// Backward walks the blocks in reverse (r.Run on each block again, so that
// streaming can bring frozen weights back in reverse order), from
// dpred = ∂loss/∂pred. grads maps parameter names as in Config.Params()
// ("blocks.0.attn1.to_q.weight", "patch_embedding.weight", ...) to float32
// device tensors of the parameter's shape, accumulated into (+=); names
// absent from the map get no gradient, and what only they need is not
// computed (with LoRA only, no weight-gradient GEMM runs at all). LoRA
// adapters' gradients go to LoRA.GradA/GradB when set. The input-gradient
// chain is computed only as far back as something needs it.
//
// Backward consumes the tape: it frees each stage's activations once used
// and everything else before it returns (the tape's Free is still safe).
// The weights bound must be dense float32 (the backward kernels refuse
// packed and bf16 matrices), and the LoRA adapters those of ForwardTrain.
func (m *Model) Backward(r residency.Runner, ops *tensor.Ops, tape *Tape, dpred *tensor.Tensor, grads map[string]*tensor.Tensor) (err error) {
	if tape == nil || tape.m != m {
		return errors.New("wan: Backward needs a tape ForwardTrain made with this model")
	}
	if tape.used {
		return errors.New("wan: Backward: the tape was already used or freed; run ForwardTrain again")
	}
	defer tape.Free()
	if err := ops.Err(); err != nil {
		return fmt.Errorf("wan: ops already failed: %w", err)
	}
	if dpred == nil || dpred.DType() != dtype.F32 || !tensor.SameShape(dpred.Shape(), tape.pred) {
		return fmt.Errorf("wan: Backward: dpred %v, want float32 %v (the prediction's shape)", dpred, tape.pred)
	}
	if err := m.checkGrads(grads); err != nil {
		return err
	}
	plan := m.planBackward(grads)
	b := &bwd{m: m, ops: ops, t: tape, grads: grads}
	p, dim := &tape.p, m.cfg.InnerDim()
	if plan.mods {
		b.dmods = ops.Zeros(p.batch, 6, dim)
	}
	if plan.time2 {
		b.dtemb = ops.Zeros(p.batch, dim)
	}
	if plan.text {
		b.dtext = ops.Zeros(p.batch, tape.context.Dim(1), dim)
	}
	var dh *tensor.Tensor // the gradient of the current stage's output
	defer func() { tensor.Free(dh, b.dmods, b.dtemb, b.dtext) }()

	blocks := m.comp.Blocks
	tape.prefetch(len(m.layers) - 1)
	if plan.out {
		err := runBlock(r, ops, blocks[len(blocks)-1], func() { dh = b.outBack(dpred, plan.outIn) })
		if err != nil {
			return err
		}
	}
	tensor.Free(tape.out.in)
	tensor.Free(tape.out.saved.tensors()...)
	tape.out = outTape{}
	for i := len(m.layers) - 1; i >= 0; i-- {
		if plan.layer[i] {
			if err := tape.unstash(ops, i, true); err != nil {
				return fmt.Errorf("wan: %s: %w", blocks[1+i].Name, err)
			}
			err := runBlock(r, ops, blocks[1+i], func() {
				next := b.layerBack(&m.layers[i], i, &tape.layers[i], dh, plan.wantIn[i])
				dh = next // layerBack has freed the old one
			})
			if err != nil {
				return err
			}
		}
		tape.release(i)
	}
	if plan.patch || plan.mods || plan.text {
		if err := runBlock(r, ops, blocks[0], func() { b.embedBack(dh, plan) }); err != nil {
			return err
		}
	}
	return nil
}

// checkGrads refuses gradient tensors for no parameter or of the wrong
// shape or type.
func (m *Model) checkGrads(grads map[string]*tensor.Tensor) error {
	shapes := map[string][]int{}
	for _, p := range m.cfg.Params() {
		shapes[p.Name] = p.Shape
	}
	for name, g := range grads {
		shape, ok := shapes[name]
		switch {
		case !ok:
			return fmt.Errorf("wan: gradient for %q: the transformer has no such parameter", name)
		case g == nil || g.DType() != dtype.F32 || !tensor.SameShape(g.Shape(), shape):
			return fmt.Errorf("wan: gradient for %q is %v, want float32 %v", name, g, shape)
		}
	}
	return nil
}

// planBackward works out from grads and the adapters which stages need a
// gradient (see backPlan).
func (m *Model) planBackward(grads map[string]*tensor.Tensor) backPlan {
	has := func(name string) bool { return grads[name] != nil }
	w := &m.embed
	pl := backPlan{
		patch: has("patch_embedding.weight") || has("patch_embedding.bias"),
		time1: trains(grads, w.Time1, "condition_embedder.time_embedder.linear_1"),
		text1: trains(grads, w.Text1, "condition_embedder.text_embedder.linear_1"),
	}
	pl.time2 = pl.time1 || trains(grads, w.Time2, "condition_embedder.time_embedder.linear_2")
	pl.mods = pl.time2 || trains(grads, w.TimeProj, "condition_embedder.time_proj")
	pl.text = pl.text1 || trains(grads, w.Text2, "condition_embedder.text_embedder.linear_2")

	// A block needs its output's gradient for its own parameters and for
	// its share of the modulation's and the text's gradients.
	own := make([]bool, len(m.layers))
	for name := range grads {
		if i, ok := layerOf(name); ok {
			own[i] = true
		}
	}
	for mod, l := range m.linearModules() {
		if i, ok := layerOf(mod); ok && trains(nil, *l, mod) {
			own[i] = true
		}
	}
	below := pl.patch // something before the current block needs its input's gradient
	pl.layer, pl.wantIn = make([]bool, len(m.layers)), make([]bool, len(m.layers))
	for i := range m.layers {
		pl.wantIn[i] = below
		needs := own[i] || pl.mods || pl.text
		pl.layer[i] = needs || below
		below = below || needs
	}
	pl.outIn = below
	pl.out = below || pl.time2 || has("scale_shift_table") || trains(grads, m.out.Proj, "proj_out")
	return pl
}

// layerOf is the block a parameter or module name belongs to.
func layerOf(name string) (int, bool) {
	var i int
	rest, ok := strings.CutPrefix(name, "blocks.")
	if !ok {
		return 0, false
	}
	if _, err := fmt.Sscanf(rest, "%d.", &i); err != nil {
		return 0, false
	}
	return i, true
}

// trains reports whether a Linear gets any gradient: its weight or bias is
// in grads, or an adapter on it has a gradient destination.
func trains(grads map[string]*tensor.Tensor, l linear, name string) bool {
	if grads[name+".weight"] != nil || grads[name+".bias"] != nil {
		return true
	}
	for _, a := range l.lora {
		if a.GradA != nil || a.GradB != nil {
			return true
		}
	}
	return false
}

// grad is the gradient destination of a parameter, nil when not wanted.
func (b *bwd) grad(name string) *tensor.Tensor { return b.grads[name] }

// linearBack is projectTrain's backward at the output gradient dy, x being
// the forward's input: it accumulates the weight's and bias's gradients
// (when wanted) and the adapters', and returns dx when wantDX (nil
// otherwise). lows are the adapters' x·Aᵀ the forward kept.
func (b *bwd) linearBack(dy, x *tensor.Tensor, l linear, name string, lows []*tensor.Tensor, wantDX bool) *tensor.Tensor {
	ops := b.ops
	if len(lows) != len(l.lora) {
		ops.Fail(fmt.Errorf("wan: %s: %d LoRA adapters in the forward, %d now: SetLoRA ran between ForwardTrain and Backward", name, len(lows), len(l.lora)))
		return ops.Empty(dtype.F32, x.Shape()...) // a dead tensor: every later op is skipped
	}
	dw, db := b.grad(name+".weight"), b.grad(name+".bias")
	if dw != nil && !tensor.SameShape(dw.Shape(), l.W.Shape()) {
		dw = view(ops, dw, l.W.Shape()...) // the patch embedding's conv weight seen as a matrix
	}
	var dx *tensor.Tensor
	if wantDX || dw != nil || db != nil {
		dx = ops.LinearBackward(dy, x, l.W, dw, db, wantDX)
	}
	for i, a := range l.lora {
		wantLow := wantDX || a.GradA != nil
		if a.A == nil || !wantLow && a.GradB == nil {
			continue // a bias alone passes the gradient through unchanged
		}
		// up = Scale·(x·Aᵀ)·Bᵀ: dB += Scale·dyᵀ·low, dlow = Scale·dy·B,
		// then dA += dlowᵀ·x and dx += dlow·A.
		low := lows[i]
		if a.GradB != nil && a.Scale != 1 {
			low = ops.Affine(low, a.Scale, 0)
		}
		dlow := ops.LinearBackward(dy, low, a.B, a.GradB, nil, wantLow)
		if low != lows[i] {
			low.Free()
		}
		if !wantLow {
			continue
		}
		if a.Scale != 1 {
			ops.AffineInPlace(dlow, a.Scale, 0)
		}
		if a.GradA != nil {
			ops.LinearBackward(dlow, x, a.A, a.GradA, nil, false)
		}
		if wantDX {
			byRows(ops, x.Dim(-1), func(r []*tensor.Tensor) {
				d := ops.LinearBackward(r[1], r[2], a.A, nil, nil, true)
				ops.AddInPlace(r[0], d)
				d.Free()
			}, dx, dlow, x)
		}
		dlow.Free()
	}
	return dx
}

// modBack is the backward of x = n·opsc + shift (opsc and shift
// [B, 1, dim] broadcast over the tokens): dn = dx·opsc when wantDN, and
// the gradients of shift and of the scale (that of opsc) when wantMods.
func modBack(ops *tensor.Ops, dx, n, opsc *tensor.Tensor, wantDN, wantMods bool) (dn, dshift, dscale *tensor.Tensor) {
	if wantMods {
		s := opsc.Shape()
		dshift = ops.SumTo(dx, s...)
		t := ops.Mul(dx, n)
		dscale = ops.SumTo(t, s...)
		t.Free()
	}
	if wantDN {
		dn = ops.Mul(dx, opsc)
	}
	return dn, dshift, dscale
}

// gateBack is the backward of the gated residual h + a·gate at the output
// gradient dh: da = dh·gate, and dgate = Σ dh·a over the tokens when
// wantGate.
func gateBack(ops *tensor.Ops, dh, a, gate *tensor.Tensor, wantGate bool) (da, dgate *tensor.Tensor) {
	if wantGate {
		t := ops.Mul(dh, a)
		dgate = ops.SumTo(t, gate.Shape()...)
		t.Free()
	}
	return ops.Mul(dh, gate), dgate
}

// modsBack accumulates a block's modulation gradient dmod (the six parts,
// concatenated to [B, 6, dim]) into its table's gradient and into b.dmods.
func (b *bwd) modsBack(dmod []*tensor.Tensor, table string) {
	ops := b.ops
	d := ops.Concat(1, dmod...)
	defer d.Free()
	if g := b.grad(table); g != nil {
		s := ops.SumTo(d, g.Shape()...)
		ops.AddInPlace(g, s)
		s.Free()
	}
	if b.dmods != nil {
		ops.AddInPlace(b.dmods, d)
	}
}

// layerBack is block i's backward from dh, the gradient of its output,
// which it frees. It recomputes the block's activations from its input
// when the tape dropped them (all, or all but the self-attention's output
// and log-sum-exp: selective checkpointing), inside the block's r.Run so
// that its weights are bound, and accumulates the block's parameter gradients
// and its shares of b.dmods and b.dtext, and returns the gradient of the
// block's input when wantIn (nil otherwise).
func (b *bwd) layerBack(l *layerWeights, i int, lt *layerTape, dh *tensor.Tensor, wantIn bool) *tensor.Tensor {
	ops, m, p := b.ops, b.m, &b.t.p
	if !lt.saved.complete() {
		var kept *attnSaved
		if lt.saved != nil {
			kept = lt.saved.attn1
		}
		out, s := m.layerTrain(ops, l, p, lt.in, kept)
		out.Free()
		lt.saved = s
	}
	c, s, pre, eps := &l.Core, lt.saved, layerPrefix(i), float32(m.cfg.Eps)
	wantMods := b.dmods != nil || b.grad(pre+"scale_shift_table") != nil
	var dmod [6]*tensor.Tensor // shift, scale, gate; ffn shift, scale, gate
	defer func() { tensor.Free(dmod[:]...) }()

	// Feed-forward: out = h2 + ffn(norm3(h2)·(1+c_scale)+c_shift)·c_gate.
	dy, dgate := gateBack(ops, dh, s.y, s.mod[5], wantMods)
	dmod[5] = dgate
	g := ops.Unary(s.f1, tensor.GELUTanh)
	dg := b.linearBack(dy, g, c.FF2, pre+"ffn.net.2", s.ff2Low, true)
	tensor.Free(g, dy)
	ops.UnaryBackwardInPlace(dg, s.f1, tensor.GELUTanh)
	n3, x3 := modulated(ops, s.h2, s.mod[3], s.mod[4], eps)
	dx3 := b.linearBack(dg, x3, c.FF1, pre+"ffn.net.0.proj", s.ff1Low, true)
	tensor.Free(dg, x3)
	dn3, dshift, dscale := modBack(ops, dx3, n3, s.mod[4], true, wantMods)
	dmod[3], dmod[4] = dshift, dscale
	tensor.Free(dx3, n3)
	dh2 := ops.LayerNormBackward(dn3, s.h2, nil, nil, nil, eps)
	dn3.Free()
	ops.AddInPlace(dh2, dh)
	dh.Free()

	// Cross-attention: h2 = h1 + attn2(norm2(h1), text).
	h1 := afterSelfAttention(ops, lt.in, s)
	x2 := h1
	if m.cfg.CrossAttnNorm {
		x2 = ops.LayerNorm(h1, l.Norm2.W, l.Norm2.B, eps)
	}
	dx2 := b.attnBack(&c.Attn2, pre+"attn2", s.attn2, dh2, x2, p.text, false, true)
	if x2 != h1 {
		x2.Free()
		d := ops.LayerNormBackward(dx2, h1, l.Norm2.W, b.grad(pre+"norm2.weight"), b.grad(pre+"norm2.bias"), eps)
		dx2.Free()
		dx2 = d
	}
	h1.Free()
	dh1 := dh2
	ops.AddInPlace(dh1, dx2)
	dx2.Free()

	// Self-attention: h1 = h0 + attn1(norm1(h0)·(1+scale)+shift)·gate.
	da, dgate := gateBack(ops, dh1, s.a, s.mod[2], wantMods)
	dmod[2] = dgate
	wantX1 := wantIn || wantMods
	n1, x1 := modulated(ops, lt.in, s.mod[0], s.mod[1], eps)
	dx1 := b.attnBack(&c.Attn1, pre+"attn1", s.attn1, da, x1, x1, true, wantX1)
	tensor.Free(da, x1)
	var dIn *tensor.Tensor
	if wantX1 {
		dn1, dshift, dscale := modBack(ops, dx1, n1, s.mod[1], wantIn, wantMods)
		dmod[0], dmod[1] = dshift, dscale
		if wantIn {
			dIn = ops.LayerNormBackward(dn1, lt.in, nil, nil, nil, eps)
			ops.AddInPlace(dIn, dh1)
		}
		tensor.Free(dn1, dx1)
	}
	tensor.Free(n1, dh1)
	if wantMods {
		b.modsBack(dmod[:], pre+"scale_shift_table")
	}
	return dIn
}

// modulated is modulate keeping the LayerNorm's output n: x = n·opsc +
// shift, computed as modulate computes it.
func modulated(ops *tensor.Ops, h, shift, opsc *tensor.Tensor, eps float32) (n, x *tensor.Tensor) {
	n = ops.LayerNorm(h, nil, nil, eps)
	x = ops.Mul(n, opsc)
	ops.AddInPlace(x, shift)
	return n, x
}

// attnBack is an attention's backward from da, the gradient of its output
// projection. x is the queries' input and kv the keys' and values' (x for
// self-attention, whose q and k are rotated). It returns the gradient of
// x when wantDX (for self-attention through q, k and v) and adds, for
// cross-attention, the keys' and values' input gradient to b.dtext.
func (b *bwd) attnBack(w *attention, name string, s *attnSaved, da, x, kv *tensor.Tensor, self, wantDX bool) *tensor.Tensor {
	ops, m, p := b.ops, b.m, &b.t.p
	bs, lq, dim := x.Dim(0), x.Dim(1), m.cfg.InnerDim()
	do := b.linearBack(da, view(ops, s.o, bs, lq, dim), w.Out, name+".to_out.0", s.oLow, true)
	reshape(ops, do, s.o.Shape()...)
	q := m.qkHeads(ops, s.qPre, w.NormQ, p, self)
	k := m.qkHeads(ops, s.kPre, w.NormK, p, self)
	dq, dk, dv := ops.AttentionBackward(do, q, k, s.v, s.o, s.lse, m.attnScale())
	tensor.Free(do, q, k)

	dqPre := b.qkBack(dq, s.qPre, w.NormQ, name+".norm_q.weight", self)
	dx := b.linearBack(dqPre, x, w.Q, name+".to_q", s.qLow, wantDX)
	dqPre.Free()

	// The keys' and values' input gradient: x's for self-attention, the
	// text's for cross-attention (wanted when the text embedder trains).
	wantKV := wantDX
	acc := dx
	if !self {
		wantKV, acc = b.dtext != nil, b.dtext
	}
	if wantKV || trains(b.grads, w.K, name+".to_k") || b.grad(name+".norm_k.weight") != nil {
		dkPre := b.qkBack(dk, s.kPre, w.NormK, name+".norm_k.weight", self)
		dxk := b.linearBack(dkPre, kv, w.K, name+".to_k", s.kLow, wantKV)
		if wantKV {
			ops.AddInPlace(acc, dxk)
		}
		tensor.Free(dkPre, dxk)
	}
	if wantKV || trains(b.grads, w.V, name+".to_v") {
		reshape(ops, dv, kv.Dim(0), kv.Dim(1), dim)
		dxv := b.linearBack(dv, kv, w.V, name+".to_v", s.vLow, wantKV)
		if wantKV {
			ops.AddInPlace(acc, dxv)
		}
		dxv.Free()
	}
	tensor.Free(dk, dv)
	return dx
}

// qkBack is qkHeads' backward: from the gradient of q or k [B, L, heads,
// head_dim] (freed) to that of the projection pre [B, L, dim],
// accumulating the RMSNorm weight's gradient when wanted.
func (b *bwd) qkBack(d, pre, norm *tensor.Tensor, normName string, rope bool) *tensor.Tensor {
	ops := b.ops
	if rope {
		r := ops.RopeBackward(d, b.t.p.cos, b.t.p.sin)
		d.Free()
		d = r
	}
	reshape(ops, d, pre.Shape()...)
	dpre := ops.RMSNormBackward(d, pre, norm, b.grad(normName), float32(b.m.cfg.Eps))
	d.Free()
	return dpre
}

// outBack is the out block's backward from dpred: it accumulates the
// table's and proj_out's gradients and the block's share of b.dtemb, and
// returns the gradient of the last block's output when wantIn.
func (b *bwd) outBack(dpred *tensor.Tensor, wantIn bool) *tensor.Tensor {
	ops, m, t := b.ops, b.m, b.t
	s, in, eps := t.out.saved, t.out.in, float32(m.cfg.Eps)
	dy := m.patchifyPred(ops, dpred, &t.p)
	n, x := modulated(ops, in, s.shift, s.opsc, eps)
	table := b.grad("scale_shift_table")
	wantMods := table != nil || b.dtemb != nil
	dx := b.linearBack(dy, x, m.out.Proj, "proj_out", s.low, wantIn || wantMods)
	tensor.Free(dy, x)
	if dx == nil {
		n.Free()
		return nil
	}
	dn, dshift, dscale := modBack(ops, dx, n, s.opsc, wantIn, wantMods)
	tensor.Free(dx, n)
	if wantMods {
		// (scale_shift_table + temb[:, None]) split in shift and scale.
		d := ops.Concat(1, dshift, dscale)
		if table != nil {
			g := ops.SumTo(d, table.Shape()...)
			ops.AddInPlace(table, g)
			g.Free()
		}
		if b.dtemb != nil {
			g := ops.SumTo(d, t.p.batch, 1, m.cfg.InnerDim())
			ops.AddInPlace(b.dtemb, view(ops, g, t.p.batch, m.cfg.InnerDim()))
			g.Free()
		}
		tensor.Free(d, dshift, dscale)
	}
	if !wantIn {
		return nil
	}
	dIn := ops.LayerNormBackward(dn, in, nil, nil, nil, eps)
	dn.Free()
	return dIn
}

// patchifyPred is unpatchify's inverse: the prediction's gradient
// [B, C, F, H, W] as proj_out's output gradient [B, L, pt·ph·pw·C].
func (m *Model) patchifyPred(ops *tensor.Ops, d *tensor.Tensor, p *pass) *tensor.Tensor {
	ps, n, ch := m.cfg.PatchSize, p.grid.n, m.cfg.OutChannels
	v := view(ops, d, p.batch, ch, n[0], ps[0], n[1], ps[1], n[2], ps[2])
	out := ops.Permute(v, 0, 2, 4, 6, 3, 5, 7, 1)
	reshape(ops, out, p.batch, p.tokens, m.cfg.PatchVolume()*ch)
	return out
}

// embedBack is the embed block's backward: the patch embedding's from dh
// (the first block's input gradient, nil when not wanted), the time
// embedder's and time_proj's from b.dmods and b.dtemb, the text
// embedder's from b.dtext.
func (b *bwd) embedBack(dh *tensor.Tensor, pl backPlan) {
	ops, t, w, dim := b.ops, b.t, &b.m.embed, b.m.cfg.InnerDim()
	s, p := t.embed, &t.p
	if pl.patch {
		b.linearBack(dh, s.patches, linear{W: view(ops, w.Patch.W, dim, -1), B: w.Patch.B}, "patch_embedding", nil, false)
	}
	if pl.mods {
		dm := view(ops, b.dmods, p.batch, 6*dim)
		da := b.linearBack(dm, s.tembAct, w.TimeProj, "condition_embedder.time_proj", s.projLow, pl.time2)
		if pl.time2 {
			ops.UnaryBackwardInPlace(da, p.temb, tensor.SiLU)
			ops.AddInPlace(b.dtemb, da)
			da.Free()
		}
	}
	if pl.time2 {
		dh1 := b.linearBack(b.dtemb, s.t1Act, w.Time2, "condition_embedder.time_embedder.linear_2", s.time2Low, pl.time1)
		if pl.time1 {
			ops.UnaryBackwardInPlace(dh1, s.t1, tensor.SiLU)
			b.linearBack(dh1, s.freq, w.Time1, "condition_embedder.time_embedder.linear_1", s.time1Low, false)
			dh1.Free()
		}
	}
	if pl.text {
		g := ops.Unary(s.u, tensor.GELUTanh)
		dg := b.linearBack(b.dtext, g, w.Text2, "condition_embedder.text_embedder.linear_2", s.text2Low, pl.text1)
		g.Free()
		if pl.text1 {
			ops.UnaryBackwardInPlace(dg, s.u, tensor.GELUTanh)
			b.linearBack(dg, t.context, w.Text1, "condition_embedder.text_embedder.linear_1", s.text1Low, false)
			dg.Free()
		}
	}
}
