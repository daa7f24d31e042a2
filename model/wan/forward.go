package wan

import (
	"errors"
	"fmt"

	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
)

// pass is the state one forward pass carries from block to block.
type pass struct {
	batch, tokens int
	grid          ropeGrid
	hidden        *tensor.Tensor // [B, L, dim], updated in place by every block
	// temb and mods are per sample ([B, dim] and [B, 6, dim]) or, with
	// per-token timesteps, per distinct timestep ([G, dim], [G, 6, dim];
	// runs says which tokens use which row).
	temb     *tensor.Tensor // time embedding (the output adaLN's input)
	mods     *tensor.Tensor // time_proj output (the blocks' adaLN input)
	text     *tensor.Tensor // projected text context [B, textKeep, dim]
	image    *tensor.Tensor // image tokens the image attention reads [B, Limg, dim]; nil without image conditioning
	runs     []tokenRun     // per-token timesteps (see groupTimesteps); nil with one timestep per sample
	cos, sin *tensor.Tensor // RoPE tables [L, head_dim/2], float64

	// textKeep is the context rows projected: Ltext, or fewer when the
	// zero padding folds into one row (textfold.go), which textBias
	// [B, 1, 1, textKeep] then weighs by how many rows it stands for.
	textKeep int
	textBias *tensor.Tensor
}

func (p *pass) free() {
	tensor.Free(p.hidden, p.temb, p.mods, p.text, p.textBias, p.image, p.cos, p.sin)
}

// uploadRope sets p.cos and p.sin, the RoPE tables of p's token grid for
// heads of headDim.
func (p *pass) uploadRope(ops *tensor.Ops, headDim int) {
	cos, sin := p.grid.ropeHalves()
	p.cos = ops.UploadF64(cos, p.tokens, headDim/2)
	p.sin = ops.UploadF64(sin, p.tokens, headDim/2)
}

// Inputs are what a forward pass is conditioned on besides the latents.
type Inputs struct {
	// Timesteps holds one timestep per sample ([B]; they may differ): the
	// Wan 2.1 and Wan 2.2 A14B pipelines.
	Timesteps []float32
	// TokenTimesteps holds one timestep per token instead, [B, L] row-major
	// with L = (F/pt)·(H/ph)·(W/pw) tokens in (frame, row, column) order:
	// the expand_timesteps of the Wan 2.2 TI2V pipelines (ExpandTimesteps
	// builds it). Set exactly one of Timesteps and TokenTimesteps. The
	// modulation is computed once per distinct value, never per token.
	TokenTimesteps []float32
	// Context is the text encoder's hidden states [B, Ltext, text_dim].
	Context *tensor.Tensor
	// TextRows, when given, holds one count per sample: the leading rows
	// of its context that hold the prompt; the rows after them must be
	// zeros (the pipelines' padding to max_sequence_length). The pass then
	// projects that padding once and attends it as one key weighted by
	// its row count (textfold.go): the reference's result up to rounding,
	// with less work. nil attends every row as given.
	TextRows []int
	// Image is the image encoder's hidden states for image-conditioned
	// checkpoints (Config.HasImage) and must be nil otherwise: float32
	// [B, Limg, image_dim] (CLIP's penultimate layer, Limg 257) or, with
	// pos_embed_seq_len P (FLF2V), [2B, P/2, image_dim] whose rows 2b and
	// 2b+1 (first and last frame) are sample b's. Like the reference, the
	// attentions split the concatenation [image; text] where
	// ImageTextSplit says, which gives back the two parts when Ltext is
	// 512 (the pipelines' default).
	Image *tensor.Tensor
}

// Forward runs the transformer: latents [B, in_channels, F, H, W] (float32
// on ops' device), one timestep per sample (they may differ), the text
// encoder's hidden states context [B, Ltext, text_dim]. It returns the
// prediction [B, out_channels, F, H, W] on ops' device; the caller frees
// it. F, H and W must be multiples of the patch size. Image-conditioned
// checkpoints and per-token timesteps go through ForwardInputs.
//
// Besides one block's temporaries a pass holds the hidden states
// [B, L, dim], the projected text [B, Ltext, dim] and the RoPE tables
// [L, head_dim/2] in float64. Nothing is kept between passes: the RoPE
// tables are rebuilt on the host each pass (from per-axis tables, without
// per-token trigonometry) and the text projection and the cross-attention
// keys and values are recomputed (about 5 GFLOP per block against some
// 9 TFLOP for the 1.3B model at 480×832×81; far less when the text's zero
// padding folds, see Inputs.TextRows), so the device holds no more after
// a pass than before it.
func (m *Model) Forward(r residency.Runner, ops *tensor.Ops, latents *tensor.Tensor, timesteps []float32, context *tensor.Tensor) (*tensor.Tensor, error) {
	return m.ForwardInputs(r, ops, latents, Inputs{Timesteps: timesteps, Context: context})
}

// ForwardInputs is Forward with every input the reference's forward
// takes: per-sample or per-token timesteps and, for image-to-video
// checkpoints, the image embeddings (see Inputs). An image-conditioned
// pass also holds the image tokens [B, Limg, dim].
func (m *Model) ForwardInputs(r residency.Runner, ops *tensor.Ops, latents *tensor.Tensor, in Inputs) (*tensor.Tensor, error) {
	if m.comp == nil {
		return nil, errors.New("wan: Component must be declared (and registered) before Forward")
	}
	if err := ops.Err(); err != nil {
		return nil, fmt.Errorf("wan: ops already failed: %w", err)
	}
	p, ts, err := m.newPass(latents, in)
	if err != nil {
		return nil, err
	}
	defer p.free()

	p.uploadRope(ops, m.cfg.AttentionHeadDim)

	blocks := m.comp.Blocks
	if err := runBlock(r, ops, blocks[0], func() { m.embedForward(ops, p, latents, ts, in) }); err != nil {
		return nil, err
	}
	for i := range m.layers {
		l := &m.layers[i]
		if err := runBlock(r, ops, blocks[1+i], func() { m.layerForward(ops, l, p) }); err != nil {
			return nil, err
		}
	}
	var out *tensor.Tensor
	if err := runBlock(r, ops, blocks[len(blocks)-1], func() { out = m.outForward(ops, p) }); err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

// newPass validates a pass's inputs and sets up its token grid and, with
// per-token timesteps, their runs. It returns the timesteps to embed: one
// per sample, or one per distinct per-token value.
func (m *Model) newPass(latents *tensor.Tensor, in Inputs) (*pass, []float32, error) {
	perToken := in.TokenTimesteps != nil
	if perToken == (in.Timesteps != nil) {
		return nil, nil, errors.New("wan: set exactly one of Inputs.Timesteps (one per sample) and Inputs.TokenTimesteps (one per token)")
	}
	ts := in.Timesteps
	if perToken && latents != nil && latents.Rank() > 0 {
		// checkInputs counts per-sample timesteps; per-token ones are
		// counted below, once the token grid is known.
		ts = make([]float32, latents.Dim(0))
	}
	if err := m.checkInputs(latents, ts, in.Context); err != nil {
		return nil, nil, err
	}
	if err := m.checkImage(latents.Dim(0), in.Image); err != nil {
		return nil, nil, err
	}
	keep, err := m.textKeep(in)
	if err != nil {
		return nil, nil, err
	}
	s := latents.Shape()
	grid, err := m.cfg.newRopeGrid(s[2], s[3], s[4])
	if err != nil {
		return nil, nil, err
	}
	p := &pass{batch: s[0], tokens: grid.tokens(), grid: grid, textKeep: keep}
	if !perToken {
		return p, in.Timesteps, nil
	}
	if len(in.TokenTimesteps) != p.batch*p.tokens {
		return nil, nil, fmt.Errorf("wan: %d per-token timesteps for %d samples of %d tokens (want [B, L] = %d)",
			len(in.TokenTimesteps), p.batch, p.tokens, p.batch*p.tokens)
	}
	values, runs := groupTimesteps(in.TokenTimesteps, p.batch, p.tokens)
	if m.ungrouped {
		values, runs = ungroupedTimesteps(in.TokenTimesteps, p.batch, p.tokens)
	}
	p.runs = runs
	return p, values, nil
}

// textContextLen is the text length the reference's attention processor
// assumes when it splits [image; text] ("hardcoded for now" in diffusers).
const textContextLen = 512

// ImageTextSplit is how the reference's attention processor divides the
// concatenation [image; text] of imageRows and textRows tokens: the image
// attention reads the first image of them and the text attention the
// other text. It cuts at length−512 with Python's slice rules, so a text
// of 512 tokens gives back the two parts, a longer or shorter one moves
// rows across (a negative cut counts from the end; one still before the
// start leaves the image attention nothing, and it then adds nothing, as
// an attention over no keys gives zeros in PyTorch).
func ImageTextSplit(imageRows, textRows int) (image, text int) {
	n := imageRows + textRows
	cut := n - textContextLen
	if cut < 0 {
		cut = max(cut+n, 0)
	}
	return cut, n - cut
}

// checkImage validates the image embeddings against the config.
func (m *Model) checkImage(batch int, image *tensor.Tensor) error {
	c := m.cfg
	if !c.HasImage() {
		if image != nil {
			return fmt.Errorf("wan: image embeddings %v given to a transformer without image conditioning (no image_dim in its config)", image)
		}
		return nil
	}
	if image == nil {
		return fmt.Errorf("wan: this transformer is image-conditioned (image_dim %d): pass the image encoder's hidden states in Inputs.Image", *c.ImageDim)
	}
	s := image.Shape()
	if image.Rank() != 3 || image.DType() != dtype.F32 || s[2] != *c.ImageDim || s[1] == 0 {
		return fmt.Errorf("wan: image embeddings %v, want float32 [B, Limg, %d]", image, *c.ImageDim)
	}
	if p := c.ImageTokens(); p > 0 {
		// WanImageEmbedding views [2B, P/2, E] as [B, P, E] to add pos_embed.
		if s[0] != 2*batch || 2*s[1] != p {
			return fmt.Errorf("wan: image embeddings %v, want [%d, %d, %d]: two images per sample of %d tokens each (pos_embed_seq_len %d)",
				image, 2*batch, p/2, *c.ImageDim, p/2, p)
		}
	} else if s[0] != batch {
		return fmt.Errorf("wan: image embeddings %v, want float32 [%d, Limg, %d]", image, batch, *c.ImageDim)
	}
	return nil
}

// checkInputs validates the shapes Forward is given.
func (m *Model) checkInputs(latents *tensor.Tensor, timesteps []float32, context *tensor.Tensor) error {
	c := m.cfg
	if latents == nil || context == nil {
		return errors.New("wan: latents and context are required")
	}
	s := latents.Shape()
	if latents.Rank() != 5 || s[0] == 0 || s[1] != c.InChannels || latents.DType() != dtype.F32 {
		return fmt.Errorf("wan: latents %v, want float32 [B, %d, F, H, W]", latents, c.InChannels)
	}
	for i, n := range s[2:] {
		if n%c.PatchSize[i] != 0 {
			return fmt.Errorf("wan: latent %v: dim %d is not a multiple of the patch size %v", s, 2+i, c.PatchSize)
		}
	}
	if len(timesteps) != s[0] {
		return fmt.Errorf("wan: %d timesteps for a batch of %d", len(timesteps), s[0])
	}
	cs := context.Shape()
	if context.Rank() != 3 || cs[0] != s[0] || cs[2] != c.TextDim || cs[1] == 0 || context.DType() != dtype.F32 {
		return fmt.Errorf("wan: context %v, want float32 [%d, Ltext, %d]", context, s[0], c.TextDim)
	}
	return nil
}

// reshape changes t's shape in place, recording a failure in ops.
func reshape(ops *tensor.Ops, t *tensor.Tensor, shape ...int) {
	if err := t.SetShape(shape...); err != nil {
		ops.Fail(err)
	}
}

// view is t.Reshape, recording a failure in ops (and returning t itself,
// which later ops then refuse by shape).
func view(ops *tensor.Ops, t *tensor.Tensor, shape ...int) *tensor.Tensor {
	v, err := t.Reshape(shape...)
	if err != nil {
		ops.Fail(err)
		return t
	}
	return v
}

// embedForward is the "embed" block: patch embedding, time, text and
// image embeddings. timesteps has one value per row of p.temb: per sample,
// or per distinct value with per-token timesteps.
func (m *Model) embedForward(ops *tensor.Ops, p *pass, latents *tensor.Tensor, timesteps []float32, in Inputs) {
	c, w, dim := m.cfg, &m.embed, m.cfg.InnerDim()

	patches := m.patchify(ops, latents)
	p.hidden = ops.Linear(patches, view(ops, w.Patch.W, dim, -1), w.Patch.B)
	patches.Free()

	// WanTimeTextImageEmbedding: temb = time_embedder(sinusoid(t));
	// timestep_proj = time_proj(silu(temb)), unflattened to [B, 6, dim].
	freq := ops.Upload(timestepEmbedding(timesteps, c.FreqDim), len(timesteps), c.FreqDim)
	h := project(ops, freq, w.Time1)
	freq.Free()
	ops.UnaryInPlace(h, tensor.SiLU)
	p.temb = project(ops, h, w.Time2)
	h.Free()
	a := ops.Unary(p.temb, tensor.SiLU)
	p.mods = project(ops, a, w.TimeProj)
	a.Free()
	reshape(ops, p.mods, len(timesteps), 6, dim)

	m.projectText(ops, p, in)
	if in.Image != nil {
		m.imageForward(ops, p, in.Image, in.Context.Dim(1))
	}
}

// patchify turns latents [B, C, F, H, W] into the rows a Conv3d with
// kernel = stride = patch would read: [B, L, C·pt·ph·pw], tokens in
// (frame, row, column) order, each row ordered (C, pt, ph, pw) like the
// conv weight. A Linear over these rows with the weight viewed as
// [dim, C·pt·ph·pw] is the convolution.
func (m *Model) patchify(ops *tensor.Ops, x *tensor.Tensor) *tensor.Tensor {
	s, ps := x.Shape(), m.cfg.PatchSize
	b, ch := s[0], s[1]
	f, h, w := s[2]/ps[0], s[3]/ps[1], s[4]/ps[2]
	v := view(ops, x, b, ch, f, ps[0], h, ps[1], w, ps[2])
	out := ops.Permute(v, 0, 2, 4, 6, 1, 3, 5, 7)
	reshape(ops, out, b, f*h*w, ch*m.cfg.PatchVolume())
	return out
}

// layerForward is one WanTransformerBlock, updating p.hidden in place.
func (m *Model) layerForward(ops *tensor.Ops, l *layerWeights, p *pass) {
	c, eps := &l.Core, float32(m.cfg.Eps)

	// (scale_shift_table + temb).chunk(6, dim=1): [B, 1, dim] each, or
	// [G, 1, dim] per distinct timestep.
	mods := ops.Add(p.mods, c.Table)
	parts := ops.Split(mods, 1, 1, 1, 1, 1, 1, 1)
	mods.Free()
	defer tensor.Free(parts...)
	shift, scale, gate := parts[0], parts[1], parts[2]
	ffShift, ffScale, ffGate := parts[3], parts[4], parts[5]
	// 1 + scale, once per block rather than per use.
	ops.AffineInPlace(scale, 1, 1)
	ops.AffineInPlace(ffScale, 1, 1)

	// 1. Self-attention on norm1(h)·(1+scale)+shift, gated into the residual.
	a := m.selfAttention(ops, &c.Attn1, modulateTokens(ops, p, p.hidden, shift, scale, eps), p)
	gateTokens(ops, p, a, gate)
	ops.AddInPlace(p.hidden, a)
	a.Free()

	// 2. Cross-attention on norm2(h) (nn.Identity without cross_attn_norm),
	// plus the image attention of image-conditioned checkpoints, added
	// ungated.
	x := p.hidden
	if m.cfg.CrossAttnNorm {
		x = ops.LayerNorm(p.hidden, l.Norm2.W, l.Norm2.B, eps)
	}
	if p.image != nil {
		a = m.crossAttentionImage(ops, &c.Attn2, &l.Image, x, p)
	} else {
		a = m.crossAttention(ops, &c.Attn2, x, p)
	}
	if x != p.hidden {
		x.Free()
	}
	ops.AddInPlace(p.hidden, a)
	a.Free()

	// 3. Feed-forward on norm3(h)·(1+c_scale)+c_shift, gated.
	m.feedForward(ops, c, p, ffShift, ffScale, ffGate)
}

// modulate is FP32LayerNorm without affine, then ·(1+scale) + shift, in
// the reference's order (onePlusScale already holds 1+scale).
func modulate(ops *tensor.Ops, h, shift, onePlusScale *tensor.Tensor, eps float32) *tensor.Tensor {
	x := ops.LayerNorm(h, nil, nil, eps)
	ops.MulInPlace(x, onePlusScale)
	ops.AddInPlace(x, shift)
	return x
}

// selfAttention is attn1: q, k, v from x, RMSNorm over all heads on q and
// k, RoPE on q and k, softmax(q·kᵀ/√d)·v, output projection. It frees x
// as soon as v is projected, so that x is not held through the attention.
func (m *Model) selfAttention(ops *tensor.Ops, w *attention, x *tensor.Tensor, p *pass) *tensor.Tensor {
	q := m.headsOf(ops, x, w.Q, w.NormQ)
	qr := ops.Rope(q, p.cos, p.sin)
	q.Free()
	k := m.headsOf(ops, x, w.K, w.NormK)
	kr := ops.Rope(k, p.cos, p.sin)
	k.Free()
	v := m.headsOf(ops, x, w.V, nil)
	x.Free()
	return m.attend(ops, w, qr, kr, v, nil)
}

// crossAttention is attn2: q from x, k and v from the projected text, the
// same norms, no RoPE and no mask (the bias only weighs folded padding).
func (m *Model) crossAttention(ops *tensor.Ops, w *attention, x *tensor.Tensor, p *pass) *tensor.Tensor {
	q := m.headsOf(ops, x, w.Q, w.NormQ)
	k := m.headsOf(ops, p.text, w.K, w.NormK)
	v := m.headsOf(ops, p.text, w.V, nil)
	return m.attend(ops, w, q, k, v, p.textBias)
}

// headsOf projects x [B, L, dim], applies the RMSNorm over the whole width
// when norm is given (rms_norm_across_heads: before the heads are split),
// and returns [B, L, heads, head_dim].
func (m *Model) headsOf(ops *tensor.Ops, x *tensor.Tensor, proj linear, norm *tensor.Tensor) *tensor.Tensor {
	y := project(ops, x, proj)
	if norm != nil {
		n := ops.RMSNorm(y, norm, float32(m.cfg.Eps))
		y.Free()
		y = n
	}
	reshape(ops, y, x.Dim(0), x.Dim(1), m.cfg.NumAttentionHeads, m.cfg.AttentionHeadDim)
	return y
}

// attend runs scaled dot-product attention with scale 1/√head_dim (SDPA's
// default) and bias (nil for none), merges the heads and applies
// to_out.0; it frees q, k and v.
func (m *Model) attend(ops *tensor.Ops, w *attention, q, k, v, bias *tensor.Tensor) *tensor.Tensor {
	scale := m.attnScale()
	o := ops.Attention(q, k, v, bias, scale)
	tensor.Free(q, k, v)
	reshape(ops, o, o.Dim(0), o.Dim(1), m.cfg.InnerDim())
	out := project(ops, o, w.Out)
	o.Free()
	return out
}

// feedForward adds gate·ffn(norm3(h)·(1+scale)+shift) to p.hidden, over
// the whole batch or, with Options.FFNChunk, over chunks of one sample's
// tokens at a time (views of p.hidden updated in place). With per-token
// timesteps it goes run by run (see ffnRuns).
func (m *Model) feedForward(ops *tensor.Ops, c *blockWeights, p *pass, shift, onePlusScale, gate *tensor.Tensor) {
	chunk := m.Options.FFNChunk
	if p.runs != nil {
		m.ffnRuns(ops, c, p, shift, onePlusScale, gate)
		return
	}
	if chunk <= 0 || chunk >= p.tokens {
		m.ffnRows(ops, c, p.hidden, shift, onePlusScale, gate)
		return
	}
	dim := m.cfg.InnerDim()
	rows := view(ops, p.hidden, p.batch*p.tokens, dim)
	for b := range p.batch {
		sh, sc, g := sampleOf(ops, shift, b), sampleOf(ops, onePlusScale, b), sampleOf(ops, gate, b)
		for start := 0; start < p.tokens && ops.Err() == nil; start += chunk {
			n := min(chunk, p.tokens-start)
			part, err := rows.Rows(b*p.tokens+start, n)
			if err != nil {
				ops.Fail(err)
				return
			}
			m.ffnRows(ops, c, view(ops, part, 1, n, dim), sh, sc, g)
		}
	}
}

// ffnRuns is feedForward with per-token timesteps: each run of tokens
// sharing a timestep with its group's modulation, in chunks of at most
// Options.FFNChunk tokens (a chunk never spans two runs).
func (m *Model) ffnRuns(ops *tensor.Ops, c *blockWeights, p *pass, shift, onePlusScale, gate *tensor.Tensor) {
	chunk := m.Options.FFNChunk
	forEachRun(ops, p, p.hidden, func(rows *tensor.Tensor, g int) {
		sh, sc, gt := sampleOf(ops, shift, g), sampleOf(ops, onePlusScale, g), sampleOf(ops, gate, g)
		n, dim := rows.Dim(1), rows.Dim(2)
		if chunk <= 0 || chunk >= n {
			m.ffnRows(ops, c, rows, sh, sc, gt)
			return
		}
		flat := view(ops, rows, n, dim)
		for start := 0; start < n && ops.Err() == nil; start += chunk {
			k := min(chunk, n-start)
			part, err := flat.Rows(start, k)
			if err != nil {
				ops.Fail(err)
				return
			}
			m.ffnRows(ops, c, view(ops, part, 1, k, dim), sh, sc, gt)
		}
	})
}

// sampleOf views row b of a [B, 1, dim] modulation as [1, 1, dim] (a
// sample's, or a group's with per-token timesteps).
func sampleOf(ops *tensor.Ops, t *tensor.Tensor, b int) *tensor.Tensor {
	v, err := t.Rows(b, 1)
	if err != nil {
		ops.Fail(err)
		return t
	}
	return v
}

// ffnRows is the gated feed-forward over h [b, n, dim], in place.
func (m *Model) ffnRows(ops *tensor.Ops, c *blockWeights, h, shift, onePlusScale, gate *tensor.Tensor) {
	x := modulate(ops, h, shift, onePlusScale, float32(m.cfg.Eps))
	a := project(ops, x, c.FF1)
	x.Free()
	ops.UnaryInPlace(a, tensor.GELUTanh)
	y := project(ops, a, c.FF2)
	a.Free()
	ops.MulInPlace(y, gate)
	ops.AddInPlace(h, y)
	y.Free()
}

// outForward is the "out" block: norm_out(h)·(1+scale)+shift with
// (shift, scale) = scale_shift_table + temb (per sample, or per token
// through its group), proj_out, unpatchify.
func (m *Model) outForward(ops *tensor.Ops, p *pass) *tensor.Tensor {
	w, dim := &m.out, m.cfg.InnerDim()
	mods := ops.Add(view(ops, p.temb, p.temb.Dim(0), 1, dim), w.Table)
	parts := ops.Split(mods, 1, 1, 1)
	mods.Free()
	defer tensor.Free(parts...)
	shift, scale := parts[0], parts[1]
	ops.AffineInPlace(scale, 1, 1)
	x := modulateTokens(ops, p, p.hidden, shift, scale, float32(m.cfg.Eps))
	y := project(ops, x, w.Proj)
	x.Free()
	return m.unpatchify(ops, y, p)
}

// unpatchify turns proj_out's [B, L, pt·ph·pw·C] (channels innermost, as
// the reference reshapes them) into [B, C, F, H, W]; it frees y.
func (m *Model) unpatchify(ops *tensor.Ops, y *tensor.Tensor, p *pass) *tensor.Tensor {
	ps, n, ch := m.cfg.PatchSize, p.grid.n, m.cfg.OutChannels
	reshape(ops, y, p.batch, n[0], n[1], n[2], ps[0], ps[1], ps[2], ch)
	out := ops.Permute(y, 0, 7, 1, 4, 2, 5, 3, 6)
	y.Free()
	reshape(ops, out, p.batch, ch, n[0]*ps[0], n[1]*ps[1], n[2]*ps[2])
	return out
}
