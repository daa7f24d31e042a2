package planner

import (
	"strconv"
	"strings"

	"ferry/model/wan"
	"ferry/residency"
)

// wanPass is one transformer Forward over a batch of b samples, following
// model/wan/forward.go allocation by allocation: the RoPE tables before the
// first block; the hidden state, time embedding, modulation and projected
// text that live from the embed block to the end of the pass; and inside
// each block the temporaries in the order the code makes and frees them.
func wanPass(p *Profile, req Request, run residency.RunOptions, b int, lora loraPass, id *ids) pass {
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
	// The time embedding and its projection: one row per sample, or per
	// distinct per-token timestep (expand_timesteps).
	g, runs := timestepRuns(p, req, b)
	ffn := ffnChunks(run, b, l, runs)
	freq := r.alloc(f32(g, c.FreqDim))
	h := r.alloc(f32(g, d))
	lora.top.record(r, "condition_embedder.time_embedder.linear_1", g, d)
	r.free(freq)
	temb := r.alloc(f32(g, d))
	lora.top.record(r, "condition_embedder.time_embedder.linear_2", g, d)
	r.free(h)
	a := r.alloc(f32(g, d))
	mods := r.alloc(f32(g, 6*d))
	lora.top.record(r, "condition_embedder.time_proj", g, 6*d)
	r.free(a)
	// The text projection over kt rows: the prompts' and, when the zero
	// padding folds (model/wan/textfold.go), one for it, whose weight in
	// the attentions is a bias of kt floats per sample.
	kt := lt
	if c.FoldsText(imageRows(p), lt) && req.PromptTokens > 0 {
		kt = wan.FoldedTextRows(req.PromptTokens, lt)
	}
	narrowed := 0
	if kt < lt {
		narrowed = r.alloc(f32(b, kt, c.TextDim))
	}
	t := r.alloc(f32(b, kt, d))
	lora.top.record(r, "condition_embedder.text_embedder.linear_1", b*kt, d)
	if narrowed != 0 {
		r.free(narrowed)
	}
	text := r.alloc(f32(b, kt, d))
	lora.top.record(r, "condition_embedder.text_embedder.linear_2", b*kt, d)
	r.free(t)
	bias := 0
	if kt < lt {
		bias = r.alloc(f32(b, kt))
	}
	embedWork := work{
		gemm: 2 * float64(b) * (float64(l)*float64(c.InChannels*pv*d) + float64(kt)*float64(c.TextDim*d+d*d) + float64(c.FreqDim*d+d*d+6*d*d)),
		mem:  float64(f32(b, l, c.InChannels*pv)) * 2,
	}
	// li and lc: the rows the image and the text attentions read.
	li, lc := imageRows(p), kt
	image := 0
	if li > 0 {
		var w work
		image, text, w = wanImageEmbed(r, p, b, lt, text, lora.top)
		embedWork = embedWork.add(w)
		if kt == lt {
			// Unfolded, the split may move rows across; a folded text
			// split back unchanged (Config.FoldsText).
			li, lc = wan.ImageTextSplit(li, lt)
		}
	}
	ps.calls = append(ps.calls, call{block: 0, ev: r.take(), work: embedWork})

	for i := range c.NumLayers {
		wanLayer(r, p, b, l, lc, li, g, ffn, lora.block(i))
		ps.calls = append(ps.calls, call{block: 1 + i, ev: r.take(), work: wanLayerWork(p, b, l, lc, li)})
	}

	// out: modulation, norm, proj_out, unpatchify (a permuted copy the
	// caller receives and frees).
	m := r.alloc(f32(g, 2*d))
	shift, scale := r.alloc(f32(g, d)), r.alloc(f32(g, d))
	r.free(m)
	x := r.alloc(f32(b, l, d))
	y := r.alloc(f32(b, l, c.OutChannels*pv))
	lora.top.record(r, "proj_out", b*l, c.OutChannels*pv)
	r.free(x)
	out := r.alloc(f32(b, l, c.OutChannels*pv))
	r.free(y, shift, scale)
	outWork := work{gemm: 2 * float64(b) * float64(l) * float64(d*c.OutChannels*pv), mem: float64(f32(b, l, d)) * 4}
	ps.calls = append(ps.calls, call{block: c.NumLayers + 1, ev: r.take(), work: outWork})

	r.free(hidden, temb, mods, text, cos, sin)
	for _, id := range []int{bias, image} {
		if id != 0 {
			r.free(id)
		}
	}
	r.free(out) // the pipeline downloads the prediction and frees it
	ps.post = r.take()
	return ps
}

// timestepRuns is how many rows of time embedding and modulation a pass
// of b samples makes, and the runs of tokens that share one (nil: each
// sample's tokens, one row per sample). Under expand_timesteps (TI2V) the
// pipeline gives every token t, except frame 0's tokens 0 when an image
// is given, and model/wan embeds each distinct value once.
func timestepRuns(p *Profile, req Request, b int) (int, []int) {
	if !p.ExpandTimesteps {
		return b, nil
	}
	l := req.tokens(p)
	_, _, h, w := req.latent(p)
	frame0 := (h / p.Wan.PatchSize[1]) * (w / p.Wan.PatchSize[2])
	sample, g := []int{l}, 1
	if p.ImageMode == ImageAlone && l > frame0 {
		sample, g = []int{frame0, l - frame0}, 2
	}
	var runs []int
	for range b {
		runs = append(runs, sample...)
	}
	return g, runs
}

// ffnChunks is the rows of each feed-forward call model/wan makes over b
// samples of l tokens: all at once, or with Options.FFNChunk one sample's
// chunk at a time; with per-token timesteps run by run, each in chunks.
func ffnChunks(run residency.RunOptions, b, l int, runs []int) []int {
	chunk := run.FFNChunk
	split := func(n int) []int {
		if chunk <= 0 || chunk >= n {
			return []int{n}
		}
		var out []int
		for start := 0; start < n; start += chunk {
			out = append(out, min(chunk, n-start))
		}
		return out
	}
	if runs != nil {
		var out []int
		for _, n := range runs {
			out = append(out, split(n)...)
		}
		return out
	}
	if chunk <= 0 || chunk >= l {
		return []int{b * l}
	}
	var out []int
	for range b {
		out = append(out, split(l)...)
	}
	return out
}

// imageRows is how many image tokens an image-conditioned transformer
// (Wan 2.1 I2V: image_dim set) reads per sample, after the image
// embedding: the CLIP tower's tokens, or pos_embed_seq_len (FLF2V's two
// images); 0 for a transformer without image conditioning.
func imageRows(p *Profile) int {
	switch c := p.Wan; {
	case !c.HasImage():
		return 0
	case c.ImageTokens() > 0:
		return c.ImageTokens()
	case p.Image != nil:
		return p.Image.Tokens()
	}
	return 257 // CLIP ViT-H/14 at 224, every Wan 2.1 I2V checkpoint's
}

// wanImageEmbed records model/wan's imageForward in the embed block: the
// image embeddings (which the pipeline uploaded, [b, rows, image_dim])
// normalised, through the feed-forward (image_dim wide, then the model
// width) and normalised again. With a text context other than 512 tokens
// the reference re-splits [image; text] (wan.ImageTextSplit), and so does
// the model: both parts are copied, or the concatenation is the text when
// the image part is empty. It returns the image tokens' id (0 for none),
// the text's and the work.
// lr holds the adapters outside the blocks (the feed-forward's among them).
func wanImageEmbed(r *recorder, p *Profile, b, lt, text int, lr LoRARanks) (int, int, work) {
	c := p.Wan
	d, e, rows := c.InnerDim(), *c.ImageDim, imageRows(p)
	var x int
	if c.ImageTokens() > 0 {
		x = r.alloc(f32(b, rows, e)) // FLF2V: plus the position embedding
	}
	n := r.alloc(f32(b, rows, e))
	if x != 0 {
		r.free(x)
	}
	h := r.alloc(f32(b, rows, e))
	lr.record(r, "condition_embedder.image_embedder.ff.net.0.proj", b*rows, e)
	r.free(n)
	y := r.alloc(f32(b, rows, d))
	lr.record(r, "condition_embedder.image_embedder.ff.net.2", b*rows, d)
	r.free(h)
	img := r.alloc(f32(b, rows, d))
	r.free(y)
	if cut, rest := wan.ImageTextSplit(rows, lt); cut != rows {
		ctx := r.alloc(f32(b, rows+lt, d))
		r.free(img, text)
		if cut == 0 {
			img, text = 0, ctx
		} else {
			img = r.alloc(f32(b, cut, d))
			text = r.alloc(f32(b, rest, d))
			r.free(ctx)
		}
	}
	bf, rf := float64(b), float64(rows)
	w := work{gemm: 2 * bf * rf * float64(e*e+e*d), mem: 4 * bf * rf * float64(4*e+3*d)}
	return img, text, w
}

// wanLayer records one WanTransformerBlock's temporaries (its cross
// attention reads lt text rows and li image rows, 0 without image
// attention).
func wanLayer(r *recorder, p *Profile, b, l, lt, li, g int, ffn []int, lr LoRARanks) {
	c := p.Wan
	d := c.InnerDim()
	bld := f32(b, l, d)

	mods := r.alloc(f32(g, 6*d))
	var parts []int
	for range 6 {
		parts = append(parts, r.alloc(f32(g, d)))
	}
	r.free(mods)

	// Self-attention: x, then q (projection, norm), k, v; x dies before
	// the attention itself.
	x := r.alloc(bld)
	heads := func(module string, rows int, norm bool) int {
		y := r.alloc(f32(b, rows, d))
		lr.record(r, module, b*rows, d)
		if !norm {
			return y
		}
		n := r.alloc(f32(b, rows, d))
		r.free(y)
		return n
	}
	q := heads("attn1.to_q", l, true)
	qr := r.alloc(bld)
	r.free(q)
	k := heads("attn1.to_k", l, true)
	kr := r.alloc(bld)
	r.free(k)
	v := heads("attn1.to_v", l, false)
	r.free(x)
	o := r.alloc(bld)
	r.free(qr, kr, v)
	a := r.alloc(bld)
	lr.record(r, "attn1.to_out.0", b*l, d)
	r.free(o)
	r.free(a)

	// Cross-attention to the projected text; with image conditioning the
	// same queries attend to the image tokens first, and that output is
	// added to the text attention's.
	var xn int
	if c.CrossAttnNorm {
		xn = r.alloc(bld)
	}
	q = heads("attn2.to_q", l, true)
	oi := 0
	if li > 0 {
		ki, vi := heads("attn2.add_k_proj", li, true), heads("attn2.add_v_proj", li, false)
		oi = r.alloc(bld)
		r.free(ki, vi)
	}
	k = heads("attn2.to_k", lt, true)
	v = heads("attn2.to_v", lt, false)
	o = r.alloc(bld)
	r.free(q, k, v)
	if oi != 0 {
		r.free(oi)
	}
	a = r.alloc(bld)
	lr.record(r, "attn2.to_out.0", b*l, d)
	r.free(o)
	if c.CrossAttnNorm {
		r.free(xn)
	}
	r.free(a)

	// Feed-forward, chunk by chunk (a smaller last chunk may take a size
	// class of its own).
	for _, rows := range ffn {
		fx := r.alloc(f32(rows, d))
		fa := r.alloc(f32(rows, c.FFNDim))
		lr.record(r, "ffn.net.0.proj", rows, c.FFNDim)
		r.free(fx)
		fy := r.alloc(f32(rows, d))
		lr.record(r, "ffn.net.2", rows, d)
		r.free(fa)
		r.free(fy)
	}
	r.free(parts...)
}

// wanLayerWork counts one block's flops: q, k, v, o of both attentions,
// the two attention products, the feed-forward, and the elementwise
// traffic of norms, RoPE, gates and residual adds.
func wanLayerWork(p *Profile, b, l, lt, li int) work {
	c := p.Wan
	d, ff := float64(c.InnerDim()), float64(c.FFNDim)
	bf, lf, ltf, lif := float64(b), float64(l), float64(lt), float64(li)
	gemm := 2 * bf * (4*lf*d*d + 2*lf*d*d + 2*ltf*d*d + 2*lif*d*d + 2*lf*d*ff)
	attn := 4 * bf * (lf*lf*d + lf*ltf*d + lf*lif*d)
	mem := 4 * bf * lf * (30*d + 3*ff)
	return work{gemm: gemm, attn: attnFlops(attn, c.AttentionHeadDim), mem: mem}
}

// LoRARanks are the LoRA adapters on the transformer's Linears, by
// diffusers module name ("blocks.3.attn1.to_q"): their ranks in the order
// model/wan applies them (Request.LoRA).
type LoRARanks map[string][]int

// loraPass is a pass's adapters: those outside the blocks by full name,
// and each block's named within it ("attn1.to_q").
type loraPass struct {
	top    LoRARanks
	blocks []LoRARanks
}

// split sorts the adapters into a pass's of layers blocks, once per
// transformer rather than per pass.
func (lr LoRARanks) split(layers int) loraPass {
	if len(lr) == 0 {
		return loraPass{}
	}
	lp := loraPass{top: LoRARanks{}, blocks: make([]LoRARanks, layers)}
	for m, ranks := range lr {
		idx, rest, ok := strings.Cut(strings.TrimPrefix(m, "blocks."), ".")
		i, err := strconv.Atoi(idx)
		if !strings.HasPrefix(m, "blocks.") || !ok || err != nil || i < 0 || i >= layers {
			lp.top[m] = ranks
			continue
		}
		if lp.blocks[i] == nil {
			lp.blocks[i] = LoRARanks{}
		}
		lp.blocks[i][rest] = ranks
	}
	return lp
}

// block is block i's adapters (nil: none).
func (lp loraPass) block(i int) LoRARanks {
	if i < len(lp.blocks) {
		return lp.blocks[i]
	}
	return nil
}

// record replays model/wan's project past its Linear (rows × out, just
// allocated) for the module's adapters: each one's rank-wide x·Aᵀ, then
// its product added a block of rows at a time (a temporary per block,
// wan.RowBlockBytes), and the x·Aᵀ freed once all are added.
func (lr LoRARanks) record(r *recorder, module string, rows, out int) {
	ranks := lr[module]
	if len(ranks) == 0 {
		return
	}
	step := max(1, wan.RowBlockBytes()/(4*max(out, 1)))
	lows := make([]int, 0, len(ranks))
	for _, rank := range ranks {
		lows = append(lows, r.alloc(f32(rows, rank)))
		for start := 0; start < rows; start += step {
			r.free(r.alloc(f32(min(step, rows-start), out)))
		}
	}
	r.free(lows...)
}
