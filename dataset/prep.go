package dataset

import (
	"fmt"
	"math"

	"ferry/media"
)

// FrameCount is how many of a clip's frames a sample keeps: the largest
// 4k+1 not above the wanted count nor the clip's (the VAE encodes a first
// frame, then chunks of 4). 0 when the clip has no frame.
func FrameCount(want, have int) int {
	n := min(want, have)
	if n < 1 {
		return 0
	}
	return (n-1)/4*4 + 1
}

// CheckSize says whether a w×h clip can fill a width×height sample
// without upscaling (scaled to cover, then center-cropped).
func CheckSize(w, h, width, height int) error {
	if w < width || h < height {
		return fmt.Errorf("is %dx%d, smaller than the target %dx%d (ferry does not upscale): use a smaller --width/--height or a larger clip", w, h, width, height)
	}
	return nil
}

// Pixels turns the first frames of c into the VAE's input [3, F, H, W]
// (F = frames, H = height, W = width), float32 in [-1, 1]: each frame is
// scaled down to cover width×height keeping its aspect, with an area
// filter (each output pixel the mean of the source area it covers, as
// OpenCV's INTER_AREA), center-cropped, and v/127.5 − 1 maps 0..255 to
// [-1, 1]. The clip must cover the size (CheckSize) and hold frames.
func Pixels(c *media.Clip, frames, width, height int) ([]float32, error) {
	if frames < 1 || frames > len(c.Frames) {
		return nil, fmt.Errorf("%d frames asked of a clip of %d", frames, len(c.Frames))
	}
	if err := CheckSize(c.Width, c.Height, width, height); err != nil {
		return nil, err
	}
	rw, rh := coverSize(c.Width, c.Height, width, height)
	xs := areaWeights(c.Width, rw, (rw-width)/2, width)
	ys := areaWeights(c.Height, rh, (rh-height)/2, height)
	out := make([]float32, 3*frames*height*width)
	plane := frames * height * width
	rows := make([]float64, c.Height*width*3) // one frame scaled horizontally
	for f := range frames {
		src := c.Frames[f]
		if len(src) != 3*c.Width*c.Height {
			return nil, fmt.Errorf("frame %d has %d bytes for %dx%d RGB", f, len(src), c.Width, c.Height)
		}
		for y := range c.Height {
			row := src[y*c.Width*3:]
			for x, wt := range xs {
				var acc [3]float64
				for k, a := range wt.w {
					p := row[(wt.start+k)*3:]
					acc[0] += a * float64(p[0])
					acc[1] += a * float64(p[1])
					acc[2] += a * float64(p[2])
				}
				copy(rows[(y*width+x)*3:], acc[:])
			}
		}
		for y, wt := range ys {
			for x := range width {
				for ch := range 3 {
					var acc float64
					for k, a := range wt.w {
						acc += a * rows[((wt.start+k)*width+x)*3+ch]
					}
					out[ch*plane+(f*height+y)*width+x] = float32(acc/127.5 - 1)
				}
			}
		}
	}
	return out, nil
}

// coverSize is the size w×h scales to so that it covers width×height
// keeping its aspect: one side exact, the other at least the target.
func coverSize(w, h, width, height int) (int, int) {
	if float64(width)/float64(w) >= float64(height)/float64(h) {
		return width, max(height, int(math.Round(float64(h)*float64(width)/float64(w))))
	}
	return max(width, int(math.Round(float64(w)*float64(height)/float64(h)))), height
}

// span is one output pixel's source pixels from start and their weights.
type span struct {
	start int
	w     []float64
}

// areaWeights maps n source pixels onto m output pixels (m <= n) and
// returns the spans of outputs off..off+count-1: output i averages the
// source interval [i·n/m, (i+1)·n/m), partial pixels weighted by overlap.
func areaWeights(n, m, off, count int) []span {
	scale := float64(n) / float64(m)
	out := make([]span, count)
	for i := range count {
		lo, hi := float64(off+i)*scale, float64(off+i+1)*scale
		first, last := int(math.Floor(lo)), min(int(math.Ceil(hi)), n)
		s := span{start: first}
		for j := first; j < last; j++ {
			a := (min(hi, float64(j+1)) - max(lo, float64(j))) / scale
			s.w = append(s.w, a)
		}
		out[i] = s
	}
	return out
}
