package imageproc

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Load reads a PNG or JPEG as diffusers' load_image does
// (PIL.Image.open(path).convert("RGB")): see FromImage for the conversion.
// PNG samples are exact; JPEG goes through Go's decoder, whose IDCT and
// chroma upsampling can differ from libjpeg's by a level or two.
func Load(path string) (*RGB, error) {
	f, ok := formats[strings.ToLower(filepath.Ext(path))]
	if !ok {
		return nil, fmt.Errorf("%s: cannot read %q images (want .png, .jpg or .jpeg)", path, filepath.Ext(path))
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	img, err := f.read(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// Decode reads a PNG or JPEG held in memory (an upload), told apart by
// its first bytes, as Load reads a file.
func Decode(data []byte) (*RGB, error) {
	name := ""
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		name = ".png"
	case bytes.HasPrefix(data, []byte{0xff, 0xd8, 0xff}):
		name = ".jpg"
	default:
		return nil, fmt.Errorf("not a PNG or JPEG image")
	}
	return formats[name].read(bytes.NewReader(data))
}

// format is one image format's header and image decoders.
type format struct {
	decode func(io.Reader) (image.Image, error)
	header func(io.Reader) (image.Config, error)
}

var formats = map[string]format{
	".png":  {png.Decode, png.DecodeConfig},
	".jpg":  {jpeg.Decode, jpeg.DecodeConfig},
	".jpeg": {jpeg.Decode, jpeg.DecodeConfig},
}

// read decodes one image. The size comes from the header before anything
// is decoded: the decoders allocate the whole image first, so a few bytes
// claiming 60000x60000 pixels ran the process out of memory.
func (f format) read(r io.ReadSeeker) (*RGB, error) {
	cfg, err := f.header(r)
	if err != nil {
		return nil, fmt.Errorf("not a readable image: %w", err)
	}
	if err := checkSize(cfg.Width, cfg.Height); err != nil {
		return nil, err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, err := f.decode(r)
	if err != nil {
		return nil, fmt.Errorf("not a readable image: %w", err)
	}
	return FromImage(img), nil
}

// maxPixels bounds an input image: 67 megapixels (8192x8192), above the
// photos cameras take, whose float copies still fit a small machine.
const maxPixels = 1 << 26

// checkSize refuses an image too large to convert.
func checkSize(w, h int) error {
	if w > maxSide || h > maxSide || int64(w)*int64(h) > maxPixels {
		return fmt.Errorf("%dx%d is too large (at most %d pixels a side and %d in all): resize it first", w, h, maxSide, maxPixels)
	}
	return nil
}
