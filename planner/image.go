package planner

import (
	"fmt"
	"os"
	"slices"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/clipvision"
	"ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/residency"
)

// ImageEncoder is the CLIP vision tower of Wan 2.1 image-to-video folders.
const ImageEncoder = "image_encoder"

// ImageToVideoClass is the pipeline class of image-to-video folders.
const ImageToVideoClass = "WanImageToVideoPipeline"

// presetComponents are the components the presets place: every weight
// component a Wan folder may hold. A plan entry for a component the
// folder lacks is never read.
func presetComponents() []string {
	return []string{TextEncoder, ImageEncoder, Transformer, VAE}
}

// AddImageEncoder adds the CLIP image encoder of an image-to-video folder
// to the profile, right after the text encoder (the order the pipeline
// runs them): the blocks Encode runs (clipvision's RunParams: the last
// layer and the post layernorm are never loaded), stored as storage.
func (p *Profile) AddImageEncoder(cfg clipvision.Config, storage dtype.DType) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("planner: %s: %s: %w", p.Name, ImageEncoder, err)
	}
	if p.Component(ImageEncoder) != nil {
		return fmt.Errorf("planner: %s: the profile already has an %s", p.Name, ImageEncoder)
	}
	params := cfg.RunParams()
	c := ComponentFromParams(ImageEncoder, storage, params)
	matrix, err := residency.MatrixWeights(clipvision.New(cfg).Component(ImageEncoder, nil))
	if err != nil {
		return fmt.Errorf("planner: %s: %w", p.Name, err)
	}
	c.MarkMatrices(params, matrix)
	at := 0
	for i, x := range p.Components {
		if x.Name == TextEncoder {
			at = i + 1
		}
	}
	p.Components = append(p.Components[:at], append([]*ComponentProfile{c}, p.Components[at:]...)...)
	p.Image = &cfg
	return nil
}

// clipPass is one clipvision Encode of b images, allocation for
// allocation as model/clipvision/encode.go makes them. The embedding
// uploads the pixels, convolves them into patches, permutes them to
// tokens, builds the class rows, joins both and normalises; the result,
// the hidden state [b, T, D], lives through the pass (hidden_states[-2]).
// Each layer normalises, projects q, k and v, attends, projects the
// output, then normalises again and runs the MLP (quick_gelu takes one
// more [b, T, intermediate] for its gate). The result's id is returned
// for the caller to free once downloaded.
func clipPass(c clipvision.Config, b int, id *ids) (pass, int) {
	t, d, in, p := c.Tokens(), c.HiddenSize, c.IntermediateSize, c.NumPatches()
	r := &recorder{ids: id}
	var ps pass
	px := c.NumChannels * c.ImageSize * c.ImageSize
	img := r.alloc(f32(b, px))
	conv := r.alloc(f32(b, d, p))
	r.free(img)
	patches := r.alloc(f32(b, p, d))
	r.free(conv)
	zeros := r.alloc(f32(b, 1, d))
	class := r.alloc(f32(b, 1, d))
	r.free(zeros)
	joined := r.alloc(f32(b, t, d))
	r.free(class, patches)
	x := r.alloc(f32(b, t, d))
	r.free(joined)
	ps.calls = append(ps.calls, call{block: 0, ev: r.take(), work: work{
		gemm: 2 * float64(b*p) * float64(c.NumChannels*c.PatchSize*c.PatchSize*d),
		mem:  4 * float64(b) * float64(px+3*t*d),
	}})
	quick := c.HiddenAct == "quick_gelu"
	bf, tf, df, inf := float64(b), float64(t), float64(d), float64(in)
	for i := range c.RunLayers() {
		hn := r.alloc(f32(b, t, d))
		q, k, v := r.alloc(f32(b, t, d)), r.alloc(f32(b, t, d)), r.alloc(f32(b, t, d))
		o := r.alloc(f32(b, t, d))
		r.free(q, k, v)
		a := r.alloc(f32(b, t, d))
		r.free(o, hn, a)
		hn = r.alloc(f32(b, t, d))
		h := r.alloc(f32(b, t, in))
		r.free(hn)
		if quick {
			r.free(r.alloc(f32(b, t, in)))
		}
		out := r.alloc(f32(b, t, d))
		r.free(h, out)
		ps.calls = append(ps.calls, call{block: 1 + i, ev: r.take(), work: work{
			gemm: 2 * bf * tf * (4*df*df + 2*df*inf),
			attn: attnFlops(4*bf*tf*tf*df, c.HeadDim()),
			mem:  4 * bf * tf * (14*df + 3*inf),
		}})
	}
	return ps, x
}

// image simulates the image encoder of an image-to-video profile (nothing
// otherwise): one batch of the request's images (imagesEncoded), their
// hidden states downloaded and freed, the time counted with the text
// encoding's (pipeline/wan times both as the text phase).
func (pl *pipelineSim) image() {
	if pl.p.Image == nil {
		return
	}
	s, enc := pl.s, pl.s.byName[ImageEncoder]
	if enc == nil {
		return
	}
	t0 := s.now
	ps, out := clipPass(*pl.p.Image, imagesEncoded(pl.p), pl.id)
	s.runPass(enc, ps)
	s.done(enc)
	s.apply(event{id: out}, enc.acts)
	pl.tText += s.now - t0
}

// imagesEncoded is how many images the image encoder takes per request:
// two for a first-last-frame transformer (FLF2V: pos_embed_seq_len, which
// refuses fewer), else one. A last frame given to a Wan 2.2 I2V model
// goes to the VAE alone, whose condition video has the same frames.
func imagesEncoded(p *Profile) int {
	if p.Wan.ImageTokens() > 0 {
		return 2
	}
	return 1
}

// WithImage is a copy of p that plans requests giving an image
// (UseImage), leaving p as it is: a server plans a TI2V model's text- and
// image-to-video requests from one profile.
func (p *Profile) WithImage() (*Profile, error) {
	q := p.ownVAE()
	return q, q.UseImage()
}

// WithVideo is a copy of p that plans video-to-video requests (UseVideo),
// leaving p as it is: a server plans a model's text-to-video requests and
// its remixes from one profile.
func (p *Profile) WithVideo() (*Profile, error) {
	q := p.ownVAE()
	return q, q.UseVideo()
}

// ownVAE is a copy of p with a VAE component of its own (the one the
// image modes change), the others shared with p.
func (p *Profile) ownVAE() *Profile {
	q := *p
	q.Components = slices.Clone(p.Components)
	for i, c := range q.Components {
		if c.Name == VAE {
			vae := *c
			q.Components[i] = &vae
		}
	}
	return &q
}

// UseImage makes the profile plan a request that gives an image: an
// image-to-video model's profile already does, a TI2V one (ImageVAE)
// switches to encoding the image alone, as its WanPipeline folder runs
// with --image; a text-to-video model takes none.
func (p *Profile) UseImage() error {
	switch {
	case p.ImageMode != NoImage:
		return nil
	case p.ImageVAE == nil:
		return fmt.Errorf("planner: %s is a text-to-video model: it takes no image (image-to-video models: %s folders, and TI2V ones)", p.Name, ImageToVideoClass)
	}
	return p.SetImageMode(ImageAlone, *p.ImageVAE)
}

// folderImageToVideo profiles an image-to-video folder: the VAE encodes
// the condition (the image alone under expand_timesteps, else the image
// and black frames), and the image encoder runs when the transformer takes
// image embeddings (image_dim set: Wan 2.1 I2V), as pipeline/wan runs it
// only then; its config goes into raw for the storage dtype.
func folderImageToVideo(f *checkpoint.Folder, dir string, p *Profile, tr wan.Config, vae wanvae.Config, raw map[string][]byte) error {
	expand, _ := f.Config["expand_timesteps"].(bool)
	p.ExpandTimesteps = expand
	if f.Class != ImageToVideoClass {
		if expand {
			p.ImageVAE = &vae // a TI2V WanPipeline folder: UseImage
		}
		return nil
	}
	mode := ImageThenZeros
	if expand {
		mode = ImageAlone
	}
	if err := p.SetImageMode(mode, vae); err != nil {
		return err
	}
	if tr.ImageDim == nil {
		return nil
	}
	c, err := f.Component(ImageEncoder)
	if err != nil {
		return fmt.Errorf("planner: %s: the transformer takes image embeddings: %w", dir, err)
	}
	path, err := c.ConfigPath()
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	if raw[ImageEncoder], err = os.ReadFile(path); err != nil {
		return fmt.Errorf("planner: read %s config: %w", ImageEncoder, err)
	}
	cfg, err := clipvision.ParseConfig(raw[ImageEncoder])
	if err != nil {
		return fmt.Errorf("planner: %s: %w", dir, err)
	}
	return p.AddImageEncoder(cfg, dtype.F32)
}

// completeImage places an image-to-video profile's image encoder like its
// text encoder when the plan names the text encoder but not the image
// encoder (plans the search makes, older plan files): both encode the
// request's conditioning before the loop. Block-level settings do not
// carry over (the blocks differ).
func completeImage(p *Profile, plan *residency.Plan) *residency.Plan {
	if plan == nil || p == nil || p.Component(ImageEncoder) == nil {
		return plan
	}
	if _, ok := plan.Components[ImageEncoder]; ok {
		return plan
	}
	c, ok := plan.Components[TextEncoder]
	if !ok {
		return plan
	}
	c.Persistent, c.Blocks = 0, nil
	out := clonePlan(plan)
	out.Components[ImageEncoder] = c
	return out
}
