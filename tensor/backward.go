package tensor

import "ferry/dtype"

// The backward front ends: each allocates the gradient of a forward op's
// input and runs the backend's backward kernel. Weight gradients are not
// allocated here: the caller owns them (they live across a whole step, or
// several micro-batches) and passes them to be accumulated into, or nil
// when it does not want them.

// LinearBackward returns dx for y = x·wᵀ + b and accumulates dw += dyᵀ·x
// and db += Σ dy when they are given. With wantDX false it returns nil and
// computes only the weight gradients (the first layer of a network).
func (o *Ops) LinearBackward(dy, x, w, dw, db *Tensor, wantDX bool) *Tensor {
	if w.Rank() != 2 || x.Rank() < 1 || x.Dim(-1) != w.Dim(1) || dy.Rank() != x.Rank() ||
		dy.Dim(-1) != w.Dim(0) || NumElems(dy.shape[:dy.Rank()-1]) != NumElems(x.shape[:x.Rank()-1]) {
		return o.failf("linear backward: dy %v, x %v, w %v do not match", dy.shape, x.shape, w.shape)
	}
	if dw != nil && !SameShape(dw.shape, w.shape) {
		return o.failf("linear backward: weight gradient %v for weight %v", dw.shape, w.shape)
	}
	if db != nil && db.Len() != w.Dim(0) {
		return o.failf("linear backward: bias gradient %v for weight %v", db.shape, w.shape)
	}
	var dx *Tensor
	if wantDX {
		dx = o.Empty(dtype.F32, x.shape...)
	}
	if o.live(dy, x, w, dw, db, dx) {
		o.run(dx, o.B.LinearBackward(dx, dw, db, dy, x, w), "linear backward")
	}
	return dx
}

// LayerNormBackward returns dx and accumulates dw, db (each may be nil;
// w nil is a LayerNorm without affine).
func (o *Ops) LayerNormBackward(dy, x, w, dw, db *Tensor, eps float32) *Tensor {
	n := x.Dim(-1)
	if !SameShape(dy.shape, x.shape) || !o.checkVec("layernorm backward", w, n) ||
		!o.checkVec("layernorm backward", dw, n) || !o.checkVec("layernorm backward", db, n) {
		return o.failf("layernorm backward: dy %v, x %v do not match", dy.shape, x.shape)
	}
	dx := o.Empty(dtype.F32, x.shape...)
	if o.live(dy, x, w, dw, db, dx) {
		o.run(dx, o.B.LayerNormBackward(dx, dw, db, dy, x, w, eps), "layernorm backward")
	}
	return dx
}

// RMSNormBackward returns dx and accumulates dw (may be nil).
func (o *Ops) RMSNormBackward(dy, x, w, dw *Tensor, eps float32) *Tensor {
	n := x.Dim(-1)
	if !SameShape(dy.shape, x.shape) || !o.checkVec("rmsnorm backward", w, n) || !o.checkVec("rmsnorm backward", dw, n) {
		return o.failf("rmsnorm backward: dy %v, x %v do not match", dy.shape, x.shape)
	}
	dx := o.Empty(dtype.F32, x.shape...)
	if o.live(dy, x, w, dw, dx) {
		o.run(dx, o.B.RMSNormBackward(dx, dw, dy, x, w, eps), "rmsnorm backward")
	}
	return dx
}

// UnaryBackward returns dy · f′(x).
func (o *Ops) UnaryBackward(dy, x *Tensor, op UnaryOp) *Tensor {
	if !SameShape(dy.shape, x.shape) {
		return o.failf("%s backward: dy %v, x %v do not match", op, dy.shape, x.shape)
	}
	dx := o.Empty(dtype.F32, x.shape...)
	if o.live(dy, x, dx) {
		o.run(dx, o.B.UnaryBackward(dx, dy, x, op), op.String()+" backward")
	}
	return dx
}

// UnaryBackwardInPlace overwrites dy with dy · f′(x).
func (o *Ops) UnaryBackwardInPlace(dy, x *Tensor, op UnaryOp) {
	if !SameShape(dy.shape, x.shape) {
		o.failf("%s backward: dy %v, x %v do not match", op, dy.shape, x.shape)
		return
	}
	if o.live(dy, x) {
		o.run(dy, o.B.UnaryBackward(dy, dy, x, op), op.String()+" backward")
	}
}

// RopeBackward returns the gradient of Rope's input.
func (o *Ops) RopeBackward(dy, cos, sin *Tensor) *Tensor {
	if !ropeFits(dy, cos, sin) {
		return o.failf("rope backward: dy %v does not match tables %v", dy.shape, cos.shape)
	}
	dx := o.Empty(dtype.F32, dy.shape...)
	if o.live(dy, cos, sin, dx) {
		o.run(dx, o.B.RopeBackward(dx, dy, cos, sin), "rope backward")
	}
	return dx
}

// ropeFits reports whether x [B, L, H, D] (D even) matches Rope's tables
// cos and sin [L, D/2].
func ropeFits(x, cos, sin *Tensor) bool {
	return x.Rank() == 4 && x.Dim(3)%2 == 0 && cos.Rank() == 2 && SameShape(cos.shape, sin.shape) &&
		cos.Dim(0) == x.Dim(1) && cos.Dim(1) == x.Dim(3)/2
}

// AttentionLSE is Attention without bias that also returns the
// log-sum-exp of every query row's scaled scores, [B, H, Lq], for
// AttentionBackward.
func (o *Ops) AttentionLSE(q, k, v *Tensor, scale float32) (out, lse *Tensor) {
	if q.Rank() != 4 || k.Rank() != 4 || !SameShape(k.shape, v.shape) ||
		q.Dim(0) != k.Dim(0) || q.Dim(2) != k.Dim(2) || q.Dim(3) != k.Dim(3) {
		o.failf("attention: q %v, k %v, v %v do not match ([B, L, H, D])", q.shape, k.shape, v.shape)
		return dead(dtype.F32, q.shape), dead(dtype.F32, nil)
	}
	out = o.Empty(dtype.F32, q.shape...)
	lse = o.Empty(dtype.F32, q.Dim(0), q.Dim(2), q.Dim(1))
	if o.live(q, k, v, out, lse) {
		o.run(out, o.B.AttentionLSE(out, lse, q, k, v, scale), "attention")
	}
	return out, lse
}

// AttentionBackward returns dq, dk, dv from the output gradient dout and
// what the forward kept: q, k, v, its output and lse.
func (o *Ops) AttentionBackward(dout, q, k, v, out, lse *Tensor, scale float32) (dq, dk, dv *Tensor) {
	if q.Rank() != 4 || k.Rank() != 4 || !SameShape(k.shape, v.shape) || !SameShape(dout.shape, q.shape) ||
		!SameShape(out.shape, q.shape) || q.Dim(0) != k.Dim(0) || q.Dim(2) != k.Dim(2) || q.Dim(3) != k.Dim(3) ||
		!SameShape(lse.shape, []int{q.Dim(0), q.Dim(2), q.Dim(1)}) {
		o.failf("attention backward: dout %v, q %v, k %v, v %v, out %v, lse %v do not match",
			dout.shape, q.shape, k.shape, v.shape, out.shape, lse.shape)
		return dead(dtype.F32, q.shape), dead(dtype.F32, k.shape), dead(dtype.F32, v.shape)
	}
	dq = o.Empty(dtype.F32, q.shape...)
	dk = o.Empty(dtype.F32, k.shape...)
	dv = o.Empty(dtype.F32, v.shape...)
	if o.live(dout, q, k, v, out, lse, dq, dk, dv) {
		o.run(dq, o.B.AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, scale), "attention backward")
	}
	return dq, dk, dv
}

// SumTo returns a summed down to shape (shape broadcasts to a's): the
// gradient of an operand that Add or Mul broadcast.
func (o *Ops) SumTo(a *Tensor, shape ...int) *Tensor {
	if b, err := BroadcastShape(shape, a.shape); err != nil || !SameShape(b, a.shape) {
		return o.failf("sum to %v: does not broadcast to %v", shape, a.shape)
	}
	out := o.Empty(dtype.F32, shape...)
	if o.live(a, out) {
		o.run(out, o.B.SumTo(out, a), "sum to")
	}
	return out
}
