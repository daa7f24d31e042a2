package server

import (
	"bytes"
	"fmt"
	"image/jpeg"
	"math"

	"ferry/imageproc"
	"ferry/media"
)

// Thumbnails: OpenAI's content variants beside the video, made on request
// from the stored video (nothing more is stored): "thumbnail" its first
// frame, "spritesheet" up to spriteFrames frames spread over it in a grid,
// each at most spriteCell pixels wide. Both are JPEG, at the quality of
// the MJPEG frames the server writes.

// derived are the content variants made from the video, by media type.
var derived = map[string]string{"thumbnail": "image/jpeg", "spritesheet": "image/jpeg"}

const (
	spriteFrames = 16
	spriteCell   = 256
)

// deriveContent renders a derived variant from a stored video's bytes.
func deriveContent(variant string, video []byte) ([]byte, error) {
	frames := 1
	if variant == "spritesheet" {
		frames = 0 // all: the sheet spreads its frames over them
	}
	c, err := decodeClip(video, frames)
	if err != nil {
		return nil, fmt.Errorf("the stored video: %w", err)
	}
	img := c.frames[0]
	if variant == "spritesheet" {
		if img, err = spritesheet(c.frames); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img.RGBA(), &jpeg.Options{Quality: media.JPEGQuality}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// spritesheet lays up to spriteFrames frames, evenly spaced from the first
// to the last, left to right and top to bottom in a near-square grid.
func spritesheet(frames []*imageproc.RGB) (*imageproc.RGB, error) {
	n := min(len(frames), spriteFrames)
	cols := int(math.Ceil(math.Sqrt(float64(n))))
	rows := (n + cols - 1) / cols
	w, h := frames[0].Width, frames[0].Height
	if w > spriteCell {
		w, h = spriteCell, max(1, h*spriteCell/w)
	}
	sheet := &imageproc.RGB{Width: cols * w, Height: rows * h, Pix: make([]uint8, 3*cols*w*rows*h)}
	for i := range n {
		f := frames[0]
		if n > 1 {
			f = frames[i*(len(frames)-1)/(n-1)]
		}
		if f.Width != w || f.Height != h {
			var err error
			if f, err = imageproc.ResizeLanczos(f, w, h); err != nil {
				return nil, err
			}
		}
		x0, y0 := i%cols*w, i/cols*h
		for y := range h {
			copy(sheet.Pix[3*((y0+y)*sheet.Width+x0):][:3*w], f.Pix[3*y*w:][:3*w])
		}
	}
	return sheet, nil
}
