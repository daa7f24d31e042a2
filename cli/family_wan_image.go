package cli

import (
	"errors"
	"fmt"

	"ferry/imageproc"
	"ferry/media"
	"ferry/pipeline/wan"
	"ferry/planner"
)

// readImages loads --image and --last-image into the request:
// image-to-video folders require the first, TI2V folders switch to image
// to video with it, and other text-to-video folders refuse it. Whether
// the folder takes a last frame is Pipeline.CheckImages', once the
// request's frames are final.
func readImages(p *wan.Pipeline, r *wan.Request, path, last string) error {
	switch {
	case path == "" && p.RequiresImage():
		return userf("--image FILE.png|.jpg is required: this folder is an image-to-video pipeline (%s)", wan.ImageToVideoClass)
	case path == "" && last != "":
		return userf("--last-image %s needs --image too: the video runs from the first frame's image to the last's", last)
	case path == "":
		return nil
	case !p.AcceptsImage():
		return userf("--image %s: this folder is a text-to-video pipeline; drop --image or use an image-to-video folder (%s) or a TI2V one", path, wan.ImageToVideoClass)
	}
	img, err := imageproc.Load(path)
	if err != nil {
		return asUser(fmt.Errorf("--image: %w", err))
	}
	if err := p.SetImageMode(true); err != nil {
		return asUser(err)
	}
	r.Image, r.ImageFile = img, path
	if last == "" {
		return nil
	}
	if r.LastImage, err = imageproc.Load(last); err != nil {
		return asUser(fmt.Errorf("--last-image: %w", err))
	}
	r.LastImageFile = last
	return nil
}

// readVideo reads --video into the request (video to video): its first
// --frames frames, or all of them down to the largest 4k+1, as the VAE
// encodes 1 + 4k frames and diffusers' pipeline drops the rest; and
// --strength, which needs --video.
func readVideo(p *wan.Pipeline, r *wan.Request, g *genFlags) ([]string, error) {
	given := g.strength >= 0
	if err := checkStrength(g.video, given, g.strength); err != nil || g.video == "" {
		return nil, err
	}
	want := 0
	if g.frames != 0 {
		want = r.Frames
	}
	clip, notes, err := videoClip(g.video, want)
	if err != nil {
		return nil, err
	}
	for i, f := range clip.Frames {
		img, err := imageproc.NewRGB(clip.Width, clip.Height, f)
		if err != nil {
			return nil, asUser(fmt.Errorf("--video %s frame %d: %w", g.video, i, err))
		}
		r.Video = append(r.Video, img)
	}
	r.Frames, r.VideoFile, r.Strength = len(clip.Frames), g.video, wan.DefaultStrength
	if given {
		r.Strength = g.strength
	}
	if err := p.SetVideoMode(true); err != nil {
		return nil, asUser(err)
	}
	return notes, nil
}

// checkStrength checks --strength (given or not) beside --video, for
// generate and plan.
func checkStrength(video string, given bool, strength float64) error {
	switch {
	case video == "" && given:
		return userf("--strength applies to video to video: add --video FILE")
	case given && !(strength > 0 && strength <= 1): // NaN too
		return userf("--strength %g: want a number in (0, 1] (1 runs every step)", strength)
	}
	return nil
}

// videoClip decodes --video for generate and plan: its first frames
// frames when --frames is given (frames > 0), else all of them down to
// the largest 4k+1, as the VAE encodes 1 + 4k frames and diffusers'
// pipeline drops the rest (with a note).
func videoClip(path string, frames int) (*media.Clip, []string, error) {
	clip, err := media.Decode(path, frames)
	if err != nil {
		return nil, nil, asUser(fmt.Errorf("--video: %w", err))
	}
	n := len(clip.Frames)
	if frames > n {
		return nil, nil, userf("--video %s has %d frames; --frames %d needs that many", path, n, frames)
	}
	if frames > 0 {
		return clip, nil, nil
	}
	use := (n-1)/4*4 + 1
	var notes []string
	if use < n {
		notes = append(notes, fmt.Sprintf("the video's %d frames are not 4k+1; using its first %d, as diffusers' VAE encodes them", n, use))
	}
	clip.Frames = clip.Frames[:use]
	return clip, notes, nil
}

// checkImages is Pipeline.CheckImages, naming the flag to change.
func checkImages(p *wan.Pipeline, r wan.Request) error {
	err := p.CheckImages(r)
	var ie *wan.ImageError
	if errors.As(err, &ie) {
		flag := map[string]string{"image": "--image", "last_image": "--last-image", "frames": "--frames"}[ie.Input]
		return userf("%s: %s", flag, ie.Msg)
	}
	return asUser(err)
}

// planImage makes the profile of a folder that runs this request as image
// to video (a TI2V WanPipeline folder given --image) encode the image.
func planImage(prof *planner.Profile, r wan.Request) error {
	if r.Image == nil {
		return nil
	}
	return prof.UseImage()
}

// patchSize makes Pipeline.FitSize's correction (a size rounded down to
// the transformer's patch of latents, 32 for TI2V-5B, as WanPipeline
// and WanImageToVideoPipeline do with a logged warning) and returns the
// note.
func patchSize(p *wan.Pipeline, r *wan.Request) []string {
	h, w := p.FitSize(r.Height, r.Width)
	if h == r.Height && w == r.Width {
		return nil
	}
	note := fmt.Sprintf("height and width must be multiples of %d for this model's patches; using %dx%d instead of %dx%d, as diffusers does", p.SizeMultiple(), w, h, r.Width, r.Height)
	r.Height, r.Width = h, w
	return []string{note}
}
