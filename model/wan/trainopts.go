package wan

import (
	"fmt"
	"strings"

	"ferry/dtype"
	"ferry/tensor"
)

// The training pass's memory knobs: what each block keeps between its
// forward and its backward (Checkpointing), in which dtype (DType), and
// where it waits (Store). None of them changes float32 gradients by a bit:
// a dropped activation is recomputed inside the block's r.Run, from the
// block's input, by the same kernels on the same operands.
//
// What a block keeps, in bytes per latent token of one sample (float32;
// D = inner dim, F = ffn_dim, H = heads, Lt the text length, r the sum of
// the ranks of the LoRA adapters on the block's token-wise Linears):
//
//	none       input D·4, plus 9D+2H+F floats (q, k, v before the norms,
//	           the attention outputs and log-sum-exps of both attentions,
//	           the gated self-attention output, the hidden after the
//	           cross-attention, the FFN's pre-activation and output), plus
//	           r floats; and per sample 2·D·Lt floats (the cross-attention's
//	           text keys and values) and 6·D (the modulation). At 1.3B
//	           (D 1536, F 8960, H 12) about 95 KB per token, 131 MB per
//	           1280-token sample.
//	selective  input D·4 plus the self-attention's output and log-sum-exp,
//	           (D+H)·4: 12.3 KB per token at 1.3B. The backward recomputes
//	           the GEMMs (projections, FFN) and the cheap cross-attention
//	           but not the self-attention, the one cost that grows with L².
//	block      input D·4 only (6 KB per token at 1.3B); the backward runs
//	           the block's whole forward again first.
//
// With DType BF16 (autocast) the kept activations other than the
// log-sum-exps and the modulation are stored bf16, half the bytes, and
// widened to float32 when the block's backward starts; the block inputs
// stay float32 (they are the residual stream every recomputation starts
// from). The embed and out blocks' tapes (a few [B, L, dim] tensors in
// all) always stay on the device.

// Checkpointing says what a transformer block keeps for its backward.
type Checkpointing uint8

// The checkpointing modes (see above).
const (
	CheckpointNone Checkpointing = iota
	CheckpointBlock
	CheckpointSelective
)

var checkpointingNames = [...]string{"none", "block", "selective"}

func (c Checkpointing) String() string {
	if int(c) < len(checkpointingNames) {
		return checkpointingNames[c]
	}
	return fmt.Sprintf("checkpointing(%d)", c)
}

// ParseCheckpointing reads "none", "block" or "selective".
func ParseCheckpointing(s string) (Checkpointing, error) {
	for i, n := range checkpointingNames {
		if s == n {
			return Checkpointing(i), nil
		}
	}
	return 0, fmt.Errorf("checkpointing %q: want %s", s, strings.Join(checkpointingNames[:], ", "))
}

// ActivationStore is where a block's kept tensors wait between the block's
// forward and its backward. The model only hands tensors over and takes
// them back; the store decides where they live meanwhile (residency's
// host store moves them to the host tier and prefetches them back in
// reverse block order). A nil store keeps them in the tape, on the device.
// A store may also have a Prefetch(block int) method: Backward calls it
// for the last block before the out block's backward, so that the
// backward's first block can be on its way back meanwhile.
type ActivationStore interface {
	// Put takes block's tensors after its forward (nil entries keep their
	// place). The store owns them from then on, also when Put fails.
	Put(block int, ts []*tensor.Tensor) error
	// Get gives them back on the compute device, in Put's order, before
	// the block's backward; the caller owns them again.
	Get(block int) ([]*tensor.Tensor, error)
	// Release frees whatever the store still holds for block.
	Release(block int)
}

// TrainOptions tune how the training pass spends memory.
type TrainOptions struct {
	Checkpointing Checkpointing
	// DType is the kept activations' dtype: F32 (also when zero) or BF16
	// (see above). The products' dtype is the weights' (a bf16 weight
	// multiplies in bf16 when the backend's compute dtype is bf16).
	DType dtype.DType
	// Store holds the blocks' kept tensors between forward and backward
	// (nil: the tape, on the device).
	Store ActivationStore
}

// check refuses what the training pass cannot do.
func (o TrainOptions) check() error {
	if o.Checkpointing > CheckpointSelective {
		return fmt.Errorf("wan: %v is not a checkpointing mode", o.Checkpointing)
	}
	if o.DType != 0 && o.DType != dtype.F32 && o.DType != dtype.BF16 {
		return fmt.Errorf("wan: training activations in %s: want F32 or BF16", o.DType)
	}
	return nil
}

// BlockTape is what one transformer block's tape held after its forward,
// in bytes (tensor sizes, not allocator rounding).
type BlockTape struct {
	// Input is the block's input, kept in every mode.
	Input int64 `json:"input_bytes"`
	// Saved is what the block's forward saved for its backward: what
	// checkpointing none keeps, float32.
	Saved int64 `json:"saved_bytes"`
	// Kept is the part of Saved the checkpointing mode kept, float32.
	Kept int64 `json:"kept_bytes"`
	// Stored is Kept as stored (bf16 halves most of it).
	Stored int64 `json:"stored_bytes"`
}

// TapeStats is what a tape held after ForwardTrain.
type TapeStats struct {
	// The pass's shape: samples, latent tokens and text tokens per sample.
	Batch, Tokens, TextLen int
	Blocks                 []BlockTape
	// Device is Tape.Bytes when ForwardTrain returned: everything the
	// tape kept on the device (the store's tensors elsewhere not counted).
	Device int64
}

// Total sums the blocks' figures.
func (s TapeStats) Total() BlockTape {
	var t BlockTape
	for _, b := range s.Blocks {
		t.Input += b.Input
		t.Saved += b.Saved
		t.Kept += b.Kept
		t.Stored += b.Stored
	}
	return t
}

// Stats is what the tape held when ForwardTrain returned.
func (t *Tape) Stats() TapeStats {
	if t == nil {
		return TapeStats{}
	}
	return TapeStats{Batch: t.p.batch, Tokens: t.p.tokens, TextLen: t.textLen,
		Blocks: append([]BlockTape(nil), t.stats...), Device: t.deviceBytes}
}

// AttentionWeights is what materialising the attention probabilities
// (need_weights=True) would take at a shape, computed: ferry's attention
// never materialises them, forward or backward (tiles with an online
// softmax, and a backward that recomputes them from the log-sum-exp).
type AttentionWeights struct {
	// Self and Cross are one block's probabilities, float32: B·H·L·L·4
	// and B·H·L·Lt·4.
	Self  int64 `json:"self_bytes"`
	Cross int64 `json:"cross_bytes"`
	// Tape is what a tape would keep of them for the backward: every
	// block's.
	Tape int64 `json:"tape_bytes"`
	// Backward is the backward's dP and dS of the block being
	// differentiated (two more of each at a time).
	Backward int64 `json:"backward_bytes"`
}

// AttentionWeightBytes is AttentionWeights for batch samples of tokens
// latent tokens and textLen text tokens.
func (c Config) AttentionWeightBytes(batch, tokens, textLen int) AttentionWeights {
	bh, l := int64(batch)*int64(c.NumAttentionHeads), int64(tokens)
	a := AttentionWeights{Self: 4 * bh * l * l, Cross: 4 * bh * l * int64(textLen)}
	a.Tape = int64(c.NumLayers) * (a.Self + a.Cross)
	a.Backward = 2 * (a.Self + a.Cross)
	return a
}

// ptrs lists where a block's tape keeps its tensors (the input first when
// withIn), nil ones included, in a fixed order: what the store's Put and
// Get exchange.
func (l *layerTape) ptrs(withIn bool) []**tensor.Tensor {
	var ps []**tensor.Tensor
	if withIn {
		ps = append(ps, &l.in)
	}
	return append(ps, l.saved.ptrs()...)
}

func (s *attnSaved) ptrs() []**tensor.Tensor {
	if s == nil {
		return nil
	}
	ps := []**tensor.Tensor{&s.qPre, &s.kPre, &s.v, &s.o, &s.lse}
	for _, l := range [][]*tensor.Tensor{s.qLow, s.kLow, s.vLow, s.oLow} {
		ps = appendPtrs(ps, l)
	}
	return ps
}

func (s *layerSaved) ptrs() []**tensor.Tensor {
	if s == nil {
		return nil
	}
	var ps []**tensor.Tensor
	for i := range s.mod {
		ps = append(ps, &s.mod[i])
	}
	ps = append(ps, s.attn1.ptrs()...)
	ps = append(ps, s.attn2.ptrs()...)
	ps = append(ps, &s.a, &s.h2, &s.f1, &s.y)
	ps = appendPtrs(ps, s.ff1Low)
	return appendPtrs(ps, s.ff2Low)
}

func appendPtrs(ps []**tensor.Tensor, ts []*tensor.Tensor) []**tensor.Tensor {
	for i := range ts {
		ps = append(ps, &ts[i])
	}
	return ps
}

func deref(ps []**tensor.Tensor) []*tensor.Tensor {
	ts := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		ts[i] = *p
	}
	return ts
}

// complete reports whether s holds everything layerBack reads (rather
// than selective checkpointing's attention outputs alone).
func (s *layerSaved) complete() bool { return s != nil && s.f1 != nil }

// bytesOf sums the sizes of ts (nil, views and freed ones not counted).
func bytesOf(ts []*tensor.Tensor) int64 {
	var n int64
	for _, x := range ts {
		if x != nil && !x.IsView() && !x.Freed() {
			n += x.Bytes()
		}
	}
	return n
}

// keep applies the checkpointing mode to a block's saved activations: it
// frees what the mode drops and returns what it keeps (nil: nothing).
func keep(mode Checkpointing, s *layerSaved) *layerSaved {
	switch mode {
	case CheckpointBlock:
		tensor.Free(s.tensors()...)
		return nil
	case CheckpointSelective:
		k := &layerSaved{attn1: &attnSaved{o: s.attn1.o, lse: s.attn1.lse}}
		s.attn1.o, s.attn1.lse = nil, nil
		tensor.Free(s.tensors()...)
		return k
	}
	return s
}

// narrowable lists the kept activations bf16 autocast stores as bf16:
// all but the modulation (six [B, 1, dim] vectors) and the log-sum-exps,
// which the attention backward's probabilities are exp(score − lse) of.
func (s *layerSaved) narrowable() []**tensor.Tensor {
	if s == nil {
		return nil
	}
	skip := map[**tensor.Tensor]bool{}
	for i := range s.mod {
		skip[&s.mod[i]] = true
	}
	for _, a := range []*attnSaved{s.attn1, s.attn2} {
		if a != nil {
			skip[&a.lse] = true
		}
	}
	var ps []**tensor.Tensor
	for _, p := range s.ptrs() {
		if !skip[p] && *p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// castAll replaces each tensor of dtype from by its cast to dtype to.
func castAll(ops *tensor.Ops, ps []**tensor.Tensor, from, to dtype.DType) {
	for _, p := range ps {
		if *p != nil && (*p).DType() == from {
			c := ops.Cast(*p, to)
			(*p).Free()
			*p = c
		}
	}
}

// stash applies the checkpointing mode and the activation dtype to block
// i's tape after its forward, records its sizes and hands it to the store
// (the input too when withIn: TrainBlock's input is its caller's).
func (t *Tape) stash(ops *tensor.Ops, i int, withIn bool) error {
	lt, o := &t.layers[i], t.m.Train
	st := BlockTape{Input: lt.in.Bytes(), Saved: bytesOf(lt.saved.tensors())}
	lt.saved = keep(o.Checkpointing, lt.saved)
	st.Kept = bytesOf(lt.saved.tensors())
	if o.DType == dtype.BF16 {
		castAll(ops, lt.saved.narrowable(), dtype.F32, dtype.BF16)
	}
	st.Stored = bytesOf(lt.saved.tensors())
	t.stats[i] = st
	if err := ops.Err(); err != nil {
		return err
	}
	if t.store == nil {
		return nil
	}
	ps := lt.ptrs(withIn)
	ts := deref(ps)
	for _, p := range ps {
		*p = nil
	}
	t.stored[i] = true
	if err := t.store.Put(i, ts); err != nil {
		return fmt.Errorf("activation store: %w", err)
	}
	return nil
}

// unstash takes block i's tape back from the store (when it holds it) and
// widens what bf16 autocast narrowed, before the block's backward.
func (t *Tape) unstash(ops *tensor.Ops, i int, withIn bool) error {
	lt := &t.layers[i]
	if t.stored[i] {
		t.stored[i] = false
		ps := lt.ptrs(withIn)
		ts, err := t.store.Get(i)
		if err != nil {
			return fmt.Errorf("activation store: %w", err)
		}
		if len(ts) != len(ps) {
			tensor.Free(ts...)
			return fmt.Errorf("activation store: block %d gave back %d tensors, %d were put", i, len(ts), len(ps))
		}
		for j, p := range ps {
			*p = ts[j]
		}
	}
	castAll(ops, lt.saved.narrowable(), dtype.BF16, dtype.F32)
	return ops.Err()
}

// prefetcher is an ActivationStore that can start bringing a block back
// before it is asked for.
type prefetcher interface{ Prefetch(block int) }

// prefetch asks the store to start bringing block i back (the backward's
// first block, while the out block's backward runs), when it can.
func (t *Tape) prefetch(i int) {
	if p, ok := t.store.(prefetcher); ok && i >= 0 && t.stored[i] {
		p.Prefetch(i)
	}
}

// release frees block i's part of the tape, wherever it is.
func (t *Tape) release(i int) {
	if t.stored[i] {
		t.stored[i] = false
		t.store.Release(i)
	}
	t.layers[i].free()
}
