package media

import (
	"bufio"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
)

// writePNG writes the single frame of c as an RGB PNG.
func writePNG(w io.Writer, c *clip) error {
	img := c.newRGBA()
	if err := c.frame(0, img); err != nil {
		return err
	}
	return encodePNG(w, &png.Encoder{}, img)
}

// encodePNG encodes through a buffer: png writes many small chunks.
func encodePNG(w io.Writer, enc *png.Encoder, img image.Image) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := enc.Encode(bw, img); err != nil {
		return fmt.Errorf("media: encode png: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("media: write png: %w", err)
	}
	return nil
}

// FrameName is the file name of frame i in a folder of PNGs.
func FrameName(i int) string { return fmt.Sprintf("frame_%05d.png", i) }

// writePNGFolder writes every frame of c as dir/frame_%05d.png. dir is the
// temporary folder of writeDirAtomic, so a failure needs no cleanup here.
func writePNGFolder(dir string, c *clip) error {
	img := c.newRGBA()
	enc := png.Encoder{BufferPool: &pngPool{}} // reuse the encoder's buffers across frames
	for i := 0; i < c.f; i++ {
		if err := c.frame(i, img); err != nil {
			return err
		}
		path := filepath.Join(dir, FrameName(i))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("media: %w", err)
		}
		err = encodePNG(f, &enc, img)
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("media: write %s: %w", path, cerr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pngPool keeps one png.EncoderBuffer (single goroutine use).
type pngPool struct{ b *png.EncoderBuffer }

func (p *pngPool) Get() *png.EncoderBuffer  { return p.b }
func (p *pngPool) Put(b *png.EncoderBuffer) { p.b = b }
