package tensor

import (
	"fmt"

	"ferry/dtype"
)

// Ops is the allocating front end over a Backend that model code computes
// with. Each method allocates its result on the backend's device and runs
// the kernel. Errors are sticky, like bufio.Writer's: after the first
// failure (out of memory, a shape mismatch) every later call returns an
// empty tensor without computing, and Err reports the first failure. Model
// code checks Err once, at the end of a block.
//
// Results are owned by the caller, who frees them when done; Free on a
// failed (empty) result is a no-op.
type Ops struct {
	B   Backend
	dev Device
	err error
	// Tag names allocations in traces (set it per block).
	Tag string
}

// NewOps wraps b.
func NewOps(b Backend) *Ops { return &Ops{B: b, dev: b.Device(), Tag: "activation"} }

// Err is the first error seen, or nil.
func (o *Ops) Err() error { return o.err }

// Fail records err (if it is the first) and returns it.
func (o *Ops) Fail(err error) error {
	if o.err == nil && err != nil {
		o.err = err
	}
	return o.err
}

// ClearErr forgets a recorded error (used by tests and retry loops).
func (o *Ops) ClearErr() { o.err = nil }

func (o *Ops) failf(format string, args ...any) *Tensor {
	o.Fail(fmt.Errorf(format, args...))
	return nil
}

// Empty allocates an uninitialised tensor on the device.
func (o *Ops) Empty(dt dtype.DType, shape ...int) *Tensor {
	if o.err != nil {
		return dead(dt, shape)
	}
	n := int64(NumElems(shape)) * int64(dt.Size())
	buf, err := o.dev.Alloc(n, o.Tag)
	if err != nil {
		o.Fail(err)
		return dead(dt, shape)
	}
	return &Tensor{shape: append([]int(nil), shape...), dtype: dt, buf: buf}
}

// dead is the placeholder returned after an error: right shape, no storage.
func dead(dt dtype.DType, shape []int) *Tensor {
	return &Tensor{shape: append([]int(nil), shape...), dtype: dt}
}

func (o *Ops) run(out *Tensor, err error, what string) *Tensor {
	if err != nil {
		o.Fail(fmt.Errorf("%s: %w", what, err))
	}
	return out
}

// live reports whether computation should go on; it also refuses inputs
// that were never computed (empty results of earlier failures).
func (o *Ops) live(ts ...*Tensor) bool {
	if o.err != nil {
		return false
	}
	for _, t := range ts {
		if t != nil && t.Ptr() == nil && t.Len() > 0 {
			o.Fail(fmt.Errorf("tensor %v has no storage (freed or never computed)", t.shape))
			return false
		}
		if t != nil && t.Freed() {
			o.Fail(fmt.Errorf("tensor %v used after Free", t.shape))
			return false
		}
	}
	return true
}

// Zeros allocates a float32 tensor of zeros.
func (o *Ops) Zeros(shape ...int) *Tensor {
	t := o.Empty(dtype.F32, shape...)
	if o.live(t) {
		o.run(t, o.B.Fill(t, 0), "zeros")
	}
	return t
}

// Upload copies host float32 data to a new device tensor.
func (o *Ops) Upload(data []float32, shape ...int) *Tensor {
	if NumElems(shape) != len(data) {
		return o.failf("upload: %d values for shape %v", len(data), shape)
	}
	t := o.Empty(dtype.F32, shape...)
	if o.live(t) {
		src := FromF32(data, shape...)
		o.run(t, o.B.Upload(t, src.Raw(), dtype.F32), "upload")
	}
	return t
}

// UploadF64 copies host float64 data (RoPE tables) to a new device tensor.
func (o *Ops) UploadF64(data []float64, shape ...int) *Tensor {
	if NumElems(shape) != len(data) {
		return o.failf("upload: %d values for shape %v", len(data), shape)
	}
	t := o.Empty(dtype.F64, shape...)
	if o.live(t) {
		copy(t.F64(), data)
	}
	return t
}

// Download reads a tensor back into a new host slice.
func (o *Ops) Download(t *Tensor) []float32 {
	if !o.live(t) {
		return nil
	}
	out := make([]float32, t.Len())
	o.run(t, o.B.Download(out, t), "download")
	return out
}

// Copy duplicates t.
func (o *Ops) Copy(t *Tensor) *Tensor { return o.Cast(t, t.dtype) }

// Cast converts t to dtype dt in a new tensor.
func (o *Ops) Cast(t *Tensor, dt dtype.DType) *Tensor {
	out := o.Empty(dt, t.shape...)
	if o.live(t, out) {
		o.run(out, o.B.Cast(out, t), "cast")
	}
	return out
}

// Linear computes x·wᵀ + b for w stored [out, in]; b may be nil.
func (o *Ops) Linear(x, w, b *Tensor) *Tensor {
	if w.Rank() != 2 || x.Rank() < 1 || x.Dim(-1) != w.Dim(1) {
		return o.failf("linear: input %v does not match weight %v ([out, in])", x.shape, w.shape)
	}
	if b != nil && (b.Len() != w.Dim(0)) {
		return o.failf("linear: bias %v does not match weight %v", b.shape, w.shape)
	}
	shape := append(append([]int(nil), x.shape[:x.Rank()-1]...), w.Dim(0))
	out := o.Empty(dtype.F32, shape...)
	if o.live(x, w, b, out) {
		o.run(out, o.B.Linear(out, x, w, b), "linear")
	}
	return out
}

// MatMul multiplies batches of matrices: a [..., M, K] · b [..., K, N]
// (b [..., N, K] when transB). b may be a single matrix shared by the batch.
func (o *Ops) MatMul(a, b *Tensor, transB bool) *Tensor {
	if a.Rank() < 2 || b.Rank() < 2 {
		return o.failf("matmul: operands %v, %v need rank >= 2", a.shape, b.shape)
	}
	m, k := a.Dim(-2), a.Dim(-1)
	kb, n := b.Dim(-2), b.Dim(-1)
	if transB {
		kb, n = n, kb
	}
	batchA := NumElems(a.shape[:a.Rank()-2])
	batchB := NumElems(b.shape[:b.Rank()-2])
	if k != kb || (batchB != 1 && batchB != batchA) {
		return o.failf("matmul: %v · %v (transB=%v) do not match", a.shape, b.shape, transB)
	}
	shape := append(append([]int(nil), a.shape[:a.Rank()-2]...), m, n)
	out := o.Empty(dtype.F32, shape...)
	if o.live(a, b, out) {
		o.run(out, o.B.MatMul(out, a, b, transB), "matmul")
	}
	return out
}

func (o *Ops) binary(a, b *Tensor, name string, f func(dst, a, b *Tensor) error) *Tensor {
	shape, err := BroadcastShape(a.shape, b.shape)
	if err != nil {
		return o.failf("%s: %v", name, err)
	}
	out := o.Empty(dtype.F32, shape...)
	if o.live(a, b, out) {
		o.run(out, f(out, a, b), name)
	}
	return out
}

// Add returns a + b (broadcasting).
func (o *Ops) Add(a, b *Tensor) *Tensor { return o.binary(a, b, "add", o.B.Add) }

// Mul returns a * b (broadcasting).
func (o *Ops) Mul(a, b *Tensor) *Tensor { return o.binary(a, b, "mul", o.B.Mul) }

// AddInPlace sets a += b, where b broadcasts to a's shape.
func (o *Ops) AddInPlace(a, b *Tensor) {
	if shape, err := BroadcastShape(a.shape, b.shape); err != nil || !SameShape(shape, a.shape) {
		o.failf("add in place: %v does not broadcast to %v", b.shape, a.shape)
		return
	}
	if o.live(a, b) {
		o.run(a, o.B.Add(a, a, b), "add")
	}
}

// MulInPlace sets a *= b, where b broadcasts to a's shape.
func (o *Ops) MulInPlace(a, b *Tensor) {
	if shape, err := BroadcastShape(a.shape, b.shape); err != nil || !SameShape(shape, a.shape) {
		o.failf("mul in place: %v does not broadcast to %v", b.shape, a.shape)
		return
	}
	if o.live(a, b) {
		o.run(a, o.B.Mul(a, a, b), "mul")
	}
}

// Affine returns a*scale + shift.
func (o *Ops) Affine(a *Tensor, scale, shift float32) *Tensor {
	out := o.Empty(dtype.F32, a.shape...)
	if o.live(a, out) {
		o.run(out, o.B.Affine(out, a, scale, shift), "affine")
	}
	return out
}

// AffineInPlace sets a = a*scale + shift.
func (o *Ops) AffineInPlace(a *Tensor, scale, shift float32) {
	if o.live(a) {
		o.run(a, o.B.Affine(a, a, scale, shift), "affine")
	}
}

// Unary applies op elementwise into a new tensor.
func (o *Ops) Unary(a *Tensor, op UnaryOp) *Tensor {
	out := o.Empty(dtype.F32, a.shape...)
	if o.live(a, out) {
		o.run(out, o.B.Unary(out, a, op), op.String())
	}
	return out
}

// UnaryInPlace applies op to a in place.
func (o *Ops) UnaryInPlace(a *Tensor, op UnaryOp) {
	if o.live(a) {
		o.run(a, o.B.Unary(a, a, op), op.String())
	}
}

// Clamp limits a to [lo, hi] in a new tensor.
func (o *Ops) Clamp(a *Tensor, lo, hi float32) *Tensor {
	out := o.Empty(dtype.F32, a.shape...)
	if o.live(a, out) {
		o.run(out, o.B.Clamp(out, a, lo, hi), "clamp")
	}
	return out
}

// Softmax over the last dimension.
func (o *Ops) Softmax(a *Tensor) *Tensor {
	out := o.Empty(dtype.F32, a.shape...)
	if o.live(a, out) {
		o.run(out, o.B.Softmax(out, a), "softmax")
	}
	return out
}

func (o *Ops) checkVec(name string, v *Tensor, n int) bool {
	if v != nil && v.Len() != n {
		o.failf("%s: parameter %v does not match %d features", name, v.shape, n)
		return false
	}
	return true
}

// LayerNorm over the last dimension; w and b may be nil.
func (o *Ops) LayerNorm(x, w, b *Tensor, eps float32) *Tensor {
	if !o.checkVec("layernorm", w, x.Dim(-1)) || !o.checkVec("layernorm", b, x.Dim(-1)) {
		return dead(dtype.F32, x.shape)
	}
	out := o.Empty(dtype.F32, x.shape...)
	if o.live(x, w, b, out) {
		o.run(out, o.B.LayerNorm(out, x, w, b, eps), "layernorm")
	}
	return out
}

// RMSNorm over the last dimension; w may be nil.
func (o *Ops) RMSNorm(x, w *Tensor, eps float32) *Tensor {
	if !o.checkVec("rmsnorm", w, x.Dim(-1)) {
		return dead(dtype.F32, x.shape)
	}
	out := o.Empty(dtype.F32, x.shape...)
	if o.live(x, w, out) {
		o.run(out, o.B.RMSNorm(out, x, w, eps), "rmsnorm")
	}
	return out
}

// RMSNormChannels is RMSNorm over the channels (dimension 1) of x [N, C,
// spatial...]; w may be nil.
func (o *Ops) RMSNormChannels(x, w *Tensor, eps float32) *Tensor {
	if x.Rank() < 2 {
		return o.failf("rmsnorm over channels: %v has no channel dimension", x.shape)
	}
	if !o.checkVec("rmsnorm over channels", w, x.Dim(1)) {
		return dead(dtype.F32, x.shape)
	}
	out := o.Empty(dtype.F32, x.shape...)
	if o.live(x, w, out) {
		o.run(out, o.B.RMSNormChannels(out, x, w, eps), "rmsnorm over channels")
	}
	return out
}

// GroupNorm over groups of channels of x [N, C, spatial...].
func (o *Ops) GroupNorm(x, w, b *Tensor, groups int, eps float32) *Tensor {
	if x.Rank() < 2 || groups <= 0 || x.Dim(1)%groups != 0 {
		return o.failf("groupnorm: %d groups do not divide the channels of %v", groups, x.shape)
	}
	if !o.checkVec("groupnorm", w, x.Dim(1)) || !o.checkVec("groupnorm", b, x.Dim(1)) {
		return dead(dtype.F32, x.shape)
	}
	out := o.Empty(dtype.F32, x.shape...)
	if o.live(x, w, b, out) {
		o.run(out, o.B.GroupNorm(out, x, w, b, groups, eps), "groupnorm")
	}
	return out
}

// Permute reorders axes: result.shape[i] = a.shape[perm[i]].
func (o *Ops) Permute(a *Tensor, perm ...int) *Tensor {
	if len(perm) != a.Rank() {
		return o.failf("permute: %d axes for %v", len(perm), a.shape)
	}
	seen := make([]bool, len(perm))
	shape := make([]int, len(perm))
	for i, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			return o.failf("permute: %v is not a permutation", perm)
		}
		seen[p] = true
		shape[i] = a.shape[p]
	}
	out := o.Empty(a.dtype, shape...)
	if o.live(a, out) {
		o.run(out, o.B.Permute(out, a, perm), "permute")
	}
	return out
}

// Concat joins tensors along axis.
func (o *Ops) Concat(axis int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		return o.failf("concat: nothing to join")
	}
	r := ts[0].Rank()
	if axis < 0 {
		axis += r
	}
	shape := append([]int(nil), ts[0].shape...)
	if axis < 0 || axis >= r {
		return o.failf("concat: axis %d out of range for %v", axis, shape)
	}
	shape[axis] = 0
	for _, t := range ts {
		if t.Rank() != r || t.dtype != ts[0].dtype {
			return o.failf("concat: %s%v does not match %s%v", t.dtype, t.shape, ts[0].dtype, ts[0].shape)
		}
		for i := range r {
			if i != axis && t.shape[i] != ts[0].shape[i] {
				return o.failf("concat: %v does not match %v off axis %d", t.shape, ts[0].shape, axis)
			}
		}
		shape[axis] += t.shape[axis]
	}
	out := o.Empty(ts[0].dtype, shape...)
	if o.live(append(ts, out)...) {
		o.run(out, o.B.Concat(out, ts, axis), "concat")
	}
	return out
}

// Narrow copies a[..., start:start+n, ...] along axis into a new tensor.
func (o *Ops) Narrow(a *Tensor, axis, start, n int) *Tensor {
	if axis < 0 {
		axis += a.Rank()
	}
	if axis < 0 || axis >= a.Rank() || start < 0 || n < 0 || start+n > a.shape[axis] {
		return o.failf("narrow: [%d:%d] on axis %d of %v", start, start+n, axis, a.shape)
	}
	shape := append([]int(nil), a.shape...)
	shape[axis] = n
	out := o.Empty(a.dtype, shape...)
	if o.live(a, out) {
		o.run(out, o.B.Narrow(out, a, axis, start), "narrow")
	}
	return out
}

// Split cuts a along axis into pieces of the given sizes (copies).
func (o *Ops) Split(a *Tensor, axis int, sizes ...int) []*Tensor {
	out := make([]*Tensor, len(sizes))
	start := 0
	for i, n := range sizes {
		out[i] = o.Narrow(a, axis, start, n)
		start += n
	}
	if a.Rank() > 0 && start != a.Dim(axis) && o.err == nil {
		o.failf("split: sizes %v do not add up to %d", sizes, a.Dim(axis))
	}
	return out
}

// Pad surrounds a with zeros: before[i] in front of and after[i] behind dim i.
func (o *Ops) Pad(a *Tensor, before, after []int) *Tensor {
	if len(before) != a.Rank() || len(after) != a.Rank() {
		return o.failf("pad: %d/%d pads for %v", len(before), len(after), a.shape)
	}
	shape := make([]int, a.Rank())
	for i := range shape {
		if before[i] < 0 || after[i] < 0 {
			return o.failf("pad: negative padding %v %v", before, after)
		}
		shape[i] = a.shape[i] + before[i] + after[i]
	}
	out := o.Empty(a.dtype, shape...)
	if o.live(a, out) {
		o.run(out, o.B.Pad(out, a, before), "pad")
	}
	return out
}

// Attention computes softmax(q·kᵀ·scale + bias)·v per head. q is
// [B, Lq, H, D], k and v [B, Lk, H, D]; bias may be nil.
func (o *Ops) Attention(q, k, v, bias *Tensor, scale float32) *Tensor {
	if q.Rank() != 4 || k.Rank() != 4 || !SameShape(k.shape, v.shape) ||
		q.Dim(0) != k.Dim(0) || q.Dim(2) != k.Dim(2) || q.Dim(3) != k.Dim(3) {
		return o.failf("attention: q %v, k %v, v %v do not match ([B, L, H, D])", q.shape, k.shape, v.shape)
	}
	if bias != nil {
		b := bias.shape
		if len(b) != 4 || (b[0] != 1 && b[0] != q.Dim(0)) || (b[1] != 1 && b[1] != q.Dim(2)) ||
			(b[2] != 1 && b[2] != q.Dim(1)) || b[3] != k.Dim(1) {
			return o.failf("attention: bias %v does not broadcast to [%d, %d, %d, %d]", b, q.Dim(0), q.Dim(2), q.Dim(1), k.Dim(1))
		}
	}
	out := o.Empty(dtype.F32, q.shape...)
	if o.live(q, k, v, bias, out) {
		o.run(out, o.B.Attention(out, q, k, v, bias, scale), "attention")
	}
	return out
}

// Rope rotates x [B, L, H, D] by F64 tables cos, sin [L, D/2].
func (o *Ops) Rope(x, cos, sin *Tensor) *Tensor {
	if !ropeFits(x, cos, sin) {
		return o.failf("rope: x %v does not match tables %v", x.shape, cos.shape)
	}
	out := o.Empty(dtype.F32, x.shape...)
	if o.live(x, cos, sin, out) {
		o.run(out, o.B.Rope(out, x, cos, sin), "rope")
	}
	return out
}

// Embedding gathers rows of table [V, D].
func (o *Ops) Embedding(table *Tensor, ids []int32) *Tensor {
	if table.Rank() != 2 {
		return o.failf("embedding: table %v is not [V, D]", table.shape)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= table.Dim(0) {
			return o.failf("embedding: id %d outside vocabulary of %d", id, table.Dim(0))
		}
	}
	out := o.Empty(dtype.F32, len(ids), table.Dim(1))
	if o.live(table, out) {
		o.run(out, o.B.Embedding(out, table, ids), "embedding")
	}
	return out
}

// Conv is a 2d or 3d convolution with zero padding (pad on both sides).
func (o *Ops) Conv(x, w, b *Tensor, stride, pad []int) *Tensor {
	sd := x.Rank() - 2
	if sd < 2 || sd > 3 || w.Rank() != x.Rank() || w.Dim(1) != x.Dim(1) || len(stride) != sd || len(pad) != sd {
		return o.failf("conv: input %v, weight %v, stride %v, pad %v do not match", x.shape, w.shape, stride, pad)
	}
	if b != nil && b.Len() != w.Dim(0) {
		return o.failf("conv: bias %v does not match weight %v", b.shape, w.shape)
	}
	shape := []int{x.Dim(0), w.Dim(0)}
	for i := range sd {
		n := (x.Dim(2+i)+2*pad[i]-w.Dim(2+i))/stride[i] + 1
		if n <= 0 || stride[i] <= 0 {
			return o.failf("conv: kernel %v larger than padded input %v", w.shape, x.shape)
		}
		shape = append(shape, n)
	}
	out := o.Empty(dtype.F32, shape...)
	if o.live(x, w, b, out) {
		o.run(out, o.B.Conv(out, x, w, b, stride, pad), "conv")
	}
	return out
}

// Upsample repeats elements along the trailing len(scale) dims (nearest).
func (o *Ops) Upsample(x *Tensor, scale ...int) *Tensor {
	if len(scale) > x.Rank() {
		return o.failf("upsample: %d scales for %v", len(scale), x.shape)
	}
	shape := append([]int(nil), x.shape...)
	for i, s := range scale {
		shape[x.Rank()-len(scale)+i] *= s
	}
	out := o.Empty(x.dtype, shape...)
	if o.live(x, out) {
		o.run(out, o.B.Upsample(out, x, scale), "upsample")
	}
	return out
}

// Free releases every tensor given (nil and views are skipped).
func Free(ts ...*Tensor) {
	for _, t := range ts {
		t.Free()
	}
}
