package wan

import "ferry/tensor"

// imageNormEps is the eps of WanImageEmbedding's two norms:
// FP32LayerNorm(features) keeps nn.LayerNorm's default, not the config's
// eps.
const imageNormEps = 1e-5

// imageForward is WanImageEmbedding (part of the embed block) and the
// attention processor's split of [image; text]: it sets p.image to the
// rows the image attention reads (nil when the split leaves it none) and
// replaces p.text by the rows the text attention reads. image is
// Inputs.Image (checked by checkImage), textRows the context's row count
// (p.text holds fewer when the padding folded; the split then gives the
// parts back, Config.FoldsText).
func (m *Model) imageForward(ops *tensor.Ops, p *pass, image *tensor.Tensor, textRows int) {
	w := &m.embed.Image
	x := image
	if m.embed.PosEmbed != nil {
		// FLF2V: both images' tokens as one sequence, plus the learned
		// position embedding.
		x = ops.Add(view(ops, image, p.batch, m.cfg.ImageTokens(), *m.cfg.ImageDim), m.embed.PosEmbed)
	}
	n := ops.LayerNorm(x, w.Norm1.W, w.Norm1.B, imageNormEps)
	if x != image {
		x.Free()
	}
	// FeedForward(activation_fn="gelu"): exact GELU, not the tanh form.
	h := project(ops, n, w.FF1)
	n.Free()
	ops.UnaryInPlace(h, tensor.GELUErf)
	y := project(ops, h, w.FF2)
	h.Free()
	img := ops.LayerNorm(y, w.Norm2.W, w.Norm2.B, imageNormEps)
	y.Free()

	// The reference concatenates [image; text] and its attention processor
	// splits that again (ImageTextSplit). With a 512-token text (what the
	// pipelines pass) that gives back the two parts; otherwise rows cross
	// over, as in the reference.
	rows := img.Dim(1)
	cut, rest := ImageTextSplit(rows, textRows)
	if cut == rows {
		p.image = img
		return
	}
	ctx := ops.Concat(1, img, p.text)
	tensor.Free(img, p.text)
	if cut == 0 {
		// No image rows: the reference's image attention adds zeros, so
		// the blocks take the text path alone.
		p.text = ctx
		return
	}
	p.image = ops.Narrow(ctx, 1, 0, cut)
	p.text = ops.Narrow(ctx, 1, cut, rest)
	ctx.Free()
}

// crossAttentionImage is attn2 of an image-conditioned block: the text
// attention of crossAttention plus an attention of the same queries over
// the image tokens (keys through add_k_proj and norm_added_k, values
// through add_v_proj), summed before the output projection.
func (m *Model) crossAttentionImage(ops *tensor.Ops, w *attention, iw *imageAttention, x *tensor.Tensor, p *pass) *tensor.Tensor {
	q := m.headsOf(ops, x, w.Q, w.NormQ)
	ki := m.headsOf(ops, p.image, iw.K, iw.NormK)
	vi := m.headsOf(ops, p.image, iw.V, nil)
	scale := m.attnScale()
	oi := ops.Attention(q, ki, vi, nil, scale)
	tensor.Free(ki, vi)
	k := m.headsOf(ops, p.text, w.K, w.NormK)
	v := m.headsOf(ops, p.text, w.V, nil)
	o := ops.Attention(q, k, v, p.textBias, scale)
	tensor.Free(q, k, v)
	// hidden_states + hidden_states_img (elementwise, so the order of the
	// operands does not change the sum).
	ops.AddInPlace(o, oi)
	oi.Free()
	reshape(ops, o, o.Dim(0), o.Dim(1), m.cfg.InnerDim())
	out := project(ops, o, w.Out)
	o.Free()
	return out
}
