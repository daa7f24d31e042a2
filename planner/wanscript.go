package planner

import "ferry/residency"

// wanPass is one transformer Forward over a batch of b samples, following
// model/wan/forward.go allocation by allocation: the RoPE tables before the
// first block; the hidden state, time embedding, modulation and projected
// text that live from the embed block to the end of the pass; and inside
// each block the temporaries in the order the code makes and frees them.
func wanPass(p *Profile, req Request, run residency.RunOptions, b int, id *ids) pass {
	c := p.Wan
	d, hd := c.InnerDim(), c.AttentionHeadDim
	l, lt := req.tokens(p), req.TextLen
	pv := c.PatchVolume()
	r := &recorder{ids: id}

	var ps pass
	cos := r.alloc(int64(l) * int64(hd/2) * 8)
	sin := r.alloc(int64(l) * int64(hd/2) * 8)
	ps.pre = r.take()

	// embed: patchify (a permuted copy), patch linear, time and text
	// embeddings.
	patches := r.alloc(f32(b, l, c.InChannels*pv))
	hidden := r.alloc(f32(b, l, d))
	r.free(patches)
	freq := r.alloc(f32(b, c.FreqDim))
	h := r.alloc(f32(b, d))
	r.free(freq)
	temb := r.alloc(f32(b, d))
	r.free(h)
	a := r.alloc(f32(b, d))
	mods := r.alloc(f32(b, 6*d))
	r.free(a)
	t := r.alloc(f32(b, lt, d))
	text := r.alloc(f32(b, lt, d))
	r.free(t)
	embedWork := work{
		gemm: 2 * float64(b) * (float64(l)*float64(c.InChannels*pv*d) + float64(lt)*float64(c.TextDim*d+d*d) + float64(c.FreqDim*d+d*d+6*d*d)),
		mem:  float64(f32(b, l, c.InChannels*pv)) * 2,
	}
	ps.calls = append(ps.calls, call{block: 0, ev: r.take(), work: embedWork})

	for i := range c.NumLayers {
		wanLayer(r, p, run, b, l, lt)
		ps.calls = append(ps.calls, call{block: 1 + i, ev: r.take(), work: wanLayerWork(p, b, l, lt)})
	}

	// out: modulation, norm, proj_out, unpatchify (a permuted copy the
	// caller receives and frees).
	m := r.alloc(f32(b, 2*d))
	shift, scale := r.alloc(f32(b, d)), r.alloc(f32(b, d))
	r.free(m)
	x := r.alloc(f32(b, l, d))
	y := r.alloc(f32(b, l, c.OutChannels*pv))
	r.free(x)
	out := r.alloc(f32(b, l, c.OutChannels*pv))
	r.free(y, shift, scale)
	outWork := work{gemm: 2 * float64(b) * float64(l) * float64(d*c.OutChannels*pv), mem: float64(f32(b, l, d)) * 4}
	ps.calls = append(ps.calls, call{block: c.NumLayers + 1, ev: r.take(), work: outWork})

	r.free(hidden, temb, mods, text, cos, sin)
	r.free(out) // the pipeline downloads the prediction and frees it
	ps.post = r.take()
	return ps
}

// wanLayer records one WanTransformerBlock's temporaries.
func wanLayer(r *recorder, p *Profile, run residency.RunOptions, b, l, lt int) {
	c := p.Wan
	d := c.InnerDim()
	bld := f32(b, l, d)

	mods := r.alloc(f32(b, 6*d))
	var parts []int
	for range 6 {
		parts = append(parts, r.alloc(f32(b, d)))
	}
	r.free(mods)

	// Self-attention: x, then q (projection, norm), k, v; x dies before
	// the attention itself.
	x := r.alloc(bld)
	heads := func(rows int, norm bool) int {
		y := r.alloc(f32(b, rows, d))
		if !norm {
			return y
		}
		n := r.alloc(f32(b, rows, d))
		r.free(y)
		return n
	}
	q := heads(l, true)
	qr := r.alloc(bld)
	r.free(q)
	k := heads(l, true)
	kr := r.alloc(bld)
	r.free(k)
	v := heads(l, false)
	r.free(x)
	o := r.alloc(bld)
	r.free(qr, kr, v)
	a := r.alloc(bld)
	r.free(o)
	r.free(a)

	// Cross-attention to the projected text.
	var xn int
	if c.CrossAttnNorm {
		xn = r.alloc(bld)
	}
	q = heads(l, true)
	k = heads(lt, true)
	v = heads(lt, false)
	o = r.alloc(bld)
	r.free(q, k, v)
	a = r.alloc(bld)
	r.free(o)
	if c.CrossAttnNorm {
		r.free(xn)
	}
	r.free(a)

	// Feed-forward, whole or one sample's chunk at a time (every chunk
	// allocates and frees the same sizes, so one chunk shows the peak).
	rows := b * l
	if run.FFNChunk > 0 && run.FFNChunk < l {
		rows = run.FFNChunk
	}
	fx := r.alloc(f32(rows, d))
	fa := r.alloc(f32(rows, c.FFNDim))
	r.free(fx)
	fy := r.alloc(f32(rows, d))
	r.free(fa)
	r.free(fy)
	r.free(parts...)
}

// wanLayerWork counts one block's flops: q, k, v, o of both attentions,
// the two attention products, the feed-forward, and the elementwise
// traffic of norms, RoPE, gates and residual adds.
func wanLayerWork(p *Profile, b, l, lt int) work {
	c := p.Wan
	d, ff := float64(c.InnerDim()), float64(c.FFNDim)
	bf, lf, ltf := float64(b), float64(l), float64(lt)
	gemm := 2 * bf * (4*lf*d*d + 2*lf*d*d + 2*ltf*d*d + 2*lf*d*ff)
	attn := 4 * bf * (lf*lf*d + lf*ltf*d)
	mem := 4 * bf * lf * (30*d + 3*ff)
	return work{gemm: gemm, attn: attnFlops(attn, c.AttentionHeadDim), mem: mem}
}
