package wanvae

import (
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
)

// cacheFrames is diffusers' CACHE_T: a causal conv keeps the last two
// frames of its input for the next chunk.
const cacheFrames = 2

// slot is one entry of diffusers' feat_cache: nothing yet (first chunk),
// "Rep" (a temporal upsampler that passed its first chunk through), or the
// frames kept from the previous chunk.
type slot struct {
	frames *tensor.Tensor
	set    bool
	rep    bool
}

// featCache is feat_cache with its feat_idx: every cached layer takes the
// next slot in call order, which is the same in every chunk.
type featCache struct {
	slots []*slot
	idx   int
}

// next returns the slot of the next cached layer.
func (c *featCache) next() *slot {
	if c.idx == len(c.slots) {
		c.slots = append(c.slots, &slot{})
	}
	s := c.slots[c.idx]
	c.idx++
	return s
}

// rewind starts a new chunk.
func (c *featCache) rewind() { c.idx = 0 }

// free releases every kept frame and forgets the slots.
func (c *featCache) free() {
	for _, s := range c.slots {
		s.frames.Free()
	}
	c.slots, c.idx = nil, 0
}

// pass is the state of one encode or decode over one (tile of a) video.
type pass struct {
	ops   *tensor.Ops
	cache featCache
	// first is set while the decoder runs its first latent frame (the
	// reference's first_chunk).
	first bool
	// short is what a residual level holds between its blocks: the
	// encoder's averaged shortcut, or the decoder level's input.
	short *tensor.Tensor
}

// dropShort frees what a residual level held, if anything: when the
// level ends, and after a failure.
func (p *pass) dropShort() {
	p.short.Free()
	p.short = nil
}

// run runs fn inside block b, turning a failed op into b's error.
func (p *pass) run(r residency.Runner, b *residency.Block, fn func()) error {
	if err := r.Run(b, func() error { fn(); return p.ops.Err() }); err != nil {
		return fmt.Errorf("wanvae: %s: %w", b.Name, err)
	}
	return nil
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

// reshape changes t's shape in place, recording a failure in ops.
func reshape(ops *tensor.Ops, t *tensor.Tensor, shape ...int) {
	if err := t.SetShape(shape...); err != nil {
		ops.Fail(err)
	}
}

// lastFrames copies the last n frames (fewer if x has fewer) of x
// [B, C, T, H, W].
func lastFrames(ops *tensor.Ops, x *tensor.Tensor, n int) *tensor.Tensor {
	t := x.Dim(2)
	n = min(n, t)
	return ops.Narrow(x, 2, t-n, n)
}

// normEps makes ops.RMSNorm (x / sqrt(mean(x²) + eps)) equal WanRMS_norm's
// F.normalize (x / max(‖x‖, 1e-12)) · √C: sqrt(‖x‖²/C + 1e-24/C) · √C is
// sqrt(‖x‖² + 1e-24), which only differs from max(‖x‖, 1e-12) for vectors
// of norm near 1e-12 and keeps an all-zero vector at zero instead of NaN.
func normEps(channels int) float32 { return float32(1e-24 / float64(channels)) }

// normSiLU is WanRMS_norm over the channels of x [B, C, T, H, W] followed
// by SiLU, computed in place in x's layout (no channels-last copy).
func (p *pass) normSiLU(x, gamma *tensor.Tensor) *tensor.Tensor {
	ops := p.ops
	c := x.Dim(1)
	y := ops.RMSNormChannels(x, view(ops, gamma, c), normEps(c))
	ops.UnaryInPlace(y, tensor.SiLU)
	return y
}

// convFrames is WanCausalConv3d's forward: x [B, C, T, H, W] with the
// previous chunk's frames (or nil) in front, then zeros in front up to
// 2·padT frames in all, zero padding padHW on both sides of H and W. It
// consumes x, freeing it as soon as it is copied behind the kept frames.
func (p *pass) convFrames(x, prev *tensor.Tensor, w conv, padT, padHW int, stride []int) *tensor.Tensor {
	ops := p.ops
	front := 2 * padT
	if lastTapShortcut && prev == nil && x.Dim(2) == 1 && front == w.W.Dim(2)-1 && stride[0] == 1 {
		return p.convLastTap(x, w, padHW, stride)
	}
	in := x
	if prev != nil && front > 0 {
		in = ops.Concat(2, prev, x)
		front -= prev.Dim(2)
	}
	if front > 0 {
		padded := ops.Pad(in, []int{0, 0, front, 0, 0}, []int{0, 0, 0, 0, 0})
		in.Free()
		in = padded
	}
	if in != x {
		x.Free()
	}
	y := ops.Conv(in, w.W, w.B, stride, []int{0, padHW, padHW})
	in.Free()
	return y
}

// lastTapShortcut enables convLastTap; a variable only so that benchmarks
// can compare with the padded convolution.
var lastTapShortcut = true

// convLastTap is convFrames for a single frame with nothing kept before
// it (every first chunk): all but the last temporal tap of the kernel
// would read zero padding, so only that tap is applied, a third of the
// work of the padded convolution. The zero terms it skips add exactly
// nothing; only the summation order differs. It consumes x.
func (p *pass) convLastTap(x *tensor.Tensor, w conv, padHW int, stride []int) *tensor.Tensor {
	ops := p.ops
	kt := w.W.Dim(2)
	tap := ops.Narrow(w.W, 2, kt-1, 1)
	y := ops.Conv(x, tap, w.B, stride, []int{0, padHW, padHW})
	tensor.Free(tap, x)
	return y
}

// causalConv is a cached WanCausalConv3d with a 3×3×3 kernel and padding
// 1: it convolves x behind the frames its slot kept and keeps x's last two
// frames (the slot's last frame and x's one when x has a single frame). It
// consumes x.
func (p *pass) causalConv(x *tensor.Tensor, w conv) *tensor.Tensor {
	s := p.cache.next()
	keep := p.keepFrames(x, s.frames, false)
	y := p.convFrames(x, s.frames, w, 1, 1, []int{1, 1, 1})
	s.frames.Free()
	s.frames, s.set = keep, true
	return y
}

// keepFrames is the cache_x of the reference: the last two frames of x,
// with the previous frames' last one (or a zero frame, after "Rep") in
// front when x has only one.
func (p *pass) keepFrames(x, prev *tensor.Tensor, zeroFront bool) *tensor.Tensor {
	ops := p.ops
	keep := lastFrames(ops, x, cacheFrames)
	if keep.Dim(2) >= cacheFrames || (prev == nil && !zeroFront) {
		return keep
	}
	var front *tensor.Tensor
	if zeroFront {
		s := x.Shape()
		front = ops.Zeros(s[0], s[1], 1, s[3], s[4])
	} else {
		front = lastFrames(ops, prev, 1)
	}
	both := ops.Concat(2, front, keep)
	tensor.Free(front, keep)
	return both
}

// pointwise is a 1×1×1 conv (no cache: its kernel has no time extent).
func (p *pass) pointwise(x *tensor.Tensor, w conv) *tensor.Tensor {
	return p.ops.Conv(x, w.W, w.B, []int{1, 1, 1}, []int{0, 0, 0})
}

// resBlock is WanResidualBlock. It consumes x. The 1×1×1 shortcut (when
// the channels change) is computed after the residual branch, so that only
// x, not the wider shortcut output, is held through it.
func (p *pass) resBlock(x *tensor.Tensor, l *resLayer) *tensor.Tensor {
	if l.in == l.out {
		return p.identityRes(x, &l.w.Core)
	}
	y := p.resCore(x, &l.w.Core)
	h := p.pointwise(x, l.w.Shortcut)
	x.Free()
	p.ops.AddInPlace(y, h)
	h.Free()
	return y
}

// resCore is the residual branch: norm, SiLU, conv, twice. x is kept.
func (p *pass) resCore(x *tensor.Tensor, w *resCore) *tensor.Tensor {
	a := p.causalConv(p.normSiLU(x, w.Norm1), w.Conv1)
	b := p.normSiLU(a, w.Norm2)
	a.Free()
	return p.causalConv(b, w.Conv2)
}

// identityRes is a residual block whose shortcut is the identity.
func (p *pass) identityRes(x *tensor.Tensor, w *resCore) *tensor.Tensor {
	y := p.resCore(x, w)
	p.ops.AddInPlace(y, x)
	x.Free()
	return y
}

// mid is WanMidBlock: residual block, attention, residual block. It
// consumes x.
func (p *pass) mid(x *tensor.Tensor, w *midWeights) *tensor.Tensor {
	x = p.identityRes(x, &w.Res0)
	x = p.attention(x, &w.Attn)
	return p.identityRes(x, &w.Res1)
}

// attention is WanAttentionBlock: single-head self-attention over the
// positions of each frame, computed channels-last (the 1×1 convs are
// Linears there). It consumes x.
func (p *pass) attention(x *tensor.Tensor, w *attnWeights) *tensor.Tensor {
	ops := p.ops
	s := x.Shape()
	b, c, t, h, wd := s[0], s[1], s[2], s[3], s[4]
	xl := ops.Permute(x, 0, 2, 3, 4, 1)
	n := ops.RMSNorm(xl, view(ops, w.Norm, c), normEps(c))
	xl.Free()
	qkv := ops.Linear(n, view(ops, w.QKV.W, 3*c, c), w.QKV.B)
	n.Free()
	parts := ops.Split(qkv, 4, c, c, c)
	qkv.Free()
	for _, part := range parts {
		reshape(ops, part, b*t, h*wd, 1, c)
	}
	o := ops.Attention(parts[0], parts[1], parts[2], nil, float32(1/math.Sqrt(float64(c))))
	tensor.Free(parts...)
	reshape(ops, o, b, t, h, wd, c)
	y := ops.Linear(o, view(ops, w.Proj.W, c, c), w.Proj.B)
	o.Free()
	out := ops.Permute(y, 0, 4, 1, 2, 3)
	y.Free()
	ops.AddInPlace(out, x)
	x.Free()
	return out
}

// frameConv2d is a 3×3 Conv2d applied to every frame: a 3-D conv whose
// kernel has no time extent.
func (p *pass) frameConv2d(x *tensor.Tensor, w conv, stride, pad int) *tensor.Tensor {
	ws := w.W.Shape()
	k := view(p.ops, w.W, ws[0], ws[1], 1, ws[2], ws[3])
	return p.ops.Conv(x, k, w.B, []int{1, stride, stride}, []int{0, pad, pad})
}

// upsample is WanResample upsample2d / upsample3d. It consumes x.
func (p *pass) upsample(x *tensor.Tensor, l *resampleLayer) *tensor.Tensor {
	if l.temporal {
		x = p.timeUpsample(x, l.w.Time)
	}
	// nearest-exact with scale 2 picks source index floor((i+0.5)/2) = i/2:
	// plain nearest.
	u := p.ops.Upsample(x, 2, 2)
	x.Free()
	y := p.frameConv2d(u, l.w.Core.Conv, 1, 1)
	u.Free()
	return y
}

// timeUpsample doubles the frames of x with time_conv (3×1×1, 2C outputs
// interleaved into two frames per input frame). The first chunk passes
// through unchanged and marks its slot "Rep"; the next chunk convolves
// behind zeros rather than behind the first chunk's frames, as the
// reference does. It consumes x.
func (p *pass) timeUpsample(x *tensor.Tensor, w conv) *tensor.Tensor {
	ops := p.ops
	s := p.cache.next()
	if !s.set {
		s.set, s.rep = true, true
		return x
	}
	keep := p.keepFrames(x, s.frames, s.rep)
	prev := s.frames
	if s.rep {
		prev = nil
	}
	sh := x.Shape()
	b, c, t, h, wd := sh[0], sh[1], sh[2], sh[3], sh[4]
	y := p.convFrames(x, prev, w, 1, 0, []int{1, 1, 1})
	s.frames.Free()
	s.frames, s.rep = keep, false

	// [B, 2C, T, H, W] -> [B, 2, C, T, H·W] -> [B, C, T, 2, H·W]: output
	// frame 2t is the first C channels at t, frame 2t+1 the second.
	out := ops.Permute(view(ops, y, b, 2, c, t, h*wd), 0, 2, 3, 1, 4)
	y.Free()
	reshape(ops, out, b, c, 2*t, h, wd)
	return out
}

// downsample is WanResample downsample2d / downsample3d: ZeroPad2d
// (0, 1, 0, 1) and a stride-2 3×3 conv per frame, then for downsample3d
// time_conv (3×1×1, stride 2, no padding) over the previous chunk's last
// frame and this chunk. The first chunk passes through in time. It
// consumes x.
func (p *pass) downsample(x *tensor.Tensor, l *resampleLayer) *tensor.Tensor {
	ops := p.ops
	padded := ops.Pad(x, []int{0, 0, 0, 0, 0}, []int{0, 0, 0, 1, 1})
	x.Free()
	y := p.frameConv2d(padded, l.w.Core.Conv, 2, 0)
	padded.Free()
	if !l.temporal {
		return y
	}
	s := p.cache.next()
	keep := lastFrames(ops, y, 1)
	if !s.set {
		s.frames, s.set = keep, true
		return y
	}
	in := ops.Concat(2, s.frames, y)
	y.Free()
	out := ops.Conv(in, l.w.Time.W, l.w.Time.B, []int{2, 1, 1}, []int{0, 0, 0})
	in.Free()
	s.frames.Free()
	s.frames = keep
	return out
}

// head is norm_out, SiLU and the cached conv_out. It consumes x.
func (p *pass) head(x, gamma *tensor.Tensor, w conv) *tensor.Tensor {
	a := p.normSiLU(x, gamma)
	x.Free()
	return p.causalConv(a, w)
}

// copyInto writes src into dst at offset start along axis; every other
// dimension must match. It writes through views of dst, one contiguous run
// per index of the dimensions before axis, so that results are assembled
// in place instead of concatenated (which would hold them twice).
func copyInto(ops *tensor.Ops, dst, src *tensor.Tensor, axis, start int) {
	if ops.Err() != nil {
		return
	}
	ds, ss := dst.Shape(), src.Shape()
	ok := len(ds) == len(ss) && axis < len(ds) && start >= 0 && start+ss[axis] <= ds[axis] && dst.DType() == src.DType()
	for i := range ds {
		ok = ok && (i == axis || ds[i] == ss[i])
	}
	if !ok {
		ops.Fail(fmt.Errorf("wanvae: cannot place %v into %v at %d along axis %d", src, dst, start, axis))
		return
	}
	outer := tensor.NumElems(ds[:axis])
	inner := tensor.NumElems(ds[axis+1:])
	dv := view(ops, dst, outer*ds[axis], inner)
	sv := view(ops, src, outer*ss[axis], inner)
	for o := range outer {
		d, err := dv.Rows(o*ds[axis]+start, ss[axis])
		if err != nil {
			ops.Fail(err)
			return
		}
		s, err := sv.Rows(o*ss[axis], ss[axis])
		if err != nil {
			ops.Fail(err)
			return
		}
		if err := ops.B.Cast(d, s); err != nil {
			ops.Fail(fmt.Errorf("wanvae: copy: %w", err))
			return
		}
	}
}

// clampInPlace limits t to [-1, 1] without a second copy of the video.
func clampInPlace(ops *tensor.Ops, t *tensor.Tensor) {
	if ops.Err() != nil {
		return
	}
	if err := ops.B.Clamp(t, t, -1, 1); err != nil {
		ops.Fail(fmt.Errorf("wanvae: clamp: %w", err))
	}
}

// checkInput validates a 5-D float32 input [B, channels, T, H, W].
func checkInput(what string, x *tensor.Tensor, channels int) error {
	if x == nil {
		return fmt.Errorf("wanvae: %s is required", what)
	}
	s := x.Shape()
	if x.Rank() != 5 || x.DType() != dtype.F32 || s[1] != channels || s[0] == 0 || s[2] == 0 || s[3] == 0 || s[4] == 0 {
		return fmt.Errorf("wanvae: %s %v, want float32 [B, %d, T, H, W]", what, x, channels)
	}
	return nil
}
