package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"ferry/imageproc"
	"ferry/pipeline/wan"
)

// Images: an image-to-video request carries its first frame (OpenAI's
// input_reference) and, for first-last-frame models, its last frame
// (last_image, diffusers' name): in JSON as a data URL or base64, in a
// multipart form as files. They are decoded at admission (a bad image is
// a 400), stored with the job (queue.PutInput) before it is queued, and
// read back by whichever worker runs it, so a restart or another machine
// runs the job from the same bytes.

// maxImageBytes bounds one image as uploaded.
const maxImageBytes = 16 << 20

// The inputs a job may store, by queue input name.
const (
	inputImage = "image"
	inputLast  = "last_image"
)

// upload is one image of a request: its bytes as uploaded and decoded.
type upload struct {
	data []byte
	img  *imageproc.RGB
}

// imageFields are the request fields that hold images.
var imageFields = map[string]bool{"input_reference": true, "last_image": true}

// image is the request's image in field: a form's file (formObject
// refuses a field given as both), or the field's text (decodeImage).
func (r VideoRequest) image(field, text string) (*upload, error) {
	if data, ok := r.files[field]; ok {
		return imageUpload(field, data)
	}
	return decodeImage(field, text)
}

// decodeImage reads a JSON image field: a data URL
// ("data:image/png;base64,...") or plain base64 of a PNG or JPEG.
func decodeImage(field, s string) (*upload, error) {
	if s == "" {
		return nil, nil
	}
	payload := s
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			return nil, badField(field, "a data URL must hold base64 (data:image/png;base64,...)")
		}
		payload = data
	} else if strings.Contains(s, "://") {
		return nil, badField(field, "the server fetches nothing: send the image itself (a data URL, base64, or a file in a multipart form)")
	}
	if base64.StdEncoding.DecodedLen(len(payload)) > maxImageBytes+3 {
		return nil, badField(field, "image over %d bytes", maxImageBytes)
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		if data, err = base64.RawStdEncoding.DecodeString(payload); err != nil {
			return nil, badField(field, "not base64: %v", err)
		}
	}
	return imageUpload(field, data)
}

// imageUpload decodes an uploaded image's bytes.
func imageUpload(field string, data []byte) (*upload, error) {
	if len(data) > maxImageBytes {
		return nil, badField(field, "image over %d bytes", maxImageBytes)
	}
	img, err := imageproc.Decode(data)
	if err != nil {
		return nil, badField(field, "%v", err)
	}
	return &upload{data: data, img: img}, nil
}

// imageField is the request field of a wan.ImageError's input.
var imageField = map[string]string{"image": "input_reference", "last_image": "last_image", "frames": "num_frames"}

// checkImages refuses images the model cannot take, and a missing one it
// needs, naming the field. A TI2V folder (WanPipeline with
// expand_timesteps) runs text to video, or image to video when a request
// gives an image (the model's planning pipeline stays in text mode).
func checkImages(m *model, s spec) error {
	p := m.planPipe
	if m.switchesImage() && s.image != nil {
		if s.lastImage != nil {
			return badField("last_image", "model %s is TI2V: it conditions on its first frame only", m.name)
		}
		return nil
	}
	err := p.CheckImages(wanRequest(s))
	var ie *wan.ImageError
	if errors.As(err, &ie) {
		return badField(imageField[ie.Input], "model %s: %s", m.name, ie.Msg)
	}
	return err
}

// switchesImage says m runs text or image to video by request (TI2V).
func (m *model) switchesImage() bool {
	return m.planPipe.AcceptsImage() && !m.planPipe.RequiresImage()
}

// imageMode says s runs m in a TI2V folder's image mode.
func (m *model) imageMode(s spec) bool { return s.image != nil && m.switchesImage() }

// putInputs stores a job's images and a remix's source video before it
// is submitted.
func (s *Server) putInputs(ctx context.Context, id string, sp spec) error {
	inputs := map[string][]byte{}
	for name, u := range map[string]*upload{inputImage: sp.image, inputLast: sp.lastImage} {
		if u != nil {
			inputs[name] = u.data
		}
	}
	if sp.video != nil {
		inputs[inputVideo] = sp.video.data
	}
	for name, data := range inputs {
		err := s.q.PutInput(ctx, id, name, data)
		if f := s.cfg.faults; f != nil && f.diskFull {
			err = syscall.ENOSPC
		}
		if err != nil {
			return fmt.Errorf("store %s: %w", name, err)
		}
	}
	return nil
}

// loadImages reads a job's stored images back into its spec.
func (s *Server) loadImages(ctx context.Context, id string, sp *spec) error {
	load := func(has bool, name string) (*upload, error) {
		if !has {
			return nil, nil
		}
		data, err := s.q.GetInput(ctx, id, name)
		if err != nil {
			return nil, fmt.Errorf("read the job's %s: %w", name, err)
		}
		img, err := imageproc.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("the job's %s: %w", name, err)
		}
		return &upload{data: data, img: img}, nil
	}
	var err error
	if sp.image, err = load(sp.Image, inputImage); err != nil {
		return err
	}
	sp.lastImage, err = load(sp.LastImage, inputLast)
	return err
}

// warmImages gives a warm-up request the images its model needs: mid
// grey, at the request's size; a model that needs a last frame gets the
// shortest video that has one (5 frames).
func warmImages(m *model, sp *spec) error {
	grey := func() (*upload, error) {
		pix := make([]uint8, 3*sp.Width*sp.Height)
		for i := range pix {
			pix[i] = 128
		}
		img, err := imageproc.NewRGB(sp.Width, sp.Height, pix)
		return &upload{img: img}, err
	}
	var err error
	if m.planPipe.RequiresImage() {
		if sp.image, err = grey(); err != nil {
			return err
		}
	}
	if m.planPipe.NeedsLastImage() {
		sp.Frames = max(sp.Frames, 5)
		sp.lastImage, err = grey()
	}
	return err
}
