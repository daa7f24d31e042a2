package planner

// The training step's allocations, mirrored from model/wan/train.go
// (ForwardTrain: embedTrain, layerTrain, outTrain) and backward.go
// (Backward: outBack, layerBack, attnBack, linearBack, embedBack) in the
// order the code makes and frees them, as wanscript.go mirrors Forward.
// The tests run the real step on small configs and require the same
// device peak.

// trainShape is what the script needs of one step: the model's sizes, the
// batch and sequence lengths, what trains and how.
type trainShape struct {
	b, l, lt          int // batch, tokens per sample, text length
	d, ff, heads      int
	inCh, outCh, pv   int
	textDim, freqDim  int
	crossNorm         bool
	rank              int
	adapted           map[string]bool // block-relative Linear names with an adapter ("attn1.to_q")
	full              bool            // every weight trains: weight gradients, and the embed's chain
	ckpt              string          // CheckpointNone, CheckpointBlock, CheckpointSelective
	actBytes          int             // bytes per element of the saved activations
	layers            int
	rowBlock          int64 // model/wan's rowBlockBytes
	wantMods, wantTxt bool  // the modulation's and the text's gradients flow (full)
}

// model/wan's byRows block size.
const trainRowBlockBytes = 4 << 20

// savedAct is one tensor a block keeps for its backward.
type savedAct struct {
	id int
	// keep: selective checkpointing keeps it (the self-attention's output
	// and log-sum-exp); wide: bf16 autocast leaves it float32 (the
	// modulation and the log-sum-exps).
	keep, wide bool
}

// layerRec is one block's tape in the script: its input and what it saved.
type layerRec struct {
	in    int
	saved []savedAct
	// onDevice: its tensors are on the device (not moved to the host).
	onDevice bool
}

// trainScript records the step's events.
type trainScript struct {
	sh trainShape
	r  *recorder
}

func (ts *trainScript) bld() int64     { return f32(ts.sh.b, ts.sh.l, ts.sh.d) }
func (ts *trainScript) btd() int64     { return f32(ts.sh.b, ts.sh.lt, ts.sh.d) }
func (ts *trainScript) bd(n int) int64 { return f32(ts.sh.b, n, ts.sh.d) }

// lin records projectTrain: the output, then per adapter x·Aᵀ and the
// row blocks of its product added into the output. It returns the output
// and the adapters' lows.
func (ts *trainScript) lin(name string, rows, out int) (int, []int) {
	r := ts.r
	y := r.alloc(f32(rows, out))
	var lows []int
	if ts.sh.adapted[name] {
		lows = append(lows, r.alloc(f32(rows, ts.sh.rank)))
		up := r.alloc(f32(min(ts.rowStep(out), rows), out))
		r.free(up)
	}
	return y, lows
}

// rowStep is byRows' rows per block for tensors width wide.
func (ts *trainScript) rowStep(width int) int {
	return max(1, int(ts.sh.rowBlock)/(4*max(width, 1)))
}

// linBack records linearBack: dx (when wanted), and per adapter the
// gradient of its low and, when dx is wanted, the row blocks of dlow·A.
// It returns dx's id (0 when not made).
func (ts *trainScript) linBack(name string, rows, in int, wantDX bool) int {
	r := ts.r
	dx := 0
	if wantDX {
		dx = r.alloc(f32(rows, in))
	}
	if ts.sh.adapted[name] {
		dlow := r.alloc(f32(rows, ts.sh.rank))
		if wantDX {
			d := r.alloc(f32(min(ts.rowStep(in), rows), in))
			r.free(d)
		}
		r.free(dlow)
	}
	return dx
}

// embedForward records embedTrain; it returns the first block's input and
// the tensors the whole pass shares (temb, mods, text) and the embed's
// saved ones.
func (ts *trainScript) embedForward() (h int, shared, saved []int) {
	r, s := ts.r, ts.sh
	patches := r.alloc(f32(s.b, s.l, s.inCh*s.pv))
	h = r.alloc(ts.bld())
	freq := r.alloc(f32(s.b, s.freqDim))
	t1, _ := ts.lin("", s.b, s.d)
	t1Act := r.alloc(f32(s.b, s.d))
	temb, _ := ts.lin("", s.b, s.d)
	tembAct := r.alloc(f32(s.b, s.d))
	mods, _ := ts.lin("", s.b, 6*s.d)
	u, _ := ts.lin("", s.b*s.lt, s.d)
	g := r.alloc(ts.btd())
	text, _ := ts.lin("", s.b*s.lt, s.d)
	r.free(g)
	return h, []int{temb, mods, text}, []int{patches, freq, t1, t1Act, tembAct, u}
}

// layerForward records layerTrain from the block's input; it returns the
// block's output and what the block saved. selfKept: the self-attention's
// output and log-sum-exp were kept (selective checkpointing's recompute),
// the attention does not run again and they are not in saved.
func (ts *trainScript) layerForward(selfKept bool) (out int, saved []savedAct) {
	r, s := ts.r, ts.sh
	bl, rows, trows := ts.bld(), s.b*s.l, s.b*s.lt
	keep := func(ids ...int) {
		for _, id := range ids {
			saved = append(saved, savedAct{id: id})
		}
	}
	// blockMods: the sum, split into six parts.
	sum := r.alloc(f32(s.b, 6, s.d))
	for range 6 {
		saved = append(saved, savedAct{id: r.alloc(ts.bd(1)), wide: true})
	}
	r.free(sum)

	x1 := r.alloc(bl)
	ts.attnForward("attn1", rows, rows, true, selfKept, keep, &saved)
	r.free(x1)
	h1 := r.alloc(bl)
	x2 := 0
	if s.crossNorm {
		x2 = r.alloc(bl)
	}
	a2 := ts.attnForward("attn2", rows, trows, false, false, keep, &saved)
	if s.crossNorm {
		r.free(x2)
	}
	h2 := r.alloc(bl)
	keep(h2)
	r.free(h1, a2)
	x3 := r.alloc(bl)
	f1, lows1 := ts.lin("ffn.net.0.proj", rows, s.ff)
	keep(f1)
	keep(lows1...)
	r.free(x3)
	g := r.alloc(f32(rows, s.ff))
	y, lows2 := ts.lin("ffn.net.2", rows, s.d)
	keep(y)
	keep(lows2...)
	r.free(g)
	out = r.alloc(bl)
	return out, saved
}

// attnForward records attnTrain (the self-attention's output a is kept,
// the cross-attention's returned to be freed by the caller).
func (ts *trainScript) attnForward(name string, rows, kvRows int, self, kept bool, keep func(...int), saved *[]savedAct) int {
	r, s := ts.r, ts.sh
	q, ql := ts.lin(name+".to_q", rows, s.d)
	k, kl := ts.lin(name+".to_k", kvRows, s.d)
	v, vl := ts.lin(name+".to_v", kvRows, s.d)
	keep(q, k, v)
	keep(ql...)
	keep(kl...)
	keep(vl...)
	heads := func(n int) int { return ts.heads(n, self) }
	if !kept {
		qh := heads(rows)
		kh := heads(kvRows)
		o := r.alloc(f32(rows, s.d))
		lse := r.alloc(f32(s.b, s.heads, s.l))
		*saved = append(*saved, savedAct{id: o, keep: self}, savedAct{id: lse, keep: self, wide: true})
		r.free(qh, kh)
	}
	a, ol := ts.lin(name+".to_out.0", rows, s.d)
	keep(ol...)
	if self {
		keep(a)
	}
	return a
}

// outForward records outTrain: the modulation parts (saved), the
// prediction (the caller's).
func (ts *trainScript) outForward() (pred int, saved []int) {
	r, s := ts.r, ts.sh
	sum := r.alloc(f32(s.b, 2, s.d))
	shift, opsc := r.alloc(ts.bd(1)), r.alloc(ts.bd(1))
	r.free(sum)
	x := r.alloc(ts.bld())
	y, _ := ts.lin("", s.b*s.l, s.outCh*s.pv)
	r.free(x)
	pred = r.alloc(f32(s.b, s.l, s.outCh*s.pv))
	r.free(y)
	return pred, []int{shift, opsc}
}

// outBackward records outBack; it returns the last block's output
// gradient.
func (ts *trainScript) outBackward() int {
	r, s := ts.r, ts.sh
	bl := ts.bld()
	dy := r.alloc(f32(s.b, s.l, s.outCh*s.pv))
	n, x := r.alloc(bl), r.alloc(bl)
	dx := ts.linBack("", s.b*s.l, s.d, true)
	r.free(dy, x)
	var dshift, dscale int
	if s.wantMods {
		dshift = r.alloc(ts.bd(1))
		t := r.alloc(bl)
		dscale = r.alloc(ts.bd(1))
		r.free(t)
	}
	dn := r.alloc(bl)
	r.free(dx, n)
	if s.wantMods {
		d := r.alloc(f32(s.b, 2, s.d))
		g := r.alloc(f32(1, 2, s.d))
		r.free(g)
		g = r.alloc(ts.bd(1))
		r.free(g)
		r.free(d, dshift, dscale)
	}
	dIn := r.alloc(bl)
	r.free(dn)
	return dIn
}

// layerBackward records layerBack from dh (freed); it returns the input's
// gradient (0 when not wanted). recompute records layerTrain first (the
// block dropped its activations), whose tensors are freed with the tape.
func (ts *trainScript) layerBackward(dh int, wantIn bool) int {
	r, s := ts.r, ts.sh
	bl, rows, trows := ts.bld(), s.b*s.l, s.b*s.lt
	wm := s.wantMods
	var dmod []int
	gate := func(dh int) int {
		if wm {
			t := r.alloc(bl)
			dmod = append(dmod, r.alloc(ts.bd(1)))
			r.free(t)
		}
		return r.alloc(bl)
	}
	modBack := func(wantDN bool) int {
		if wm {
			dmod = append(dmod, r.alloc(ts.bd(1)))
			t := r.alloc(bl)
			dmod = append(dmod, r.alloc(ts.bd(1)))
			r.free(t)
		}
		if wantDN {
			return r.alloc(bl)
		}
		return 0
	}

	// Feed-forward.
	dy := gate(dh)
	g := r.alloc(f32(rows, s.ff))
	dg := ts.linBack("ffn.net.2", rows, s.ff, true)
	r.free(g, dy)
	n3, x3 := r.alloc(bl), r.alloc(bl)
	dx3 := ts.linBack("ffn.net.0.proj", rows, s.d, true)
	r.free(dg, x3)
	dn3 := modBack(true)
	r.free(dx3, n3)
	dh2 := r.alloc(bl)
	r.free(dn3, dh)

	// Cross-attention.
	h1 := r.alloc(bl)
	x2 := 0
	if s.crossNorm {
		x2 = r.alloc(bl)
	}
	dx2 := ts.attnBackward("attn2", rows, trows, false, true)
	if s.crossNorm {
		r.free(x2)
		d := r.alloc(bl)
		r.free(dx2)
		dx2 = d
	}
	r.free(h1)
	dh1 := dh2
	r.free(dx2)

	// Self-attention.
	da := gate(dh1)
	wantX1 := wantIn || wm
	n1, x1 := r.alloc(bl), r.alloc(bl)
	dx1 := ts.attnBackward("attn1", rows, rows, true, wantX1)
	r.free(da, x1)
	dIn := 0
	if wantX1 {
		dn1 := modBack(wantIn)
		if wantIn {
			dIn = r.alloc(bl)
		}
		r.free(dn1, dx1)
	}
	r.free(n1, dh1)
	if wm {
		d := r.alloc(f32(s.b, 6, s.d))
		t := r.alloc(f32(1, 6, s.d))
		r.free(t, d)
	}
	r.free(dmod...)
	return dIn
}

// heads records qkHeads on n rows: the RMSNorm's output, which
// self-attention's RoPE replaces with a rotated copy.
func (ts *trainScript) heads(n int, self bool) int {
	x := ts.r.alloc(f32(n, ts.sh.d))
	if !self {
		return x
	}
	y := ts.r.alloc(f32(n, ts.sh.d))
	ts.r.free(x)
	return y
}

// attnBackward records attnBack; it returns dx (0 when not wanted).
func (ts *trainScript) attnBackward(name string, rows, kvRows int, self, wantDX bool) int {
	r, s := ts.r, ts.sh
	do := ts.linBack(name+".to_out.0", rows, s.d, true)
	heads := func(n int) int { return ts.heads(n, self) }
	q, k := heads(rows), heads(kvRows)
	dq, dk, dv := r.alloc(f32(rows, s.d)), r.alloc(f32(kvRows, s.d)), r.alloc(f32(kvRows, s.d))
	r.free(do, q, k)
	qkBack := func(d, n int) int {
		if self {
			rr := r.alloc(f32(n, s.d))
			r.free(d)
			d = rr
		}
		dpre := r.alloc(f32(n, s.d))
		r.free(d)
		return dpre
	}
	dqPre := qkBack(dq, rows)
	dx := ts.linBack(name+".to_q", rows, s.d, wantDX)
	r.free(dqPre)
	wantKV := wantDX
	if !self {
		wantKV = s.wantTxt
	}
	if wantKV || s.full || s.adapted[name+".to_k"] {
		dkPre := qkBack(dk, kvRows)
		dxk := ts.linBack(name+".to_k", kvRows, s.d, wantKV)
		r.free(dkPre, dxk)
	}
	if wantKV || s.full || s.adapted[name+".to_v"] {
		dxv := ts.linBack(name+".to_v", kvRows, s.d, wantKV)
		r.free(dxv)
	}
	r.free(dk, dv)
	return dx
}

// embedBackward records embedBack (full fine-tuning: every embedder
// trains); dh is the first block's input gradient.
func (ts *trainScript) embedBackward() {
	r, s := ts.r, ts.sh
	if !s.full {
		return
	}
	da := ts.linBack("", s.b, s.d, true)
	r.free(da)
	dh1 := ts.linBack("", s.b, s.d, true)
	r.free(dh1)
	g := r.alloc(ts.btd())
	dg := ts.linBack("", s.b*s.lt, s.d, true)
	r.free(g, dg)
}
