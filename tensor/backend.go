package tensor

import "ferry/dtype"

// Backend computes. Every kernel writes into dst, which the caller (Ops)
// has allocated with the right shape; inputs are never modified unless they
// alias dst where a kernel says it may. Shapes are checked by Ops before a
// kernel runs; kernels return an error for dtype or layout combinations they
// do not implement.
//
// backend/cpu implements it; backend/cuda will, and both pass the
// conformance suite in backend/backendtest.
type Backend interface {
	// Name identifies the backend ("cpu").
	Name() string
	// Device is where this backend's tensors live.
	Device() Device

	// Upload copies n elements of host data of type src into dst, converting
	// to dst's dtype (the host->device move: on the CPU it is the upcast).
	Upload(dst *Tensor, src []byte, srcType dtype.DType) error
	// Download copies t into host float32 memory.
	Download(dst []float32, t *Tensor) error

	// Cast converts src into dst elementwise (same element count).
	Cast(dst, src *Tensor) error
	// Fill sets every element of dst to v.
	Fill(dst *Tensor, v float32) error

	// Linear: dst[..., N] = x[..., K] · w[N, K]ᵀ + bias[N] (bias may be nil).
	// w is stored as PyTorch stores nn.Linear weights.
	Linear(dst, x, w, bias *Tensor) error
	// MatMul: dst[B, M, N] = a[B, M, K] · b[B, K, N], or b[B, N, K]ᵀ when
	// transB. Leading dims are flattened into B; b may have B = 1 (shared).
	MatMul(dst, a, b *Tensor, transB bool) error

	// Add, Mul: dst = a op b with numpy broadcasting; dst may alias a.
	Add(dst, a, b *Tensor) error
	Mul(dst, a, b *Tensor) error
	// Affine: dst = a*scale + shift; dst may alias a.
	Affine(dst, a *Tensor, scale, shift float32) error
	// Unary applies op elementwise; dst may alias a.
	Unary(dst, a *Tensor, op UnaryOp) error
	// Clamp limits every element to [lo, hi]; dst may alias a.
	Clamp(dst, a *Tensor, lo, hi float32) error

	// Softmax over the last dimension.
	Softmax(dst, a *Tensor) error
	// LayerNorm over the last dimension; w and b may be nil.
	LayerNorm(dst, x, w, b *Tensor, eps float32) error
	// RMSNorm over the last dimension (x / sqrt(mean(x²)+eps) * w); w may be nil.
	RMSNorm(dst, x, w *Tensor, eps float32) error
	// RMSNormChannels is RMSNorm over dimension 1 (the channels) of x
	// [N, C, spatial...] at every position; w (length C) may be nil.
	RMSNormChannels(dst, x, w *Tensor, eps float32) error
	// GroupNorm: x is [N, C, spatial...]; w, b are [C] or nil.
	GroupNorm(dst, x, w, b *Tensor, groups int, eps float32) error

	// Permute: dst = a with axes reordered, dst.shape[i] = a.shape[perm[i]].
	Permute(dst, a *Tensor, perm []int) error
	// Concat joins srcs along axis into dst.
	Concat(dst *Tensor, srcs []*Tensor, axis int) error
	// Narrow copies a[..., start:start+dst.shape[axis], ...] into dst.
	Narrow(dst, a *Tensor, axis, start int) error
	// Pad places a inside zeros: dst[i+before[i]...] = a[i...].
	Pad(dst, a *Tensor, before []int) error

	// Attention: q [B, Lq, H, D], k and v [B, Lk, H, D], dst [B, Lq, H, D];
	// bias (additive, may be nil) broadcasts as [B|1, H|1, Lq|1, Lk]. Computed
	// in tiles with an online softmax: the [Lq, Lk] score matrix for the whole
	// sequence is never materialised.
	Attention(dst, q, k, v, bias *Tensor, scale float32) error
	// Rope rotates adjacent pairs of x [B, L, H, D] by the angles whose cos and
	// sin are in F64 tables [L, D/2], evaluating in float64 as diffusers does.
	Rope(dst, x, cos, sin *Tensor) error
	// Embedding gathers rows ids of table [V, D] into dst [len(ids), D].
	Embedding(dst, table *Tensor, ids []int32) error
	// Conv: x [N, C, spatial...] (2 or 3 spatial dims), w [O, C, kernel...],
	// bias [O] or nil, zero padding pad[i] on both sides of spatial dim i.
	Conv(dst, x, w, bias *Tensor, stride, pad []int) error
	// Upsample repeats each element scale[i] times along trailing dim i
	// (nearest neighbour on the last len(scale) dims).
	Upsample(dst, x *Tensor, scale []int) error

	// Backward kernels (training). Each takes the gradient dy of its
	// forward op's output and writes the gradient of the forward's input
	// into dx (=); gradients of weights (dw, db) are accumulated (+=), so
	// that a weight used by several samples, chunks or micro-batches sums
	// its gradients in place. A nil gradient destination is not computed.
	// All are float32 and dense (packed weights are refused).

	// LinearBackward, for y = x·wᵀ + b with x [..., K], w [N, K]:
	// dx = dy·w, dw += dyᵀ·x (rows of every leading dim), db += Σ dy.
	LinearBackward(dx, dw, db, dy, x, w *Tensor) error
	// LayerNormBackward over the last dimension (the forward's eps; w and
	// its gradients may be nil): dx = ∂L/∂x, dw += Σ dy·x̂, db += Σ dy.
	LayerNormBackward(dx, dw, db, dy, x, w *Tensor, eps float32) error
	// RMSNormBackward over the last dimension: dx = ∂L/∂x, dw += Σ dy·x/rms.
	RMSNormBackward(dx, dw, dy, x, w *Tensor, eps float32) error
	// UnaryBackward: dx = dy · f′(x) for the op's f at the forward's input
	// x; dx may alias dy.
	UnaryBackward(dx, dy, x *Tensor, op UnaryOp) error
	// RopeBackward: the transpose of Rope's rotation (each pair rotated by
	// the negative angle), with the forward's tables.
	RopeBackward(dx, dy, cos, sin *Tensor) error
	// AttentionLSE is Attention without bias that also writes, for every
	// query row, the log-sum-exp of its scaled scores into lse
	// [B, H, Lq] (float32): what AttentionBackward recomputes the
	// probabilities from.
	AttentionLSE(dst, lse, q, k, v *Tensor, scale float32) error
	// AttentionBackward: dq, dk, dv (written; [B, L, H, D] like q, k, v)
	// from dout, the forward's q, k, v, its output out and lse. It
	// recomputes the probabilities tile by tile from lse, as FlashAttention's
	// backward does: the [Lq, Lk] matrix never exists for the whole
	// sequence in either direction.
	AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse *Tensor, scale float32) error
	// SumTo: dst = a summed over the dimensions along which dst broadcasts
	// to a (dst's shape, right-aligned, has 1 or is missing there): the
	// gradient of a broadcast operand of Add or Mul.
	SumTo(dst, a *Tensor) error
}

// UnaryOp selects an elementwise function.
type UnaryOp uint8

// The elementwise functions.
const (
	SiLU     UnaryOp = iota // x * sigmoid(x)
	GELUTanh                // 0.5x(1+tanh(√(2/π)(x+0.044715x³))), "gelu_new"
	GELUErf                 // 0.5x(1+erf(x/√2)), exact GELU
	Sigmoid
	Tanh
	ReLU
	Exp
	Neg
	Sqrt
	Square
)

func (op UnaryOp) String() string {
	names := [...]string{"silu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh", "relu", "exp", "neg", "sqrt", "square"}
	if int(op) < len(names) {
		return names[op]
	}
	return "unary?"
}

// WeightScaler is a backend that applies a weight's per-tensor scale (the
// scale_weight of a scaled fp8 checkpoint) after the weight is loaded:
// ScaleWeight multiplies t's values by s in place, or, where t is kept in
// a storage dtype too narrow to hold them scaled (fp8), records s
// (Tensor.SetScale) for the products that read t to apply: Linear reads
// it, and the executor records one only on the weights Linear multiplies
// by (it asks for an in-place scale on any other).
type WeightScaler interface {
	ScaleWeight(t *Tensor, s float32) error
}

// MatrixPacker is a Backend that keeps GEMM weights in its kernels' own
// layout, arranged once when the executor moves them to the device rather
// than on every product. A packed tensor has the weight's shape [N, K] and
// dtype, takes the same bytes, and only Linear reads it: every other op
// refuses it.
type MatrixPacker interface {
	// PackedLayout names the layout an n×k weight of dtype dt is packed
	// in and the number of rows it is packed in groups of; ok is false
	// when the backend packs no such weight (it then stays dense).
	PackedLayout(dt dtype.DType, n, k int) (layout string, group int, ok bool)
	// PackRows packs rows [r0, r0+rows) of a row-major weight, given as
	// raw data of type src, into dst (the whole packed weight). r0 is a
	// multiple of the group, and so is the row count unless the rows end
	// the weight.
	PackRows(dst *Tensor, raw []byte, src dtype.DType, r0 int) error
}
