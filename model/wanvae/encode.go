package wanvae

import (
	"errors"
	"fmt"

	"ferry/residency"
	"ferry/tensor"
)

// encodeChunk is the number of frames the encoder reads at a time after
// the first frame (diffusers' _encode hard-codes 4).
const encodeChunk = 4

// Encode turns video [B, in_channels, F, H, W] (float32 in [-1, 1] on ops'
// device) into the latent distribution's mean and log-variance (clamped to
// [-30, 20]), each [B, z_dim, 1+(F-1)/4, H/s, W/s] (s =
// Config.SpatialScale); see Std. As in
// diffusers, frames after the last whole chunk of 4 are ignored. When
// Options.Tiling is set and the video is wider or taller than one tile, it
// encodes in tiles (EncodeTiled). The caller frees both results.
func (m *Model) Encode(r residency.Runner, ops *tensor.Ops, video *tensor.Tensor) (mean, logvar *tensor.Tensor, err error) {
	if err := m.checkEncode(ops, video); err != nil {
		return nil, nil, err
	}
	if t := m.Options.Tiling; t != nil && (video.Dim(4) > t.MinWidth || video.Dim(3) > t.MinHeight) {
		return m.EncodeTiled(r, ops, video, *t)
	}
	h, err := m.encodeRaw(r, ops, video, m.progress(encodeChunks(video.Dim(2))))
	if err != nil {
		return nil, nil, err
	}
	return m.posterior(ops, h)
}

func (m *Model) checkEncode(ops *tensor.Ops, video *tensor.Tensor) error {
	if m.enc == nil {
		return errors.New("wanvae: the encoder must be declared (Component or EncoderComponent) and registered before Encode")
	}
	if m.srcErr != nil {
		return m.srcErr
	}
	if err := ops.Err(); err != nil {
		return fmt.Errorf("wanvae: ops already failed: %w", err)
	}
	if err := checkInput("video", video, m.cfg.VideoChannels()); err != nil {
		return err
	}
	if m.cfg.IsResidual {
		if q := m.cfg.SpatialScale(); video.Dim(3)%q != 0 || video.Dim(4)%q != 0 {
			return fmt.Errorf("wanvae: video %dx%d: the Wan 2.2 VAE encodes heights and widths that are multiples of %d", video.Dim(3), video.Dim(4), q)
		}
	}
	return nil
}

// encodeChunks is the number of chunks (and latent frames) of f frames.
func encodeChunks(f int) int { return 1 + (f-1)/encodeChunk }

// Std is the latent distribution's standard deviation exp(logvar / 2), in
// a new tensor.
func Std(ops *tensor.Ops, logvar *tensor.Tensor) *tensor.Tensor {
	s := ops.Affine(logvar, 0.5, 0)
	ops.UnaryInPlace(s, tensor.Exp)
	return s
}

// posterior splits the encoder's moments h [B, 2·z_dim, ...] (which it
// frees) into mean and clamped log-variance, as DiagonalGaussianDistribution
// does.
func (m *Model) posterior(ops *tensor.Ops, h *tensor.Tensor) (mean, logvar *tensor.Tensor, err error) {
	z := m.cfg.ZDim
	mean = ops.Narrow(h, 1, 0, z)
	raw := ops.Narrow(h, 1, z, z)
	h.Free()
	logvar = ops.Clamp(raw, -30, 20)
	raw.Free()
	if err := ops.Err(); err != nil {
		tensor.Free(mean, logvar)
		return nil, nil, fmt.Errorf("wanvae: encode: %w", err)
	}
	return mean, logvar, nil
}

// encodeRaw runs the encoder and quant_conv over video chunk by chunk
// (frames [0, 1), then [1, 5), [5, 9), ...) and returns the moments
// [B, 2·z_dim, chunks, H/s, W/s], patching each chunk first. quant_conv (1×1×1) is applied per chunk:
// the same arithmetic per position as applying it to the joined result.
func (m *Model) encodeRaw(r residency.Runner, ops *tensor.Ops, video *tensor.Tensor, chunkDone func()) (*tensor.Tensor, error) {
	p := &pass{ops: ops}
	defer p.cache.free()
	defer p.dropShort()
	var outs []*tensor.Tensor
	defer func() { tensor.Free(outs...) }()
	for i := range encodeChunks(video.Dim(2)) {
		p.cache.rewind()
		start, n := 0, 1
		if i > 0 {
			start, n = 1+encodeChunk*(i-1), encodeChunk
		}
		chunk := patchify(ops, ops.Narrow(video, 2, start, n), m.cfg.patch())
		y, err := m.encodeChunk(r, p, chunk)
		if err != nil {
			return nil, err
		}
		outs = append(outs, y)
		chunkDone()
	}
	h := ops.Concat(2, outs...)
	if err := ops.Err(); err != nil {
		h.Free()
		return nil, fmt.Errorf("wanvae: encode: %w", err)
	}
	return h, nil
}

// encodeChunk runs the encoder's blocks over frames x, which it consumes.
func (m *Model) encodeChunk(r residency.Runner, p *pass, x *tensor.Tensor) (*tensor.Tensor, error) {
	e := m.enc
	step := func(b *residency.Block, f func(*tensor.Tensor) *tensor.Tensor) error {
		return p.run(r, b, func() { x = f(x) })
	}
	err := step(e.in, func(x *tensor.Tensor) *tensor.Tensor { return p.causalConv(x, m.encIn.Conv) })
	for k, l := range m.encDown {
		if err != nil {
			break
		}
		err = step(e.down[k], func(x *tensor.Tensor) *tensor.Tensor { return p.encLayer(x, l) })
	}
	if err == nil {
		err = step(e.mid, func(x *tensor.Tensor) *tensor.Tensor { return p.mid(x, &m.encMid) })
	}
	if err == nil {
		err = step(e.out, func(x *tensor.Tensor) *tensor.Tensor {
			y := p.head(x, m.encOut.Norm, m.encOut.Conv)
			z := p.pointwise(y, m.encOut.Quant)
			y.Free()
			return z
		})
	}
	if err != nil {
		x.Free()
		return nil, err
	}
	return x, nil
}

// encLayer runs one layer of the encoder's down path. In a residual level
// the first layer takes the AvgDown3D shortcut of its input (computed up
// front: it is smaller than the input it would otherwise keep) and the
// last adds it to its output. It consumes x.
func (p *pass) encLayer(x *tensor.Tensor, l encLayer) *tensor.Tensor {
	if l.avg != nil {
		p.dropShort()
		p.short = p.avgDown(x, l.avg)
	}
	if l.res != nil {
		x = p.resBlock(x, l.res)
	} else {
		x = p.downsample(x, l.down)
	}
	if l.closes {
		p.ops.AddInPlace(x, p.short)
		p.dropShort()
	}
	return x
}

// EncodeTiled is AutoencoderKLWan.tiled_encode: the video is cut into
// tiles of t.MinHeight × t.MinWidth pixels every t.StrideHeight ×
// t.StrideWidth, each encoded on its own, blended with the tile above and
// to the left over (Min-Stride)/s latents, cropped to Stride/s latents and
// assembled; then split into mean and log-variance as Encode does. With
// patching (Wan 2.2) the grid runs over the patched video with the sizes
// as given, now counting patches, as diffusers 0.40 does (its fix of the
// tiled encode for patch_size, huggingface/diffusers#12753, divides only
// the compression ratio by the patch): a tile of 256 is 256 patches (512
// pixels) and keeps 256/8 latents, twice the decode's tile in pixels.
func (m *Model) EncodeTiled(r residency.Runner, ops *tensor.Ops, video *tensor.Tensor, t Tiling) (mean, logvar *tensor.Tensor, err error) {
	if err := m.checkEncode(ops, video); err != nil {
		return nil, nil, err
	}
	scale := m.cfg.SpatialScale()
	if err := t.validate(scale); err != nil {
		return nil, nil, err
	}
	if err := m.checkTiling(t); err != nil {
		return nil, nil, err
	}
	// As diffusers, the grid runs over the patched video (units of
	// patches); each tile is cut from the video and patched chunk by
	// chunk.
	s, pt, enc := video.Shape(), m.cfg.patch(), m.cfg.encoderScale()
	g := tileGrid{
		inH: s[3] / pt, inW: s[4] / pt,
		tileH: t.MinHeight, tileW: t.MinWidth,
		strideH: t.StrideHeight, strideW: t.StrideWidth,
		blendH: t.MinHeight/enc - t.StrideHeight/enc, blendW: t.MinWidth/enc - t.StrideWidth/enc,
		cropH: t.StrideHeight / enc, cropW: t.StrideWidth / enc,
	}
	chunks := encodeChunks(s[2])
	progress := m.progress(g.count() * chunks)
	encodeTile := func(y0, x0, h, w int) (*tensor.Tensor, error) {
		rows := ops.Narrow(video, 3, y0*pt, h*pt)
		tile := ops.Narrow(rows, 4, x0*pt, w*pt)
		rows.Free()
		defer tile.Free()
		out, err := m.encodeRaw(r, ops, tile, progress)
		if err != nil {
			return nil, fmt.Errorf("tile at pixel (%d, %d): %w", y0*pt, x0*pt, err)
		}
		return out, nil
	}
	h := ops.Empty(video.DType(), s[0], 2*m.cfg.ZDim, m.cfg.EncodedFrames(s[2]), s[3]/scale, s[4]/scale)
	if err := g.assemble(ops, h, encodeTile); err != nil {
		h.Free()
		return nil, nil, err
	}
	return m.posterior(ops, h)
}
