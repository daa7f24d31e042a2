// Package imageproc prepares images the way the reference Python stack
// does: Pillow's resampling (Image.resize with BICUBIC, LANCZOS and the
// other convolution filters, bit for bit on 8-bit RGB), transformers'
// center crop, and CLIPImageProcessor's resize, crop, rescale and
// normalisation. Wan's image-to-video pipelines need both: the CLIP image
// encoder sees CLIPImageProcessor's output, and the VAE path resizes the
// image with Lanczos when it is not already the video size.
package imageproc

import (
	"fmt"
	"image"
	"image/color"
)

// RGB is an 8-bit RGB image: Pix holds Width·Height·3 bytes, row-major,
// the layout of media.Clip frames and of a Pillow "RGB" image as NumPy
// sees it.
type RGB struct {
	Width, Height int
	Pix           []uint8
}

// NewRGB wraps packed rgb24 pixels after checking their count.
func NewRGB(width, height int, pix []uint8) (*RGB, error) {
	if width <= 0 || height <= 0 {
		return nil, fmt.Errorf("imageproc: image size %dx%d must be positive", width, height)
	}
	if len(pix) != width*height*3 {
		return nil, fmt.Errorf("imageproc: %d bytes for a %dx%d RGB image, want %d", len(pix), width, height, width*height*3)
	}
	return &RGB{Width: width, Height: height, Pix: pix}, nil
}

// String describes the image's size, for messages.
func (m *RGB) String() string { return fmt.Sprintf("%dx%d RGB", m.Width, m.Height) }

// at returns the offset of pixel (x, y).
func (m *RGB) at(x, y int) int { return 3 * (y*m.Width + x) }

// RGBA is m as an opaque image.RGBA, for the standard encoders.
func (m *RGB) RGBA() *image.RGBA {
	out := image.NewRGBA(image.Rect(0, 0, m.Width, m.Height))
	for i := range m.Width * m.Height {
		copy(out.Pix[4*i:4*i+3], m.Pix[3*i:3*i+3])
		out.Pix[4*i+3] = 255
	}
	return out
}

// FromImage converts any image to RGB as Pillow's convert("RGB") does:
// alpha is dropped, not composited (a transparent pixel keeps its colour),
// grey is replicated, palettes are looked up, and 16-bit samples keep
// their high byte (Pillow reads 16-bit RGB PNGs that way).
func FromImage(img image.Image) *RGB {
	b := img.Bounds()
	out := &RGB{Width: b.Dx(), Height: b.Dy(), Pix: make([]uint8, 3*b.Dx()*b.Dy())}
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl := straightRGB(img, x, y)
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = r, g, bl
			i += 3
		}
	}
	return out
}

// straightRGB is pixel (x, y) without premultiplication.
func straightRGB(img image.Image, x, y int) (r, g, b uint8) {
	switch m := img.(type) {
	case *image.NRGBA:
		p := m.Pix[m.PixOffset(x, y):]
		return p[0], p[1], p[2]
	case *image.RGBA:
		p := m.Pix[m.PixOffset(x, y):]
		if p[3] == 0xff {
			return p[0], p[1], p[2]
		}
	}
	c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
	return c.R, c.G, c.B
}
