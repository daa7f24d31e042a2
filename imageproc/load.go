package imageproc

import (
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
	var decode func(io.Reader) (image.Image, error)
	var header func(io.Reader) (image.Config, error)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		decode, header = png.Decode, png.DecodeConfig
	case ".jpg", ".jpeg":
		decode, header = jpeg.Decode, jpeg.DecodeConfig
	default:
		return nil, fmt.Errorf("%s: cannot read %q images (want .png, .jpg or .jpeg)", path, ext)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The size comes from the header before anything is decoded: the
	// decoders allocate the whole image first, so a few bytes claiming
	// 60000x60000 pixels ran the process out of memory.
	cfg, err := header(f)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable image: %w", path, err)
	}
	if err := checkSize(cfg.Width, cfg.Height); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, err := decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable image: %w", path, err)
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
