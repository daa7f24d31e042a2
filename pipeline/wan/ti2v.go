package wan

import (
	"fmt"

	"ferry/checkpoint"
	wanmodel "ferry/model/wan"
)

// extension is what a folder says of its pipeline beyond Wan 2.1
// text-to-video: Wan 2.2's per-token timesteps (TI2V-5B) and the
// image-to-video conditioning (see i2v.go).
type extension struct {
	// expand is model_index.json's expand_timesteps: the transformer
	// gets one timestep per latent token (TI2V-5B), and in image-to-video
	// mode the first latent frame is the image's, at timestep 0.
	expand bool
	// i2vClass: WanImageToVideoPipeline, an image conditions every video.
	// i2v: an image conditions the next requests (i2vClass, or a TI2V
	// folder switched by SetImageMode).
	i2vClass, i2v bool
	// v2v: video-to-video requests may come (SetVideoMode): the VAE
	// registers its encoder.
	v2v bool
	img imageEncoder
	// cond is the running request's condition (prepareImage).
	cond *condition
}

// openVariant reads the pipeline settings of f and checks the
// transformer's input channels against what the pipeline feeds it: the
// latents alone (text-to-video, TI2V), or the latents, the first-frame
// mask (one channel per frame of a latent frame) and the image's latents
// (Wan 2.1 image-to-video).
func (p *Pipeline) openVariant(f *checkpoint.Folder, w wanmodel.Config) error {
	p.ext.expand, _ = f.Config["expand_timesteps"].(bool)
	p.ext.i2vClass = f.Class == ImageToVideoClass
	p.ext.i2v = p.ext.i2vClass
	if p.ext.i2v {
		if err := p.openImageEncoder(f, w); err != nil {
			return err
		}
	}
	z := p.vaeCfg.ZDim
	want, what := z, "the VAE's z_dim"
	if p.concatCondition() {
		want = 2*z + p.vaeCfg.TemporalScale()
		what = fmt.Sprintf("the VAE's z_dim %d twice plus %d mask channels (image-to-video)", z, p.vaeCfg.TemporalScale())
	}
	if w.InChannels != want {
		return fmt.Errorf("%s: in_channels %d does not match %s (%d)", Transformer, w.InChannels, what, want)
	}
	if w.OutChannels != z {
		return fmt.Errorf("%s: out_channels %d does not match the VAE's z_dim %d", Transformer, w.OutChannels, z)
	}
	return nil
}

// concatCondition says the transformer's input is the latents with the
// condition channels appended (Wan 2.1 image-to-video); TI2V writes the
// image into the first latent frame instead.
func (p *Pipeline) concatCondition() bool { return p.ext.i2v && !p.ext.expand }

// ExpandTimesteps says the transformer takes one timestep per token.
func (p *Pipeline) ExpandTimesteps() bool { return p.ext.expand }

// SpatialScale is the pixels one latent covers along H and W (8 for the
// Wan 2.1 VAE, 16 for Wan 2.2's).
func (p *Pipeline) SpatialScale() int { return p.vaeCfg.SpatialScale() }

// SizeMultiple is what height and width must be multiples of: one
// transformer patch of latents, as WanPipeline rounds them (16 for Wan
// 2.1, 32 for TI2V-5B).
func (p *Pipeline) SizeMultiple() int {
	ps := p.transformer.Config().PatchSize
	return p.SpatialScale() * max(ps[1], ps[2])
}

// latentShape is the request's latents: [videos, z, 1+(F-1)/4, H/s, W/s].
func (p *Pipeline) latentShape(r Request) []int {
	s := p.SpatialScale()
	return []int{r.Videos(), p.ZDim(), (r.Frames-1)/p.vaeCfg.TemporalScale() + 1, r.Height / s, r.Width / s}
}

// LatentShape is the request's initial noise shape for this pipeline.
func (p *Pipeline) LatentShape(r Request) []int { return p.latentShape(r) }

// FitSize is WanPipeline.__call__'s size correction: a height and width
// that are multiples of 16 (what check_inputs asks) but not of
// SizeMultiple are rounded down to it, with a logged warning there
// (TI2V-5B's 32: 720x1280 runs at 704x1280). Other sizes come back as
// they are, for Check and CheckSize to refuse.
func (p *Pipeline) FitSize(height, width int) (int, int) {
	m := p.SizeMultiple()
	if height%16 != 0 || width%16 != 0 || height < m || width < m {
		return height, width
	}
	return height / m * m, width / m * m
}

// CheckSize refuses a height or width the transformer cannot patchify.
func (p *Pipeline) CheckSize(r Request) error {
	m := p.SizeMultiple()
	if r.Height%m != 0 || r.Width%m != 0 {
		return fmt.Errorf("height and width must be multiples of %d for this model, got %dx%d (nearest valid: %dx%d)",
			m, r.Height, r.Width, nearestMultiple(r.Height, m), nearestMultiple(r.Width, m))
	}
	return nil
}
