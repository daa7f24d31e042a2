// Package media writes generated frames to disk: a PNG, a folder of PNGs, an
// animated GIF and an MJPEG AVI in pure Go, and an H.264 MP4 through an
// ffmpeg found on PATH.
//
// Frames are float32 RGB in [0, 1] laid out [F, H, W, 3], what diffusers
// returns with output_type="np". They become 8-bit as diffusers' numpy_to_pil
// does: clip to [0, 1], multiply by 255 in float32, round half to even.
// (diffusers' export_to_video truncates instead of rounding, so its MP4s can
// be one level darker before compression.) NaN or infinite values are an
// error, not a black pixel: they mean the pipeline diverged.
//
// Every write is atomic: the output goes to a temporary file (or folder) in
// the destination directory and is renamed into place only once complete; on
// any error the temporary is removed, so a failed or interrupted write never
// leaves a partial file behind. An existing file at the destination is
// replaced; an existing folder is used only if it is empty, never merged into
// or overwritten.
package media

import (
	"fmt"
	"image"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// format is one supported output kind.
type format int

const (
	formatPNG format = iota
	formatFolder
	formatGIF
	formatAVI
	formatMP4
	formatSafetensors
)

// Formats lists the supported destinations, as the CLI shows them.
func Formats() []string {
	return []string{"file.png (one frame)", "folder/ (frame_00000.png, ...)", "file.gif", "file.avi (MJPEG)", "file.mp4 (needs ffmpeg)", "file.safetensors (tensor video, float32 [1,F,H,W,3])"}
}

// supported is the short list used in error messages.
const supported = ".png, .gif, .avi, .mp4, .safetensors, or a folder path ending in /"

// formatOf picks the format from the path: a trailing separator means a
// folder, otherwise the extension (case-insensitive).
func formatOf(path string) (format, error) {
	if path == "" {
		return 0, fmt.Errorf("media: empty output path (supported: %s)", supported)
	}
	if strings.HasSuffix(path, "/") || strings.HasSuffix(path, string(os.PathSeparator)) {
		return formatFolder, nil
	}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		return formatPNG, nil
	case ".gif":
		return formatGIF, nil
	case ".avi":
		return formatAVI, nil
	case ".mp4":
		return formatMP4, nil
	case ".safetensors":
		return formatSafetensors, nil
	case "":
		return 0, fmt.Errorf("media: output %q has no extension (supported: %s)", path, supported)
	default:
		return 0, fmt.Errorf("media: unknown output extension %q (supported: %s)", ext, supported)
	}
}

// CheckPath reports, before any compute runs, whether Write could write a
// video of the given frame count to path: the format is known and fits the
// frame count, the directory exists and is writable, a folder destination is
// absent or empty, and ffmpeg is on PATH for .mp4. It creates and removes a
// probe file to test writability and leaves nothing behind.
func CheckPath(path string, frames int) error {
	if frames < 1 {
		return fmt.Errorf("media: %d frames to write", frames)
	}
	fm, err := formatOf(path)
	if err != nil {
		return err
	}
	if fm == formatPNG && frames > 1 {
		return fmt.Errorf("media: %s is one PNG but the video has %d frames; give a folder path ending in / (or .gif, .avi, .mp4)", path, frames)
	}
	if fm == formatMP4 {
		if _, err := findFFmpeg(); err != nil {
			return err
		}
	}
	if fm == formatFolder {
		if err := checkFolderTarget(filepath.Clean(path)); err != nil {
			return err
		}
	} else if info, err := os.Stat(path); err == nil && info.IsDir() {
		return fmt.Errorf("media: %s is a directory", path)
	}
	return probeDir(filepath.Dir(filepath.Clean(path)))
}

// probeDir checks that dir exists and a file can be created in it.
func probeDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("media: output directory: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("media: output directory %s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".ferry-probe-*")
	if err != nil {
		return fmt.Errorf("media: output directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Write writes F frames of H x W RGB float32 ([F, H, W, 3], values in
// [0, 1]) to path, choosing the format by extension: .png (F must be 1), a
// path ending in / (a folder of frame_%05d.png), .gif, .avi (MJPEG), .mp4
// (ffmpeg) or .safetensors (the exact floats: tensor "video" [1, F, H, W, 3],
// diffusers' output_type="np"). fps is the playback rate of the video formats.
func Write(path string, frames []float32, f, h, w int, fps float64) error {
	fm, err := formatOf(path)
	if err != nil {
		return err
	}
	if fm == formatSafetensors {
		return writeSafetensors(path, frames, f, h, w)
	}
	c, err := newClip(frames, f, h, w, fps)
	if err != nil {
		return err
	}
	switch fm {
	case formatPNG:
		if f > 1 {
			return fmt.Errorf("media: %s is one PNG but the video has %d frames; give a folder path ending in / (or .gif, .avi, .mp4)", path, f)
		}
		return writeAtomic(path, func(out *os.File) error { return writePNG(out, c) })
	case formatFolder:
		return writeDirAtomic(path, func(dir string) error { return writePNGFolder(dir, c) })
	case formatGIF:
		return writeAtomic(path, func(out *os.File) error { return writeGIF(out, c) })
	case formatAVI:
		return writeAtomic(path, func(out *os.File) error { return writeAVI(out, c) })
	default:
		return writeMP4(path, c)
	}
}

// clip is a video to write: frames [F, H, W, 3] float32 and its rate.
type clip struct {
	pix     []float32
	f, h, w int
	fps     float64
}

// maxSide bounds width and height: the JPEG and GIF limit.
const maxSide = 65535

func newClip(pix []float32, f, h, w int, fps float64) (*clip, error) {
	switch {
	case f < 1 || h < 1 || w < 1:
		return nil, fmt.Errorf("media: bad video shape [%d, %d, %d, 3]", f, h, w)
	case h > maxSide || w > maxSide:
		return nil, fmt.Errorf("media: frame %dx%d is larger than %d pixels on a side", w, h, maxSide)
	case len(pix) != f*h*w*3:
		return nil, fmt.Errorf("media: %d values for [%d, %d, %d, 3] frames (want %d)", len(pix), f, h, w, f*h*w*3)
	case !(fps > 0) || math.IsInf(fps, 0):
		return nil, fmt.Errorf("media: frame rate %v is not a positive number", fps)
	}
	return &clip{pix: pix, f: f, h: h, w: w, fps: fps}, nil
}

// newRGBA allocates one frame buffer.
func (c *clip) newRGBA() *image.RGBA { return image.NewRGBA(image.Rect(0, 0, c.w, c.h)) }

// frame converts frame i into dst (opaque RGBA, sized by newRGBA).
func (c *clip) frame(i int, dst *image.RGBA) error {
	n := c.h * c.w * 3
	src := c.pix[i*n : (i+1)*n]
	for p := 0; p < c.h*c.w; p++ {
		for ch := 0; ch < 3; ch++ {
			v, ok := to8bit(src[p*3+ch])
			if !ok {
				return &nonFiniteError{frame: i, x: p % c.w, y: p / c.w}
			}
			dst.Pix[p*4+ch] = v
		}
		dst.Pix[p*4+3] = 255
	}
	return nil
}

// frameRGB converts frame i into dst as packed rgb24 (h*w*3 bytes).
func (c *clip) frameRGB(i int, dst []byte) error {
	n := c.h * c.w * 3
	for j, x := range c.pix[i*n : (i+1)*n] {
		v, ok := to8bit(x)
		if !ok {
			p := j / 3
			return &nonFiniteError{frame: i, x: p % c.w, y: p / c.w}
		}
		dst[j] = v
	}
	return nil
}

// nonFiniteError reports a NaN or infinity in the frames, found while
// converting them (so possibly after earlier frames were encoded).
type nonFiniteError struct{ frame, x, y int }

func (e *nonFiniteError) Error() string {
	return fmt.Sprintf("media: frame %d has a NaN or infinite value at pixel (%d, %d); nothing written", e.frame, e.x, e.y)
}

// to8bit is numpy_to_pil's (clip(x, 0, 1) * 255).round().astype(uint8):
// the product in float32, numpy's round half to even.
func to8bit(x float32) (uint8, bool) {
	if x != x || math.IsInf(float64(x), 0) {
		return 0, false
	}
	x = min(max(x, 0), 1)
	return uint8(math.RoundToEven(float64(float32(x * 255)))), true
}
