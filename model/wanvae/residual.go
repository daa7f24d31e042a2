package wanvae

import (
	"fmt"

	"ferry/tensor"
)

// This file holds what the Wan 2.2 layout adds to Wan 2.1: the
// parameter-free shortcuts of the residual down and up blocks (diffusers'
// AvgDown3D and DupUp3D) and the 2×2 patching of the video into channels.

// validateShortcuts checks that every AvgDown3D of the residual encoder
// and DupUp3D of the residual decoder splits its channels evenly, as the
// reference asserts when it builds them.
func (c Config) validateShortcuts() error {
	for _, l := range c.encoderLayers() {
		if s := l.avg; s != nil && (s.in*s.factor())%s.out != 0 {
			return fmt.Errorf("wanvae config: the encoder level from %d to %d channels cannot average %d positions into its shortcut (dim_mult?)",
				s.in, s.out, s.factor())
		}
	}
	for i := range c.DimMult {
		if s := c.dupUp(i); s != nil && (s.out*s.factor())%s.in != 0 {
			return fmt.Errorf("wanvae config: decoder level %d (%d to %d channels) cannot duplicate into its shortcut (dim_mult / decoder_base_dim?)",
				i, s.in, s.out)
		}
	}
	return nil
}

// avgDown is AvgDown3D: x [B, C, T, H, W] (kept) with T padded in front
// with zero frames to a multiple of ft, every ft × fs × fs block of
// positions folded into the channels (channel c·factor + (dt·fs + dy)·fs
// + dx), and each run of C·factor/out consecutive channels averaged into
// one of the out channels: [B, out, T/ft, H/fs, W/fs].
func (p *pass) avgDown(x *tensor.Tensor, s *shortcutSpec) *tensor.Tensor {
	ops := p.ops
	if s.factor() == 1 && s.in == s.out {
		return ops.Copy(x)
	}
	sh := x.Shape()
	b, c, t, h, w := sh[0], sh[1], sh[2], sh[3], sh[4]
	in := x
	if pad := (s.ft - t%s.ft) % s.ft; pad > 0 {
		in = ops.Pad(x, []int{0, 0, pad, 0, 0}, []int{0, 0, 0, 0, 0})
		t += pad
	}
	if h%s.fs != 0 || w%s.fs != 0 {
		ops.Fail(fmt.Errorf("wanvae: %dx%d positions do not split into %dx%d blocks (use sizes that are multiples of the spatial scale)", h, w, s.fs, s.fs))
	}
	t2, h2, w2 := t/s.ft, h/s.fs, w/s.fs
	v := view(ops, in, b*c, t2, s.ft, h2, s.fs, w2, s.fs)
	folded := ops.Permute(v, 0, 2, 4, 6, 1, 3, 5)
	if in != x {
		in.Free()
	}
	group := c * s.factor() / s.out
	sum := ops.SumTo(view(ops, folded, b, s.out, group, t2*h2*w2), b, s.out, 1, t2*h2*w2)
	folded.Free()
	ops.AffineInPlace(sum, 1/float32(group), 0)
	reshape(ops, sum, b, s.out, t2, h2, w2)
	return sum
}

// dupUp is DupUp3D: every channel of x [B, in, T, H, W] (kept) repeated
// out·factor/in times, the repeats unfolded into ft frames and fs × fs
// positions: [B, out, T·ft, H·fs, W·fs]. On the first chunk the first
// ft-1 frames are dropped, matching the temporal upsampler, which passes
// its first chunk through unchanged.
func (p *pass) dupUp(x *tensor.Tensor, s *shortcutSpec, first bool) *tensor.Tensor {
	ops := p.ops
	sh := x.Shape()
	b, t, h, w := sh[0], sh[2], sh[3], sh[4]
	repeats := s.out * s.factor() / s.in
	col := view(ops, x, b, s.in, 1, t*h*w)
	copies := make([]*tensor.Tensor, repeats)
	for i := range copies {
		copies[i] = col
	}
	rep := ops.Concat(2, copies...)
	v := view(ops, rep, b*s.out, s.ft, s.fs, s.fs, t, h, w)
	out := ops.Permute(v, 0, 4, 1, 5, 2, 6, 3)
	rep.Free()
	reshape(ops, out, b, s.out, t*s.ft, h*s.fs, w*s.fs)
	if first && s.ft > 1 {
		rest := ops.Narrow(out, 2, s.ft-1, t*s.ft-(s.ft-1))
		out.Free()
		out = rest
	}
	return out
}

// patchify folds every p × p block of pixels of x [B, C, T, H, W] into
// channels, as diffusers' patchify: channel c·p² + dx·p + dy (the column
// offset is the major one). It consumes x.
func patchify(ops *tensor.Ops, x *tensor.Tensor, p int) *tensor.Tensor {
	if p == 1 {
		return x
	}
	s := x.Shape()
	b, c, t, h, w := s[0], s[1], s[2], s[3], s[4]
	if h%p != 0 || w%p != 0 {
		ops.Fail(fmt.Errorf("wanvae: height %d and width %d must be multiples of the patch size %d", h, w, p))
		return x
	}
	v := view(ops, x, b*c, t, h/p, p, w/p, p)
	out := ops.Permute(v, 0, 5, 3, 1, 2, 4)
	x.Free()
	reshape(ops, out, b, c*p*p, t, h/p, w/p)
	return out
}

// unpatchify is the inverse of patchify: [B, C·p², T, H, W] to
// [B, C, T, H·p, W·p]. It consumes x.
func unpatchify(ops *tensor.Ops, x *tensor.Tensor, p int) *tensor.Tensor {
	if p == 1 {
		return x
	}
	s := x.Shape()
	b, cp, t, h, w := s[0], s[1], s[2], s[3], s[4]
	if cp%(p*p) != 0 {
		ops.Fail(fmt.Errorf("wanvae: %d channels do not unfold into %dx%d patches", cp, p, p))
		return x
	}
	c := cp / (p * p)
	v := view(ops, x, b*c, p, p, t, h, w)
	out := ops.Permute(v, 0, 3, 4, 2, 5, 1)
	x.Free()
	reshape(ops, out, b, c, t, h*p, w*p)
	return out
}
