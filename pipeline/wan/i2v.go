package wan

import (
	"fmt"

	"ferry/checkpoint"
	"ferry/imageproc"
	"ferry/model/clipvision"
	wanmodel "ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/pipeline"
	"ferry/tensor"
)

// Image-to-video (diffusers' WanImageToVideoPipeline, 0.40.0). Two
// layouts share the class:
//
//   - Wan 2.1 I2V: a CLIP vision tower encodes the image (hidden_states[-2])
//     for the transformer's image attention, and the VAE encodes the image
//     followed by F−1 black frames; the transformer sees the latents with
//     4 mask channels (1 on the first latent frame) and those 16 latent
//     channels appended: 36 channels.
//   - TI2V-5B (expand_timesteps): the VAE encodes the image alone; its
//     latents replace the first latent frame before every transformer call
//     and after the loop, and that frame's tokens are at timestep 0.
//
// A last frame (last_image) joins the first: the VAE encodes the image,
// black frames, then the last image, and the mask is 1 on the last video
// frame too. Wan 2.1 FLF2V's transformer (pos_embed_seq_len) takes both
// images' CLIP states as one sequence, so it needs the last frame; Wan
// 2.2 I2V (no image encoder) takes it or not.
const (
	// ImageToVideoClass is the pipeline class of image-to-video folders.
	ImageToVideoClass = "WanImageToVideoPipeline"
	// ImageEncoder is the CLIP vision tower's component (Wan 2.1 I2V).
	ImageEncoder   = "image_encoder"
	imageProcessor = "image_processor"
)

// imageEncoder is Wan 2.1 I2V's CLIP tower and its CLIPImageProcessor;
// model is nil when the transformer takes no image embeddings (TI2V).
type imageEncoder struct {
	model *clipvision.Model
	proc  imageproc.CLIPConfig
}

// condition is what an image-to-video request adds to the denoising:
// computed once per request, before the loop.
type condition struct {
	// channels ([1, 4+z, T, h, w]) are appended to the latents (Wan 2.1).
	channels []float32
	// first ([z, h·w]) is the image's normalised latent frame (TI2V).
	first []float32
	// embeds ([1, tokens, image_dim]) are the CLIP hidden states.
	embeds     []float32
	embedShape []int
}

// openImageEncoder reads the image encoder's and processor's configs when
// the transformer takes image embeddings (image_dim set), as the
// reference only encodes the image for such a transformer.
func (p *Pipeline) openImageEncoder(f *checkpoint.Folder, w wanmodel.Config) error {
	if w.ImageDim == nil {
		return nil
	}
	if _, ok := f.Components[ImageEncoder]; !ok {
		return fmt.Errorf("%s: the transformer takes image embeddings (image_dim %d) but the folder has no %s", f.Dir, *w.ImageDim, ImageEncoder)
	}
	raw, err := rawConfig(f, ImageEncoder)
	if err != nil {
		return err
	}
	cfg, err := clipvision.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", ImageEncoder, err)
	}
	if cfg.HiddenSize != *w.ImageDim {
		return fmt.Errorf("%s: hidden_size %d does not match the transformer's image_dim %d", ImageEncoder, cfg.HiddenSize, *w.ImageDim)
	}
	p.ext.img.proc = imageproc.DefaultCLIPConfig()
	if _, ok := f.Components[imageProcessor]; ok {
		if raw, err = rawConfig(f, imageProcessor); err != nil {
			return err
		}
		if p.ext.img.proc, err = imageproc.ParseCLIPConfig(raw); err != nil {
			return fmt.Errorf("%s: %w", imageProcessor, err)
		}
	}
	p.ext.img.model = clipvision.New(cfg)
	return nil
}

// RequiresImage says the folder is an image-to-video pipeline: every
// request needs an image.
func (p *Pipeline) RequiresImage() bool { return p.ext.i2vClass }

// AcceptsImage says the folder can condition on an image: image-to-video
// folders, and TI2V folders (expand_timesteps), whose WanPipeline folder
// diffusers also loads as WanImageToVideoPipeline.
func (p *Pipeline) AcceptsImage() bool { return p.ext.i2vClass || p.ext.expand }

// SetImageMode switches a TI2V folder to image-to-video (on) or
// text-to-video before Register; image-to-video folders stay on.
func (p *Pipeline) SetImageMode(on bool) error {
	if on && !p.AcceptsImage() {
		return fmt.Errorf("this folder is a text-to-video pipeline; an image needs an image-to-video folder (%s) or a TI2V one (expand_timesteps)", ImageToVideoClass)
	}
	p.ext.i2v = on || p.ext.i2vClass
	return nil
}

// SetVideoMode readies a text-to-video folder for video-to-video requests
// (on) before Register: the VAE registers its encoder too.
func (p *Pipeline) SetVideoMode(on bool) error {
	if on && p.ext.i2vClass {
		return fmt.Errorf("video to video takes a text-to-video folder (WanVideoToVideoPipeline loads one); this one is %s", ImageToVideoClass)
	}
	p.ext.v2v = on
	return nil
}

// HasImageEncoder says the pipeline runs a CLIP image encoder.
func (p *Pipeline) HasImageEncoder() bool { return p.ext.img.model != nil }

// NeedsLastImage says every request needs a last frame: a Wan 2.1 FLF2V
// folder, whose image embedder joins two images' states
// (pos_embed_seq_len), as the reference fails with one image.
func (p *Pipeline) NeedsLastImage() bool {
	return p.HasImageEncoder() && p.transformer.Config().PosEmbedSeqLen != nil
}

// AcceptsLastImage says a request may give a last frame: FLF2V folders,
// and image-to-video folders without an image encoder (Wan 2.2 I2V). A
// Wan 2.1 I2V transformer takes one image's states (the reference fails
// on two); TI2V conditions on its first frame only (the reference ignores
// a last image there).
func (p *Pipeline) AcceptsLastImage() bool {
	return p.ext.i2vClass && !p.ext.expand && (!p.HasImageEncoder() || p.NeedsLastImage())
}

// ImageError is a request's image that does not suit the folder. Input
// names what to change: "image" (the first frame), "last_image" or
// "frames"; callers name it as their users know it (a flag, a field).
type ImageError struct {
	Input string
	Msg   string
}

func (e *ImageError) Error() string { return e.Msg }

// CheckImages checks a request's images against the folder before
// anything runs: an image-to-video request needs a first image, a last
// frame needs a folder that takes one and a video of more than one frame,
// and an FLF2V folder needs the last frame. Errors are *ImageError.
func (p *Pipeline) CheckImages(r Request) error {
	bad := func(input, format string, a ...any) error {
		return &ImageError{Input: input, Msg: fmt.Sprintf(format, a...)}
	}
	if !p.ext.i2v {
		if r.Image != nil || r.LastImage != nil {
			return bad("image", "this folder is a text-to-video pipeline; an image needs an image-to-video folder (%s) or a TI2V one", ImageToVideoClass)
		}
		return nil
	}
	switch {
	case r.Image == nil:
		return bad("image", "this folder is an image-to-video pipeline: every video starts from an image")
	case r.LastImage != nil && !p.AcceptsLastImage():
		why := "a Wan 2.1 I2V transformer takes one image's embeddings"
		if p.ext.expand {
			why = "a TI2V model conditions on its first frame only"
		}
		return bad("last_image", "a last frame needs a first-last-frame folder (Wan 2.1 FLF2V: pos_embed_seq_len) or a Wan 2.2 I2V one; %s: drop the last frame", why)
	case r.LastImage != nil && r.Frames < 2:
		return bad("frames", "a last frame needs a video of more than one frame, got %d", r.Frames)
	case r.LastImage == nil && p.NeedsLastImage():
		return bad("last_image", "this first-last-frame folder (FLF2V: pos_embed_seq_len %d) needs a last frame too", *p.transformer.Config().PosEmbedSeqLen)
	}
	return nil
}

// ComponentNames lists the components that hold weights, in the order
// they run.
func (p *Pipeline) ComponentNames() []string {
	if p.HasImageEncoder() {
		return []string{TextEncoder, ImageEncoder, Transformer, VAE}
	}
	return append([]string(nil), Components...)
}

// prepareImage computes the request's condition (nothing for
// text-to-video): the image embeddings, then the VAE's latents of the
// image, as the reference orders them.
func (p *Pipeline) prepareImage(rt *pipeline.Runtime, r Request, out *Output) error {
	p.ext.cond = nil
	if err := p.CheckImages(r); err != nil || !p.ext.i2v {
		return err
	}
	c := &condition{}
	if p.HasImageEncoder() {
		images := []*imageproc.RGB{r.Image}
		if r.LastImage != nil {
			images = append(images, r.LastImage)
		}
		if err := p.encodeImages(rt, images, c); err != nil {
			return err
		}
		if out.KeepIntermediates {
			out.ImageEmbeds = c.embeds
		}
	}
	lat, err := p.encodeCondition(rt, r)
	if err != nil {
		return err
	}
	if p.ext.expand {
		c.first = lat
	} else {
		c.channels = p.maskedCondition(r, lat)
	}
	if out.KeepIntermediates {
		out.Condition = append(c.first, c.channels...)
	}
	p.ext.cond = c
	return nil
}

// encodeImages is encode_image: CLIPImageProcessor on each image, then
// the tower's hidden_states[-2] for the batch of them ([n, tokens, dim];
// FLF2V's first and last frame are a batch of two).
func (p *Pipeline) encodeImages(rt *pipeline.Runtime, images []*imageproc.RGB, c *condition) error {
	end := rt.Phase(pipeline.PhaseText)
	defer end()
	var px []float32
	for _, img := range images {
		one, _, _, err := imageproc.CLIPPreprocess(img, p.ext.img.proc)
		if err != nil {
			return fmt.Errorf("image processor: %w", err)
		}
		px = append(px, one...)
	}
	ex := rt.Exec
	ops := ex.Ops(ImageEncoder)
	h, err := p.ext.img.model.Encode(ex, ops, px, len(images))
	ex.Done(ImageEncoder)
	if err != nil {
		return fmt.Errorf("image encoder: %w", err)
	}
	c.embedShape = h.Shape()
	c.embeds = ops.Download(h)
	h.Free()
	return ops.Err()
}

// vaeImage is video_processor.preprocess(image, height, width): Lanczos
// to the video's size when the image is another size, then [-1, 1].
func vaeImage(img *imageproc.RGB, w, h int) ([]float32, error) {
	if img.Width != w || img.Height != h {
		var err error
		if img, err = imageproc.ResizeLanczos(img, w, h); err != nil {
			return nil, fmt.Errorf("resize the image to %dx%d: %w", w, h, err)
		}
	}
	return imageproc.VAEPixels(img), nil
}

// encodeCondition encodes the VAE's condition video (the image alone for
// TI2V; the image then F−1 zero frames for Wan 2.1, the last of them the
// last image when the request gives one) and returns the posterior mean,
// normalised: [1, z, T', h, w] with T' 1 or T.
func (p *Pipeline) encodeCondition(rt *pipeline.Runtime, r Request) ([]float32, error) {
	// Timed with the conditioning (text and image encoders), as the
	// planner predicts it: the VAE phase is the decode.
	end := rt.Phase(pipeline.PhaseText)
	defer end()
	px, err := vaeImage(r.Image, r.Width, r.Height)
	if err != nil {
		return nil, err
	}
	frames := r.Frames
	if p.ext.expand {
		frames = 1
	}
	var last []float32
	if r.LastImage != nil && !p.ext.expand {
		if last, err = vaeImage(r.LastImage, r.Width, r.Height); err != nil {
			return nil, err
		}
	}
	// [1, 3, F, H, W]: frame 0 is the image, later frames are zero but
	// the last frame, which is the last image when there is one.
	plane := r.Width * r.Height
	video := make([]float32, 3*frames*plane)
	for ch := range 3 {
		copy(video[ch*frames*plane:], px[ch*plane:(ch+1)*plane])
		if last != nil {
			copy(video[((ch+1)*frames-1)*plane:], last[ch*plane:(ch+1)*plane])
		}
	}
	lat, _, err := p.vaeEncode(rt, video, frames, r.Height, r.Width, nil)
	return lat, err
}

// vaeEncode encodes video [1, 3, f, h, w] in [-1, 1] with the VAE (where
// it is held: a server may share it) under the plan's tiling, reporting
// its frames to onFrame (nil: none), and returns the posterior mean
// (sample_mode="argmax"), normalised as Wan's pipelines and trainers feed
// the transformer, and its shape [1, z, T', h/s, w/s].
func (p *Pipeline) vaeEncode(rt *pipeline.Runtime, video []float32, f, h, w int, onFrame func(done, total int)) ([]float32, []int, error) {
	holder, ex := p.on(VAE, rt)
	vae := holder.vae
	ops := ex.Ops(VAE)
	vae.Options.Tiling = wanvae.SquareTiling(rt.Plan.Run.VAETile, rt.Plan.Run.VAEStride)
	vae.Options.OnFrame = onFrame
	in := ops.Upload(video, 1, 3, f, h, w)
	mean, logvar, err := vae.Encode(ex, ops, in)
	in.Free()
	ex.Done(VAE)
	if err != nil {
		return nil, nil, fmt.Errorf("vae encode: %w", err)
	}
	logvar.Free()
	shape := mean.Shape()
	lat := ops.Download(mean)
	mean.Free()
	if err := ops.Err(); err != nil {
		return nil, nil, err
	}
	if err := p.vaeCfg.Normalize(lat, shape); err != nil {
		return nil, nil, err
	}
	return lat, shape, nil
}

// maskedCondition is Wan 2.1's condition [1, s+z, T, h, w]: s mask
// channels (s the VAE's temporal scale, 4), then the image's latents. The
// reference builds the mask per video frame (1 for frame 0 and, with a
// last image, for frame F−1; 0 for the rest), repeats frame 0's s times
// so that the first latent frame has s of them, and folds each latent
// frame's s frames into channels: every channel of latent frame 0 is 1,
// and with a last image channel s−1 of the last latent frame (its last
// video frame) is 1 too.
func (p *Pipeline) maskedCondition(r Request, lat []float32) []float32 {
	shape := p.latentShape(r)
	t, hw := shape[2], shape[3]*shape[4]
	s := p.vaeCfg.TemporalScale()
	out := make([]float32, (s+p.ZDim())*t*hw)
	ones := func(ch, frame int) {
		plane := out[(ch*t+frame)*hw:][:hw]
		for i := range plane {
			plane[i] = 1
		}
	}
	for ch := range s {
		ones(ch, 0)
	}
	if r.LastImage != nil && t > 1 {
		ones(s-1, t-1)
	}
	copy(out[s*t*hw:], lat)
	return out
}

// modelInput turns host latents [B, z, T, h, w] into the transformer's
// input for the request's condition: unchanged for text-to-video; the
// condition channels appended to each sample (Wan 2.1 I2V); the first
// latent frame replaced by the image's (TI2V).
func (p *Pipeline) modelInput(x []float32, shape []int) ([]float32, []int) {
	c := p.ext.cond
	if c == nil {
		return x, shape
	}
	if c.first != nil {
		y := append([]float32(nil), x...)
		p.pinFirstFrame(y, shape)
		return y, shape
	}
	per := len(x) / shape[0]
	out := make([]float32, 0, len(x)+shape[0]*len(c.channels))
	for b := range shape[0] {
		out = append(out, x[b*per:(b+1)*per]...)
		out = append(out, c.channels...)
	}
	s := append([]int(nil), shape...)
	s[1] += len(c.channels) / (per / shape[1])
	return out, s
}

// pinFirstFrame writes the image's latents into latent frame 0 of every
// sample of x [B, z, T, h, w] (TI2V): (1 − mask)·condition + mask·latents
// with a 0/1 mask is exactly that.
func (p *Pipeline) pinFirstFrame(x []float32, shape []int) {
	c := p.ext.cond
	if c == nil || c.first == nil {
		return
	}
	z, t, hw := shape[1], shape[2], shape[3]*shape[4]
	for b := range shape[0] {
		for ch := range z {
			copy(x[((b*z+ch)*t)*hw:][:hw], c.first[ch*hw:(ch+1)*hw])
		}
	}
}

// transformerForward runs the transformer on the model input in
// [B, C, T, h, w] with the batch's timesteps ts (one per sample, all equal
// under expand_timesteps, as the pipelines give them): under
// expand_timesteps one timestep per token, 0 on the image's frame in TI2V
// image-to-video mode; the image embeddings for an image-conditioned
// transformer, one copy per sample.
func (p *Pipeline) transformerForward(rt *pipeline.Runtime, ops *tensor.Ops, in *tensor.Tensor, ts []float32, ctx textContext) (*tensor.Tensor, error) {
	inputs := wanmodel.Inputs{Timesteps: ts, Context: ctx.t, TextRows: ctx.rows}
	b := in.Dim(0)
	if p.ext.expand {
		var err error
		inputs.TokenTimesteps, err = p.transformer.Config().ExpandTimesteps(b, in.Dim(2), in.Dim(3), in.Dim(4), ts[0], p.ext.i2v)
		if err != nil {
			return nil, err
		}
		inputs.Timesteps = nil
	}
	if c := p.ext.cond; c != nil && c.embeds != nil {
		// One copy of the images' states per sample: [b·n, tokens, dim]
		// for n images (FLF2V's model joins each sample's two).
		shape := append([]int(nil), c.embedShape...)
		shape[0] *= b
		all := make([]float32, 0, b*len(c.embeds))
		for range b {
			all = append(all, c.embeds...)
		}
		inputs.Image = ops.Upload(all, shape...)
		defer inputs.Image.Free()
	}
	return p.transformer.ForwardInputs(rt.Exec, ops, in, inputs)
}
