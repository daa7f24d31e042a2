package planner

import (
	"fmt"

	"ferry/model/wanvae"
	"ferry/residency"
)

// ImageMode says what an image-to-video or video-to-video request encodes
// with the VAE before denoising (pipeline/wan's encodeCondition,
// prepareVideo).
type ImageMode int

const (
	// NoImage: text to video; the VAE only decodes.
	NoImage ImageMode = iota
	// ImageAlone: TI2V (expand_timesteps) encodes the image as one frame.
	ImageAlone
	// ImageThenZeros: Wan 2.1 I2V encodes the image followed by F−1 black
	// frames, the whole video's length.
	ImageThenZeros
	// VideoFrames: video to video encodes the input video, the whole
	// video's length (priced as ImageThenZeros).
	VideoFrames
)

// UseVideo makes a text-to-video profile plan a video-to-video request:
// the VAE encodes the request's frames before the loop. The request's
// Steps are the steps the strength runs.
func (p *Profile) UseVideo() error {
	switch {
	case p.ImageMode != NoImage && p.ImageMode != VideoFrames:
		return fmt.Errorf("planner: %s runs image to video; video to video takes a text-to-video model", p.Name)
	case p.vae == nil:
		return fmt.Errorf("planner: %s has no VAE config to plan its encoder with", p.Name)
	}
	return p.SetImageMode(VideoFrames, *p.vae)
}

// SetImageMode makes the profile an image-to-video one: the VAE component
// holds the encoder's blocks before the decoder's (as pipeline/wan
// registers it, so that plans move and count them) and the simulation
// encodes the condition video before the loop. vae must be the profile's
// VAE config (its parameter list is taken from it).
func (p *Profile) SetImageMode(mode ImageMode, vae wanvae.Config) error {
	if mode == NoImage || p.ImageMode != NoImage {
		p.ImageMode = mode
		return nil
	}
	c := p.Component(VAE)
	if c == nil {
		return fmt.Errorf("planner: %s has no %s", p.Name, VAE)
	}
	full := ComponentFromParams(VAE, c.Storage, vae.Params())
	full.Cached = c.Cached
	*c = *full
	p.ImageMode = mode
	return nil
}

// encodeFrames is how many video frames the condition video has.
func (p *Profile) encodeFrames(req Request) int {
	if p.ImageMode == ImageAlone {
		return 1
	}
	return req.Frames
}

// encoderDims are the encoder's widths: base·[1, dim_mult...].
func (c VAEConfig) encoderDims() []int {
	d := []int{c.BaseDim}
	for _, m := range c.DimMult {
		d = append(d, c.BaseDim*m)
	}
	return d
}

// encodeChunk records one encoder chunk of t frames (1 for the first, 4
// after it, as AutoencoderKLWan._encode cuts the video) at h×w pixels,
// following model/wanvae's encoder: conv_in, the down blocks (residual
// blocks, then a stride-2 spatial conv and on temporal levels the
// frame-halving conv that skips the first chunk), the mid block, norm_out,
// conv_out and quant_conv; on Wan 2.2 each level's AvgDown3D shortcut,
// taken from its input and added to its output.
func (v *vaeRec) encodeChunk(c VAEConfig, t, h, w int) *vt {
	v.idx = 0
	p := c.patch()
	dims := c.encoderDims()
	// The chunk cut from the video (Narrow copies it); patchified into a
	// new tensor where the patch is above 1.
	x := v.alloc(3, t, h, w)
	if p > 1 {
		y := v.alloc(3*p*p, t, h/p, w/p)
		v.free(x)
		x = y
	}
	v.step("encoder.in")
	x = v.causalConv(x, dims[0])
	k, last := 0, len(c.DimMult)-1
	for i := range c.DimMult {
		var short *vt // Wan 2.2: the level's AvgDown3D shortcut
		for j := range c.NumResBlocks {
			v.step(fmt.Sprintf("encoder.down.%d", k))
			k++
			if j == 0 && c.IsResidual {
				ft, fs := 1, 1
				if i != last {
					fs = 2
					if c.TemperalDownsample[i] {
						ft = 2
					}
				}
				short = v.avgDown(x, dims[i+1], ft, fs)
			}
			x = v.resBlock(x, dims[i+1])
		}
		if i != last {
			v.step(fmt.Sprintf("encoder.down.%d", k))
			k++
			x = v.downsample(x, c.TemperalDownsample[i])
		}
		v.free(short) // added to the level's output
	}
	top := dims[len(dims)-1]
	v.step("encoder.mid")
	x = v.resBlock(x, top)
	x = v.attention(x)
	x = v.resBlock(x, top)
	v.step("encoder.out")
	a := v.normSiLU(x)
	v.free(x)
	x = v.causalConv(a, 2*c.ZDim)
	y := v.conv(x, 2*c.ZDim, 1, 1, 0)
	v.free(x)
	v.flush()
	return y
}

// downsample is the encoder's Resample: zero padding, a stride-2 3×3
// conv, and on temporal levels a 3×1×1 stride-2 conv over the cached last
// frame and the chunk (skipped on the first chunk, whose last frame it
// caches).
func (v *vaeRec) downsample(x *vt, temporal bool) *vt {
	pad := v.alloc(x.c, x.t, x.h+1, x.w+1)
	v.free(x)
	y := v.strided(pad, x.c, x.t, x.h/2, x.w/2, 9)
	v.free(pad)
	if !temporal {
		return y
	}
	s := v.next()
	keep := v.lastFrames(y, 1)
	if !s.set {
		s.set, s.frames = true, keep
		return y
	}
	in := v.alloc(y.c, s.frames.t+y.t, y.h, y.w)
	v.free(y)
	out := v.strided(in, in.c, (in.t-3)/2+1, in.h, in.w, 3)
	v.free(in, s.frames)
	s.frames = keep
	return out
}

// avgDown is model/wanvae's AvgDown3D of x to out channels, ft frames and
// fs×fs positions averaged into one: a copy where nothing is averaged,
// else x padded in front to whole frame groups (the first chunk), folded
// by a permuted copy, and summed into the shortcut.
func (v *vaeRec) avgDown(x *vt, out, ft, fs int) *vt {
	if ft*fs*fs == 1 && x.c == out {
		return v.alloc(x.c, x.t, x.h, x.w)
	}
	t := x.t
	var pad *vt
	if p := (ft - t%ft) % ft; p > 0 {
		t += p
		pad = v.alloc(x.c, t, x.h, x.w)
	}
	folded := v.alloc(x.c, t, x.h, x.w)
	v.free(pad)
	sum := v.alloc(out, t/ft, x.h/fs, x.w/fs)
	v.free(folded)
	v.elementwise(folded, 3)
	return sum
}

// strided records a strided convolution's output [c, t, h, w] and flops
// (taps kernel taps per input channel).
func (v *vaeRec) strided(in *vt, c, t, h, w, taps int) *vt {
	y := v.alloc(c, t, h, w)
	padded := roundUp(c, v.panel)
	v.addWork(work{conv: convFlops(2*float64(v.b*t*h*w)*float64(padded*in.c*taps), in.c*taps)})
	return y
}

// encodeImage simulates encodeCondition of an image-to-video request: the
// condition video uploaded to the VAE's device, encoded whole or, with a
// VAE tile the video exceeds, tile by tile (model/wanvae's EncodeTiled),
// the posterior's mean and log-variance made, the video freed, Done, and
// the mean downloaded. pipeline/wan times it with the conditioning (the
// text phase).
func (pl *pipelineSim) encodeImage() {
	if pl.p.ImageMode == NoImage {
		return
	}
	s, vae := pl.s, pl.s.byName[VAE]
	b, frames := pl.req.Batch, pl.p.encodeFrames(pl.req)
	tiles, tiled, err := pl.encodeLayout(frames)
	if err != nil {
		s.fail(err)
		return
	}
	before := vae.stats
	d := &direct{s: s, on: vae.acts, r: &recorder{ids: pl.id}}
	c := pl.p.Coder
	video := d.alloc(f32(b, 3, frames, pl.req.Height, pl.req.Width))
	_, _, lh, lw := pl.req.latent(pl.p)
	lf := 1 + (frames-1)/c.TemporalScale()
	var moments int
	var total float64
	var stats compStats
	if tiled {
		moments, total, stats = pl.encodeTiled(d, frames, tiles)
	} else {
		moments, total, stats = pl.encodeRaw(d, frames, pl.req.Height, pl.req.Width)
	}
	mean := d.alloc(f32(b, c.ZDim, lf, lh, lw))
	raw := d.alloc(f32(b, c.ZDim, lf, lh, lw))
	d.free(moments)
	logvar := d.alloc(f32(b, c.ZDim, lf, lh, lw)) // clamped
	d.free(raw)
	d.free(video)
	t1, beforeDone := s.now, vae.stats
	s.done(vae)
	d.free(logvar, mean)
	vae.stats = before.plus(stats.plus(vae.stats.minus(beforeDone), 1), 1)
	pl.tText += total + (s.now - t1)
}

// encodeTiling is the square tile and stride the pipeline gives the
// encoder (wanvae.SquareTiling: the stride 3/4 of the tile by default),
// and whether a video of h×w pixels is encoded in tiles (it exceeds one).
func encodeTiling(run residency.RunOptions, h, w int) (tile, stride int, ok bool) {
	tile, stride = run.VAETile, run.VAEStride
	if stride <= 0 {
		stride = tile * 3 / 4
	}
	return tile, stride, tile > 0 && (w > tile || h > tile)
}

// encodeGrid is a tiled encode's layout and its tiles' input sizes, in
// patches of the video, by row and by column.
type encodeGrid struct {
	tileLayout
	inRows, inCols []int
}

// encodeLayout is the grid of the request's encode where a VAE tile cuts
// it (tiled false: none), as EncodeTiled lays it over the patched video
// (tile and stride count patches, as in diffusers 0.40), the tiles'
// outputs in latents. It is an error where the tiles do not cover the
// latents: model/wanvae crops each tile to stride/s latents (s the
// encoder's scale over patches), so a stride that is no multiple of s
// leaves the last rows or columns uncovered, and the encode fails (after
// loading).
func (pl *pipelineSim) encodeLayout(frames int) (g encodeGrid, tiled bool, err error) {
	h, w := pl.req.Height, pl.req.Width
	tile, stride, ok := encodeTiling(pl.run, h, w)
	if !ok {
		return g, false, nil
	}
	c := pl.p.Coder
	pt, scale := c.patch(), c.SpatialScale()
	enc := scale / pt
	b, z2, lf := pl.req.Batch, 2*c.ZDim, 1+(frames-1)/c.TemporalScale()
	g.tileLayout = tileLayout{blend: tile/enc - stride/enc, crop: stride / enc, outH: h / scale, outW: w / scale,
		size: func(h, w int) int64 { return f32(b, z2, lf, h, w) }}
	g.inRows, g.rows = cuts(h/pt, tile, stride, enc)
	g.inCols, g.cols = cuts(w/pt, tile, stride, enc)
	for _, side := range []struct {
		what      string
		out, want int
	}{{"columns", sumCrops(g.cols, g.crop), g.outW}, {"rows", sumCrops(g.rows, g.crop), g.outH}} {
		if side.out < side.want {
			unit := "pixels"
			if pt > 1 {
				unit = fmt.Sprintf("(the encode's tiles count %dx%d patches)", pt, pt)
			}
			return g, false, fmt.Errorf("plan: vae_tile %d with stride %d covers %d of the %d latent %s of the image-to-video encode (%dx%d): each tile keeps stride/%d latents; use a stride that is a multiple of %d %s (vae_stride, or a vae_tile of 4/3 of one)",
				tile, stride, side.out, side.want, side.what, w, h, enc, enc, unit)
		}
	}
	return g, true, nil
}

// cuts lays tiles of tile patches every stride over n patches: each
// tile's size in patches and in latents (enc patches a latent).
func cuts(n, tile, stride, enc int) (in, out []int) {
	for x0 := 0; x0 < n; x0 += stride {
		in = append(in, min(tile, n-x0))
		out = append(out, in[len(in)-1]/enc)
	}
	return in, out
}

// sumCrops is what tiles of sizes ns cropped to crop cover together.
func sumCrops(ns []int, crop int) int {
	n := 0
	for _, x := range ns {
		n += min(crop, x)
	}
	return n
}

// encodeRaw records model/wanvae's encodeRaw of the video's h×w pixels
// (the whole video, or a tile of it): the chunks, each chunk's output kept
// until all are joined into the moments, then the outputs and the chunks'
// cache freed. It returns the moments' id and the chunks' time and stats.
func (pl *pipelineSim) encodeRaw(d *direct, frames, h, w int) (int, float64, compStats) {
	s, vae := pl.s, pl.s.byName[VAE]
	b, c := pl.req.Batch, pl.p.Coder
	v := newVAERec(pl.p, b, s.hw.ConvPanel, pl.id)
	var outs []*vt
	total, stats := s.chunkLoop(vae, 1+(frames-1)/4, func(bool) pass {
		v.calls, v.cur, v.pre = nil, nil, nil
		t := 1
		if len(outs) > 0 {
			t = 4
		}
		outs = append(outs, v.encodeChunk(c, t, h, w))
		return pass{pre: v.pre, calls: v.calls, post: v.r.take()}
	})
	scale := c.SpatialScale()
	moments := d.alloc(f32(b, 2*c.ZDim, 1+(frames-1)/c.TemporalScale(), h/scale, w/scale)) // the chunks joined
	for _, o := range outs {
		d.free(o.id)
	}
	for _, sl := range v.slots { // the cache, freed last
		if sl.frames != nil {
			d.free(sl.frames.id)
		}
	}
	return moments, total, stats
}

// tileEncode is what one tile's encode took (encodeTile).
type tileEncode struct {
	t  float64
	st compStats
}

// encodeTile is encodeRaw for one tile of h×w pixels. For the search's
// comparisons (sim.approx) a tile the size of one already encoded is taken
// to cost what that one did and to leave only its moments: an estimate,
// which the search's exact prediction of its choice corrects.
func (pl *pipelineSim) encodeTile(d *direct, frames, h, w int, seen map[[2]int]tileEncode) (int, float64, compStats) {
	if done, ok := seen[[2]int{h, w}]; ok && pl.s.approx {
		c := pl.p.Coder
		scale := c.SpatialScale()
		return d.alloc(f32(pl.req.Batch, 2*c.ZDim, 1+(frames-1)/c.TemporalScale(), h/scale, w/scale)), done.t, done.st
	}
	t, dt, st := pl.encodeRaw(d, frames, h, w)
	seen[[2]int{h, w}] = tileEncode{dt, st}
	return t, dt, st
}

// encodeTiled follows EncodeTiled over the patched video: the moments
// allocated whole first, then the tiles, each cut from the video (rows,
// then columns) and encoded, assembled into them (direct.assemble). It
// returns the moments' id and the tiles' time and stats.
func (pl *pipelineSim) encodeTiled(d *direct, frames int, g encodeGrid) (int, float64, compStats) {
	b, pt := pl.req.Batch, pl.p.Coder.patch()
	moments := d.alloc(g.size(g.outH, g.outW))
	seen := map[[2]int]tileEncode{}
	total, stats := d.assemble(g.tileLayout, func(ri, ci int) (int, float64, compStats) {
		th, tw := g.inRows[ri]*pt, g.inCols[ci]*pt
		rows := d.alloc(f32(b, 3, frames, th, pl.req.Width))
		cut := d.alloc(f32(b, 3, frames, th, tw))
		d.free(rows)
		t, dt, st := pl.encodeTile(d, frames, th, tw, seen)
		d.free(cut)
		return t, dt, st
	})
	return moments, total, stats
}
