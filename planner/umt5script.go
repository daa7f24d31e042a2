package planner

import "ferry/model/umt5"

// umt5Pass is one Encode of b prompts of TextLen tokens, following
// model/umt5/encode.go: the gathered hidden state and the padding mask live
// through the pass; each layer builds its position bias (UMT5: one per
// layer, with the mask added: [b, heads, L, L]) and frees it before the
// feed-forward. Wan pads every prompt to TextLen, so the mask is present.
// The final norm's output is the context the pipeline keeps; its id is
// returned so that the caller can free it when the context dies.
func umt5Pass(p *Profile, req Request, b int, id *ids) (pass, int) {
	c := p.Text
	n, d, inner, h := req.TextLen, c.DModel, c.InnerDim(), c.NumHeads
	r := &recorder{ids: id}
	var ps pass

	x := r.alloc(f32(b, n, d))
	mask := r.alloc(f32(b, n))
	ps.calls = append(ps.calls, call{block: 0, ev: r.take(), work: work{mem: float64(f32(b, n, d))}})

	shared := 0 // T5: layer 0's bias, kept to the end of the pass
	for i := range c.NumLayers {
		bias := shared
		if c.Variant == umt5.UMT5 || i == 0 {
			g := r.alloc(f32(n, n, h))
			bt := r.alloc(f32(h, n, n))
			r.free(g)
			bias = r.alloc(f32(b, h, n, n))
			r.free(bt)
			if c.Variant != umt5.UMT5 {
				shared = bias
			}
		}
		hn := r.alloc(f32(b, n, d))
		q, k, v := r.alloc(f32(b, n, inner)), r.alloc(f32(b, n, inner)), r.alloc(f32(b, n, inner))
		o := r.alloc(f32(b, n, inner))
		r.free(q, k, v)
		a := r.alloc(f32(b, n, d))
		r.free(o, hn, a)
		if c.Variant == umt5.UMT5 {
			r.free(bias)
		}
		hn = r.alloc(f32(b, n, d))
		ffWork := 2.0
		if c.IsGatedAct {
			g := r.alloc(f32(b, n, c.DFF))
			lin := r.alloc(f32(b, n, c.DFF))
			r.free(lin)
			out := r.alloc(f32(b, n, d))
			r.free(g, hn, out)
			ffWork = 3
		} else {
			g := r.alloc(f32(b, n, c.DFF))
			out := r.alloc(f32(b, n, d))
			r.free(g, hn, out)
		}
		bf, nf, df, inf, fff := float64(b), float64(n), float64(d), float64(inner), float64(c.DFF)
		w := work{
			gemm: 2 * bf * nf * (4*df*inf + ffWork*df*fff),
			attn: attnFlops(4*bf*nf*nf*inf, c.DKV),
			mem:  4 * bf * (nf*(12*df+4*fff) + 3*float64(h)*nf*nf),
		}
		ps.calls = append(ps.calls, call{block: 1 + i, ev: r.take(), work: w})
	}
	out := r.alloc(f32(b, n, d))
	ps.calls = append(ps.calls, call{block: c.NumLayers + 1, ev: r.take(), work: work{mem: float64(f32(b, n, d)) * 2}})
	r.free(x, mask)
	if shared != 0 {
		r.free(shared)
	}
	ps.post = append(ps.post, r.take()...)
	return ps, out
}
