package wanvae

import (
	"errors"
	"fmt"

	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
)

// Decode turns latents z [B, z_dim, T, h, w] (float32 on ops' device,
// already de-normalised: see Config.Denormalize) into video
// [B, 3, 1+4(T-1), s·h, s·w] (s = Config.SpatialScale, the channels
// out_channels / patch_size²) clamped to [-1, 1], which the
// caller frees. When Options.Tiling is set and the latents are wider or
// taller than one tile, it decodes in tiles (DecodeTiled).
//
// The decoder runs one latent frame at a time; between frames every causal
// conv keeps the last two frames of its input (for the real Wan 2.1 VAE at
// 480×832 that is about 3.5 GiB of kept frames, 2.1 GiB of it at full
// size; tiling bounds it by the tile). Each frame's output is written
// straight into the result.
func (m *Model) Decode(r residency.Runner, ops *tensor.Ops, z *tensor.Tensor) (*tensor.Tensor, error) {
	if err := m.checkDecode(ops, z); err != nil {
		return nil, err
	}
	if t := m.Options.Tiling; t != nil {
		scale := m.cfg.SpatialScale()
		if z.Dim(4) > t.MinWidth/scale || z.Dim(3) > t.MinHeight/scale {
			return m.DecodeTiled(r, ops, z, *t)
		}
	}
	out := m.emptyVideo(ops, z, false)
	progress := m.progress(z.Dim(2))
	if err := m.decodeInto(r, ops, z, out, true, progress); err != nil {
		out.Free()
		return nil, err
	}
	clampInPlace(ops, out)
	if err := ops.Err(); err != nil {
		out.Free()
		return nil, fmt.Errorf("wanvae: decode: %w", err)
	}
	return out, nil
}

func (m *Model) checkDecode(ops *tensor.Ops, z *tensor.Tensor) error {
	if m.dec == nil {
		return errors.New("wanvae: the decoder must be declared (Component or DecoderComponent) and registered before Decode")
	}
	if m.srcErr != nil {
		return m.srcErr
	}
	if err := ops.Err(); err != nil {
		return fmt.Errorf("wanvae: ops already failed: %w", err)
	}
	return checkInput("latents", z, m.cfg.ZDim)
}

// emptyVideo allocates the decoded video for latents z: in pixels, or
// still patched (the decoder's own output, out_channels wide) when patched
// is set.
func (m *Model) emptyVideo(ops *tensor.Ops, z *tensor.Tensor, patched bool) *tensor.Tensor {
	s, scale, c := z.Shape(), m.cfg.SpatialScale(), m.cfg.OutChannels
	if patched {
		scale = m.cfg.encoderScale()
	} else {
		c /= m.cfg.patch() * m.cfg.patch()
	}
	return ops.Empty(dtype.F32, s[0], c, m.cfg.DecodedFrames(s[2]), scale*s[3], scale*s[4])
}

// progress returns a per-frame callback reporting to Options.OnFrame over
// total frames; done counts from the first call on.
func (m *Model) progress(total int) func() {
	done, report := 0, m.Options.OnFrame
	return func() {
		done++
		if report != nil {
			report(done, total)
		}
	}
}

// decodeInto decodes z frame by frame into out (unclamped), as
// AutoencoderKLWan._decode does before its clamp; unpatched frames when
// unpatch is set, else the decoder's patched output (which tiles blend).
func (m *Model) decodeInto(r residency.Runner, ops *tensor.Ops, z, out *tensor.Tensor, unpatch bool, frameDone func()) error {
	p := &pass{ops: ops}
	defer p.cache.free()
	defer p.dropShort()
	at := 0
	for k := range z.Dim(2) {
		p.cache.rewind()
		p.first = k == 0
		y, err := m.decodeFrame(r, p, ops.Narrow(z, 2, k, 1))
		if err != nil {
			return err
		}
		if unpatch {
			y = unpatchify(ops, y, m.cfg.patch())
		}
		copyInto(ops, out, y, 2, at)
		at += y.Dim(2)
		y.Free()
		if err := ops.Err(); err != nil {
			return fmt.Errorf("wanvae: decode frame %d: %w", k, err)
		}
		frameDone()
	}
	return nil
}

// decodeFrame runs the decoder's blocks over one latent frame x
// [B, z_dim, 1, h, w], which it consumes. post_quant_conv (1×1×1) is
// applied per frame here rather than to all latents first: the same
// arithmetic per position.
func (m *Model) decodeFrame(r residency.Runner, p *pass, x *tensor.Tensor) (*tensor.Tensor, error) {
	d := m.dec
	step := func(b *residency.Block, f func(*tensor.Tensor) *tensor.Tensor) error {
		return p.run(r, b, func() { x = f(x) })
	}
	err := step(d.in, func(x *tensor.Tensor) *tensor.Tensor {
		y := p.pointwise(x, m.decIn.PostQuant)
		x.Free()
		return p.causalConv(y, m.decIn.Conv)
	})
	if err == nil {
		err = step(d.mid, func(x *tensor.Tensor) *tensor.Tensor { return p.mid(x, &m.decMid) })
	}
	for i, level := range m.decUp {
		for j, l := range level.res {
			if err == nil {
				err = step(d.res[i][j], func(x *tensor.Tensor) *tensor.Tensor {
					if j == 0 && level.dup != nil {
						// The residual level's shortcut reads its input.
						p.dropShort()
						p.short = p.ops.Copy(x)
					}
					return p.resBlock(x, l)
				})
			}
		}
		if level.up != nil && err == nil {
			err = step(d.up[i], func(x *tensor.Tensor) *tensor.Tensor { return p.upLevel(x, &level) })
		}
	}
	if err == nil {
		err = step(d.out, func(x *tensor.Tensor) *tensor.Tensor { return p.head(x, m.decOut.Norm, m.decOut.Conv) })
	}
	if err != nil {
		x.Free()
		return nil, err
	}
	return x, nil
}

// checkTiling refuses, for the Wan 2.2 layout, tiles and strides that
// are not whole latents: its encoder's shortcuts need every tile to be a
// multiple of the spatial scale.
func (m *Model) checkTiling(t Tiling) error {
	q := m.cfg.SpatialScale()
	if m.cfg.IsResidual && (t.MinHeight%q != 0 || t.MinWidth%q != 0 || t.StrideHeight%q != 0 || t.StrideWidth%q != 0) {
		return fmt.Errorf("wanvae: tiling %+v: the Wan 2.2 VAE needs tiles and strides that are multiples of %d pixels", t, q)
	}
	return nil
}

// upLevel runs the upsampler of a decoder level and, in a residual level,
// adds the DupUp3D shortcut of the level's input. It consumes x.
func (p *pass) upLevel(x *tensor.Tensor, level *decLevel) *tensor.Tensor {
	x = p.upsample(x, level.up)
	if level.dup == nil {
		return x
	}
	h := p.dupUp(p.short, level.dup, p.first)
	p.dropShort()
	p.ops.AddInPlace(x, h)
	h.Free()
	return x
}

// DecodeTiled is AutoencoderKLWan.tiled_decode: the latents are cut into
// tiles of t.MinHeight/s × t.MinWidth/s every t.StrideHeight/s ×
// t.StrideWidth/s latents (s = Config.SpatialScale), each decoded on its
// own (all frames, own cache), each blended with the tile above and the
// tile to its left over MinHeight-StrideHeight and MinWidth-StrideWidth
// pixels with linear ramps, cropped to the stride, assembled and clamped.
// With patching (Wan 2.2) blending, cropping and assembly count patches
// of p × p pixels, as diffusers does before it unpatches. Only the
// previous row's bottom edges and the previous tile's right edge are kept.
func (m *Model) DecodeTiled(r residency.Runner, ops *tensor.Ops, z *tensor.Tensor, t Tiling) (*tensor.Tensor, error) {
	if err := m.checkDecode(ops, z); err != nil {
		return nil, err
	}
	scale := m.cfg.SpatialScale()
	if err := t.validate(scale); err != nil {
		return nil, err
	}
	if err := m.checkTiling(t); err != nil {
		return nil, err
	}
	// Tiles are decoded, blended and cropped still patched (in units of
	// patch pixels), as diffusers does, and unpatched row by row.
	s, pt := z.Shape(), m.cfg.patch()
	g := tileGrid{
		inH: s[3], inW: s[4],
		tileH: t.MinHeight / scale, tileW: t.MinWidth / scale,
		strideH: t.StrideHeight / scale, strideW: t.StrideWidth / scale,
		blendH: t.MinHeight/pt - t.StrideHeight/pt, blendW: t.MinWidth/pt - t.StrideWidth/pt,
		cropH: t.StrideHeight / pt, cropW: t.StrideWidth / pt,
		patch: pt,
	}
	progress := m.progress(g.count() * s[2])
	decodeTile := func(y0, x0, h, w int) (*tensor.Tensor, error) {
		rows := ops.Narrow(z, 3, y0, h)
		tile := ops.Narrow(rows, 4, x0, w)
		rows.Free()
		defer tile.Free()
		out := m.emptyVideo(ops, tile, true)
		if err := m.decodeInto(r, ops, tile, out, false, progress); err != nil {
			out.Free()
			return nil, fmt.Errorf("tile at latent (%d, %d): %w", y0, x0, err)
		}
		return out, nil
	}
	out := m.emptyVideo(ops, z, false)
	if err := g.assemble(ops, out, decodeTile); err != nil {
		out.Free()
		return nil, err
	}
	clampInPlace(ops, out)
	if err := ops.Err(); err != nil {
		out.Free()
		return nil, fmt.Errorf("wanvae: tiled decode: %w", err)
	}
	return out, nil
}
