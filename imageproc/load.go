package imageproc

import (
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
)

// Load reads a PNG or JPEG as diffusers' load_image does
// (PIL.Image.open(path).convert("RGB")): see FromImage for the conversion.
// PNG samples are exact; JPEG goes through Go's decoder, whose IDCT and
// chroma upsampling can differ from libjpeg's by a level or two.
func Load(path string) (*RGB, error) {
	var decode func(*os.File) (image.Image, error)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		decode = func(f *os.File) (image.Image, error) { return png.Decode(f) }
	case ".jpg", ".jpeg":
		decode = func(f *os.File) (image.Image, error) { return jpeg.Decode(f) }
	default:
		return nil, fmt.Errorf("%s: cannot read %q images (want .png, .jpg or .jpeg)", path, ext)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable image: %w", path, err)
	}
	if b := img.Bounds(); b.Dx() > maxSide || b.Dy() > maxSide {
		return nil, fmt.Errorf("%s: %dx%d is too large (each side at most %d)", path, b.Dx(), b.Dy(), maxSide)
	}
	return FromImage(img), nil
}
