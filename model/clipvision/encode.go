package clipvision

import (
	"errors"
	"fmt"
	"math"

	"ferry/residency"
	"ferry/tensor"
)

// quickGELUScale is quick_gelu's 1.702 in x·sigmoid(1.702x).
const quickGELUScale = 1.702

// Encode runs the tower over pixels [batch, num_channels, image_size,
// image_size] (channels-first float32, CLIPImageProcessor's pixel_values)
// and returns hidden_states[-2]: [batch, 1 + num_patches, hidden_size]
// (the class token first), float32, on ops' device; the caller frees it.
//
// Besides one phase's temporaries, a pass holds the hidden state
// [B, T, D]; the attention never materialises more than the backend's
// tiles, and the MLP holds [B, T, intermediate_size] while it runs.
func (m *Model) Encode(r residency.Runner, ops *tensor.Ops, pixels []float32, batch int) (*tensor.Tensor, error) {
	if err := m.check(pixels, batch); err != nil {
		return nil, err
	}
	if err := ops.Err(); err != nil {
		return nil, fmt.Errorf("clipvision: ops carry an earlier error: %w", err)
	}
	var x *tensor.Tensor
	blocks := m.comp.Blocks
	if err := r.Run(blocks[0], func() error {
		x = m.embed.apply(ops, pixels, batch, &m.cfg)
		return ops.Err()
	}); err != nil {
		x.Free()
		return nil, fmt.Errorf("clipvision: %s: %w", blocks[0].Name, err)
	}
	for i := range m.layers {
		b := blocks[1+i]
		if err := r.Run(b, func() error {
			m.layers[i].apply(ops, x, &m.cfg, m.act)
			return ops.Err()
		}); err != nil {
			x.Free()
			return nil, fmt.Errorf("clipvision: %s: %w", b.Name, err)
		}
	}
	return x, nil
}

// check validates the request before any compute.
func (m *Model) check(pixels []float32, batch int) error {
	c := &m.cfg
	switch {
	case m.actErr != nil:
		return m.actErr
	case m.comp == nil:
		return errors.New("clipvision: Encode before Component: declare and register the component first")
	case c.NumHiddenLayers < 1:
		return fmt.Errorf("clipvision: num_hidden_layers %d: hidden_states[-2] needs at least one layer", c.NumHiddenLayers)
	case batch <= 0:
		return fmt.Errorf("clipvision: batch %d must be > 0", batch)
	}
	if want := batch * c.NumChannels * c.ImageSize * c.ImageSize; len(pixels) != want {
		return fmt.Errorf("clipvision: %d pixel values, want batch %d × %d channels × %d×%d = %d (the processor's crop must equal image_size)",
			len(pixels), batch, c.NumChannels, c.ImageSize, c.ImageSize, want)
	}
	return nil
}

// apply is CLIPVisionEmbeddings then pre_layrnorm: [class; patches] +
// positions, normalised. Returns [B, T, D].
func (e *embedWeights) apply(ops *tensor.Ops, pixels []float32, batch int, c *Config) *tensor.Tensor {
	d, s, p := c.HiddenSize, c.ImageSize, c.PatchSize
	img := ops.Upload(pixels, batch, c.NumChannels, s, s)
	conv := ops.Conv(img, e.Patch, nil, []int{p, p}, []int{0, 0}) // [B, D, g, g]
	img.Free()
	ops.Fail(conv.SetShape(batch, d, c.NumPatches()))
	patches := ops.Permute(conv, 0, 2, 1) // [B, P, D]
	conv.Free()

	class := e.classRows(ops, batch, d)
	x := ops.Concat(1, class, patches) // [B, T, D]
	tensor.Free(class, patches)
	ops.AddInPlace(x, e.Position) // [T, D] broadcasts over the batch
	out := ops.LayerNorm(x, e.PreNormW, e.PreNormB, float32(c.LayerNormEps))
	x.Free()
	return out
}

// classRows is the class embedding repeated per image, [B, 1, D].
func (e *embedWeights) classRows(ops *tensor.Ops, batch, d int) *tensor.Tensor {
	view, err := e.Class.Reshape(1, 1, d)
	if err != nil {
		ops.Fail(fmt.Errorf("class_embedding: %w", err))
		return ops.Zeros(batch, 1, d)
	}
	zeros := ops.Zeros(batch, 1, d)
	out := ops.Add(zeros, view)
	zeros.Free()
	return out
}

// apply is CLIPEncoderLayer on x [B, T, D] in place: pre-norm attention,
// then pre-norm MLP, each residual.
func (l *layerWeights) apply(ops *tensor.Ops, x *tensor.Tensor, c *Config, act activation) {
	eps := float32(c.LayerNormEps)
	h := ops.LayerNorm(x, l.Norm1.W, l.Norm1.B, eps)
	a := l.attend(ops, h, c)
	h.Free()
	ops.AddInPlace(x, a)
	a.Free()

	h = ops.LayerNorm(x, l.Norm2.W, l.Norm2.B, eps)
	f := ops.Linear(h, l.FC1.W, l.FC1.B)
	h.Free()
	act.apply(ops, f)
	out := ops.Linear(f, l.FC2.W, l.FC2.B)
	f.Free()
	ops.AddInPlace(x, out)
	out.Free()
}

// attend is CLIPAttention: softmax(q·kᵀ/√head_dim)·v per head, with
// biased projections and no mask (vision tokens all see each other).
func (l *layerWeights) attend(ops *tensor.Ops, x *tensor.Tensor, c *Config) *tensor.Tensor {
	b, n, heads, hd := x.Dim(0), x.Dim(1), c.NumAttentionHeads, c.HeadDim()
	q := ops.Linear(x, l.Q.W, l.Q.B)
	k := ops.Linear(x, l.K.W, l.K.B)
	v := ops.Linear(x, l.V.W, l.V.B)
	for _, t := range []*tensor.Tensor{q, k, v} {
		ops.Fail(t.SetShape(b, n, heads, hd))
	}
	o := ops.Attention(q, k, v, nil, float32(1/math.Sqrt(float64(hd))))
	tensor.Free(q, k, v)
	ops.Fail(o.SetShape(b, n, heads*hd))
	out := ops.Linear(o, l.Out.W, l.Out.B)
	o.Free()
	return out
}

// apply runs the activation on h in place.
func (a activation) apply(ops *tensor.Ops, h *tensor.Tensor) {
	if !a.quickGELU {
		ops.UnaryInPlace(h, a.op)
		return
	}
	g := ops.Affine(h, quickGELUScale, 0)
	ops.UnaryInPlace(g, tensor.Sigmoid)
	ops.MulInPlace(h, g)
	g.Free()
}
