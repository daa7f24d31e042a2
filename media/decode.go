package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
)

// Decoding: the inverse of Write for the training data set. PNG, JPEG and
// GIF go through the standard library, MJPEG AVI (what writeAVI makes, and
// what cameras and ffmpeg's -c:v mjpeg make) through a small RIFF reader
// and image/jpeg; every other container (.mp4, .mov, .mkv, .webm, and AVIs
// of other codecs) through an ffmpeg found on PATH.

// Clip is decoded video: Frames holds 8-bit RGB frames, each Width·Height·3
// bytes in row-major order (rgb24).
type Clip struct {
	Width, Height int
	Frames        [][]byte
}

// decoder kinds, by extension.
const (
	kindImage  = "image"
	kindGIF    = "gif"
	kindAVI    = "avi"
	kindFFmpeg = "ffmpeg"
)

var decoders = map[string]string{
	".png": kindImage, ".jpg": kindImage, ".jpeg": kindImage,
	".gif": kindGIF, ".avi": kindAVI,
	".mp4": kindFFmpeg, ".mov": kindFFmpeg, ".mkv": kindFFmpeg, ".webm": kindFFmpeg,
}

// DecodeExtensions lists the extensions Decode reads, lower case with the dot.
func DecodeExtensions() []string {
	return []string{".mp4", ".avi", ".gif", ".png", ".jpg", ".jpeg", ".mov", ".mkv", ".webm"}
}

// CanDecode says whether Decode reads files with path's extension.
func CanDecode(path string) bool {
	_, ok := decoders[strings.ToLower(filepath.Ext(path))]
	return ok
}

// decoderFor chooses the decoder of path's extension.
func decoderFor(path string) (string, error) {
	kind, ok := decoders[strings.ToLower(filepath.Ext(path))]
	if !ok {
		return "", fmt.Errorf("%s: cannot read %q files (readable: %s)", path, filepath.Ext(path), strings.Join(DecodeExtensions(), ", "))
	}
	return kind, nil
}

// Decode reads the first maxFrames frames (all when maxFrames <= 0) of an
// image or video, choosing the decoder by extension. Errors name the file.
func Decode(path string, maxFrames int) (*Clip, error) {
	kind, err := decoderFor(path)
	if err != nil {
		return nil, err
	}
	var c *Clip
	switch kind {
	case kindImage:
		c, err = decodeImageFile(path)
	case kindGIF:
		c, err = readGIFFile(path, maxFrames)
	case kindAVI:
		c, err = decodeAVIFile(path, maxFrames)
	default:
		c, err = decodeFFmpegFile(path, maxFrames)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.Frames) == 0 {
		return nil, fmt.Errorf("%s: no frames", path)
	}
	return c, nil
}

// DecodeData is Decode for a video held in memory, such as one Write made
// and a server stored: an MJPEG AVI is read in place; any other container
// goes through a temporary file that ffmpeg reads.
func DecodeData(data []byte, maxFrames int) (*Clip, error) {
	if len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "AVI " {
		c, err := readAVI(bytes.NewReader(data), int64(len(data)), maxFrames)
		if err == nil && len(c.Frames) == 0 {
			err = errors.New("no frames")
		}
		if !errors.Is(err, errAVICodec) {
			return c, err
		}
	}
	f, err := os.CreateTemp("", "ferry-decode-*.mp4")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return Decode(f.Name(), maxFrames)
}

// Probe reads a file's frame size, decoding as little as it can: the
// header of an image or AVI; a whole GIF (small, and a broken one fails
// only in its frames); the first frame through ffmpeg.
func Probe(path string) (w, h int, err error) {
	kind, err := decoderFor(path)
	if err != nil {
		return 0, 0, err
	}
	switch kind {
	case kindImage:
		w, h, err = probeImage(path)
	case kindGIF:
		w, h, err = probeGIF(path)
	case kindAVI:
		w, h, err = probeAVI(path)
	default:
		var c *Clip
		if c, err = decodeFFmpegFile(path, 1); err == nil {
			if len(c.Frames) == 0 {
				err = errors.New("no frames")
			}
			w, h = c.Width, c.Height
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return w, h, nil
}

// probeImage reads an image's header.
func probeImage(path string) (int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var cfg image.Config
	if strings.ToLower(filepath.Ext(path)) == ".png" {
		cfg, err = png.DecodeConfig(f)
	} else {
		cfg, err = jpeg.DecodeConfig(f)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("not a readable image: %w", err)
	}
	return cfg.Width, cfg.Height, nil
}

// probeGIF decodes a GIF's frames (not composed) for its screen size.
func probeGIF(path string) (int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	g, err := gif.DecodeAll(f)
	if err != nil {
		return 0, 0, fmt.Errorf("not a readable GIF: %w", err)
	}
	return g.Config.Width, g.Config.Height, nil
}

// decodeImageFile reads a PNG or JPEG as a one-frame clip.
func decodeImageFile(path string) (*Clip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var img image.Image
	if strings.ToLower(filepath.Ext(path)) == ".png" {
		img, err = png.Decode(f)
	} else {
		img, err = jpeg.Decode(f)
	}
	if err != nil {
		return nil, fmt.Errorf("not a readable image: %w", err)
	}
	b := img.Bounds()
	return &Clip{Width: b.Dx(), Height: b.Dy(), Frames: [][]byte{toRGB(img)}}, nil
}

// toRGB converts any image to packed rgb24. Transparent pixels come out
// composited over black (image/draw's premultiplied Src copy).
func toRGB(img image.Image) []byte {
	b := img.Bounds()
	rgba, ok := img.(*image.RGBA)
	if !ok || rgba.Rect.Min != (image.Point{}) || rgba.Stride != 4*b.Dx() {
		rgba = image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(rgba, rgba.Rect, img, b.Min, draw.Src)
	}
	return rgbaToRGB(rgba)
}

// rgbaToRGB drops the alpha of a tightly packed RGBA image.
func rgbaToRGB(img *image.RGBA) []byte {
	n := img.Rect.Dx() * img.Rect.Dy()
	out := make([]byte, 3*n)
	for i := range n {
		copy(out[3*i:3*i+3], img.Pix[4*i:4*i+3])
	}
	return out
}

// readGIFFile composes a GIF's frames onto its logical screen, honouring
// each frame's disposal, as a browser shows them.
func readGIFFile(path string, maxFrames int) (*Clip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g, err := gif.DecodeAll(f)
	if err != nil {
		return nil, fmt.Errorf("not a readable GIF: %w", err)
	}
	w, h := g.Config.Width, g.Config.Height
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("not a readable GIF: screen %dx%d", w, h)
	}
	canvas := image.NewRGBA(image.Rect(0, 0, w, h))
	c := &Clip{Width: w, Height: h}
	for i, fr := range g.Image {
		if maxFrames > 0 && i == maxFrames {
			break
		}
		disposal := byte(0)
		if i < len(g.Disposal) {
			disposal = g.Disposal[i]
		}
		var saved []byte
		if disposal == gif.DisposalPrevious {
			saved = append([]byte(nil), canvas.Pix...)
		}
		draw.Draw(canvas, fr.Bounds(), fr, fr.Bounds().Min, draw.Over)
		c.Frames = append(c.Frames, rgbaToRGB(canvas))
		switch disposal {
		case gif.DisposalBackground:
			draw.Draw(canvas, fr.Bounds(), image.Transparent, image.Point{}, draw.Src)
		case gif.DisposalPrevious:
			copy(canvas.Pix, saved)
		}
	}
	return c, nil
}
