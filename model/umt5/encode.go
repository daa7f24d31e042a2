package umt5

import (
	"errors"
	"fmt"
	"math"

	"ferry/residency"
	"ferry/tensor"
)

// maskedBias is what transformers adds for a padded key:
// (1 - mask) * torch.finfo(float32).min. Added to a position bias of
// ordinary size it stays exactly this value in float32, and the padded key
// gets probability exp(min - max) = 0.
const maskedBias = -math.MaxFloat32

// Encode runs the encoder over ids [batch, seqLen] (row-major) and returns
// last_hidden_state [batch, seqLen, d_model], float32, on ops' device; the
// caller frees it. mask [batch, seqLen] holds 1 for real tokens and 0 for
// padding (nil: no padding). Padding only hides keys: padded positions
// still get outputs, as in the reference.
//
// Besides one phase's temporaries, a pass holds the hidden state
// [B, L, d_model], the padding mask [B, 1, 1, L] and the attention bias:
// [1, H, L, L] without padding, [B, H, L, L] with it. T5 keeps layer 0's
// bias to the end; UMT5 makes one per layer and frees it before the
// feed-forward.
func (m *Model) Encode(r residency.Runner, ops *tensor.Ops, ids, mask []int32, batch, seqLen int) (*tensor.Tensor, error) {
	if err := m.check(ids, mask, batch, seqLen); err != nil {
		return nil, err
	}
	if err := ops.Err(); err != nil {
		return nil, fmt.Errorf("umt5: ops carry an earlier error: %w", err)
	}
	p := &pass{m: m, ops: ops, batch: batch, seqLen: seqLen,
		buckets: bucketIDs(seqLen, m.cfg.NumBuckets, m.cfg.MaxDistance)}
	defer p.free()
	blocks := m.comp.Blocks
	if err := r.Run(blocks[0], func() error { return p.embed(ids, mask) }); err != nil {
		return nil, fmt.Errorf("umt5: %s: %w", blocks[0].Name, err)
	}
	for i := range m.layers {
		b := blocks[1+i]
		if err := r.Run(b, func() error { return p.layer(i) }); err != nil {
			return nil, fmt.Errorf("umt5: %s: %w", b.Name, err)
		}
	}
	var out *tensor.Tensor
	last := blocks[len(blocks)-1]
	if err := r.Run(last, func() error {
		out = ops.RMSNorm(p.x, m.final.Norm, float32(m.cfg.LayerNormEps))
		return ops.Err()
	}); err != nil {
		out.Free()
		return nil, fmt.Errorf("umt5: %s: %w", last.Name, err)
	}
	return out, nil
}

// check validates the request before any compute.
func (m *Model) check(ids, mask []int32, batch, seqLen int) error {
	switch {
	case m.actErr != nil:
		return m.actErr
	case m.comp == nil:
		return errors.New("umt5: Encode before Component: declare and register the component first")
	case batch <= 0 || seqLen <= 0:
		return fmt.Errorf("umt5: batch %d and sequence length %d must be > 0", batch, seqLen)
	case len(ids) != batch*seqLen:
		return fmt.Errorf("umt5: %d ids for batch %d × length %d", len(ids), batch, seqLen)
	case mask != nil && len(mask) != len(ids):
		return fmt.Errorf("umt5: mask has %d values for %d ids", len(mask), len(ids))
	}
	for i, v := range mask {
		if v != 0 && v != 1 {
			return fmt.Errorf("umt5: mask value %d at %d (want 0 or 1)", v, i)
		}
	}
	return nil
}

// pass is the state one Encode carries across blocks. Everything in it is
// an activation, freed by free whatever happens.
type pass struct {
	m             *Model
	ops           *tensor.Ops
	batch, seqLen int
	buckets       []int32 // [L, L] relative-position buckets

	x      *tensor.Tensor // hidden state [B, L, d_model]
	mask   *tensor.Tensor // additive padding mask [B, 1, 1, L]; nil without padding
	shared *tensor.Tensor // T5: layer 0's bias (mask included), reused by all layers
}

func (p *pass) free() { tensor.Free(p.x, p.mask, p.shared) }

// embed gathers the token rows and uploads the padding mask.
func (p *pass) embed(ids, mask []int32) error {
	table := p.m.embed.table()
	if table == nil {
		return fmt.Errorf("the checkpoint has neither %s nor %s", sharedName, tokensName)
	}
	if w := table.Shape()[1]; w != p.m.cfg.DModel {
		return fmt.Errorf("token table is %v, want width d_model = %d", table.Shape(), p.m.cfg.DModel)
	}
	p.x = table.Gather(p.ops, ids)
	p.ops.Fail(p.x.SetShape(p.batch, p.seqLen, p.m.cfg.DModel))
	p.mask = p.uploadMask(mask)
	return p.ops.Err()
}

// uploadMask returns the additive mask [B, 1, 1, L], or nil when no key is
// padded (the bias then stays [1, H, L, L], shared by the batch).
func (p *pass) uploadMask(mask []int32) *tensor.Tensor {
	padded := false
	add := make([]float32, len(mask))
	for i, v := range mask {
		if v == 0 {
			add[i], padded = maskedBias, true
		}
	}
	if !padded {
		return nil
	}
	return p.ops.Upload(add, p.batch, 1, 1, p.seqLen)
}

// layer runs encoder layer i on the hidden state in place.
func (p *pass) layer(i int) error {
	l, cfg := p.m.layers[i], &p.m.cfg
	bias := p.shared
	if cfg.hasBias(i) {
		table := l.relBias()
		if table == nil {
			return fmt.Errorf("%s is missing: %s needs it in this layer", layerPrefix(i)+"layer.0.SelfAttention.relative_attention_bias.weight", cfg.Variant)
		}
		b, err := p.positionBias(table)
		if err != nil {
			return err
		}
		bias = b
		if cfg.Variant == T5 {
			// T5Stack hands layer 0's bias (mask already added) to every
			// later layer.
			p.shared = b
		}
	}
	l.attend(p.ops, p.x, bias, cfg)
	if bias != p.shared {
		bias.Free() // UMT5's per-layer bias is dead before the feed-forward
	}
	l.feedForward(p.ops, p.x, cfg, p.m.act)
	return p.ops.Err()
}

// positionBias is compute_bias plus the padding mask: the table's rows for
// every (query, key) bucket, as [1, H, L, L], or [B, H, L, L] with padding.
func (p *pass) positionBias(table *tensor.Tensor) (*tensor.Tensor, error) {
	h, n := p.m.cfg.NumHeads, p.seqLen
	if s := table.Shape(); len(s) != 2 || s[0] != p.m.cfg.NumBuckets || s[1] != h {
		return nil, fmt.Errorf("relative_attention_bias is %v, want [%d %d] (buckets, heads)", s, p.m.cfg.NumBuckets, h)
	}
	ops := p.ops
	g := ops.Embedding(table, p.buckets) // [L·L, H]
	ops.Fail(g.SetShape(n, n, h))
	b := ops.Permute(g, 2, 0, 1) // [H, L, L]
	g.Free()
	ops.Fail(b.SetShape(1, h, n, n))
	if p.mask != nil {
		masked := ops.Add(b, p.mask) // [1,H,L,L] + [B,1,1,L] -> [B,H,L,L]
		b.Free()
		b = masked
	}
	if err := ops.Err(); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// attend is T5LayerSelfAttention: x += SelfAttention(norm(x)). Dropout is
// off (inference).
func (l *layer[F]) attend(ops *tensor.Ops, x, bias *tensor.Tensor, c *Config) {
	h := ops.RMSNorm(x, l.AttnNorm, float32(c.LayerNormEps))
	a := l.Attn.apply(ops, h, bias, c.NumHeads, c.DKV)
	h.Free()
	ops.AddInPlace(x, a)
	a.Free()
}

// feedForward is T5LayerFF: x += DenseReluDense(norm(x)).
func (l *layer[F]) feedForward(ops *tensor.Ops, x *tensor.Tensor, c *Config, act tensor.UnaryOp) {
	h := ops.RMSNorm(x, l.FFNorm, float32(c.LayerNormEps))
	f := l.FF.apply(ops, h, act)
	h.Free()
	ops.AddInPlace(x, f)
	f.Free()
}

// apply is T5Attention over x [B, L, d_model]. The scores are not scaled by
// 1/sqrt(d_kv): T5 folds that into the initialisation of q.
func (a *attention) apply(ops *tensor.Ops, x, bias *tensor.Tensor, heads, dkv int) *tensor.Tensor {
	b, n := x.Dim(0), x.Dim(1)
	q := ops.Linear(x, a.Q, nil)
	k := ops.Linear(x, a.K, nil)
	v := ops.Linear(x, a.V, nil)
	for _, t := range []*tensor.Tensor{q, k, v} {
		ops.Fail(t.SetShape(b, n, heads, dkv)) // [B, L, H·D] is already [B, L, H, D]
	}
	o := ops.Attention(q, k, v, bias, 1)
	tensor.Free(q, k, v)
	ops.Fail(o.SetShape(b, n, heads*dkv))
	out := ops.Linear(o, a.O, nil)
	o.Free()
	return out
}

// apply is wo(act(wi_0 x) * wi_1 x).
func (f gatedFF) apply(ops *tensor.Ops, x *tensor.Tensor, act tensor.UnaryOp) *tensor.Tensor {
	g := ops.Linear(x, f.Wi0, nil)
	ops.UnaryInPlace(g, act)
	lin := ops.Linear(x, f.Wi1, nil)
	ops.MulInPlace(g, lin)
	lin.Free()
	out := ops.Linear(g, f.Wo, nil)
	g.Free()
	return out
}

// apply is wo(act(wi x)).
func (f denseFF) apply(ops *tensor.Ops, x *tensor.Tensor, act tensor.UnaryOp) *tensor.Tensor {
	h := ops.Linear(x, f.Wi, nil)
	ops.UnaryInPlace(h, act)
	out := ops.Linear(h, f.Wo, nil)
	h.Free()
	return out
}
