package imageproc

import (
	"fmt"
	"math"
)

// Filter is a Pillow resampling filter, numbered as PIL.Image.Resampling
// (and as "resample" in a preprocessor_config.json).
type Filter int

// The convolution filters of Pillow's ImagingResample. NEAREST (0) is a
// different algorithm in Pillow and is not offered.
const (
	Lanczos  Filter = 1
	Bilinear Filter = 2
	Bicubic  Filter = 3
	Box      Filter = 4
	Hamming  Filter = 5
)

func (f Filter) String() string {
	switch f {
	case Lanczos:
		return "lanczos"
	case Bilinear:
		return "bilinear"
	case Bicubic:
		return "bicubic"
	case Box:
		return "box"
	case Hamming:
		return "hamming"
	}
	return fmt.Sprintf("filter(%d)", int(f))
}

// kernel is a filter's function and its support at scale 1.
type kernel struct {
	fn      func(x float64) float64
	support float64
}

func kernelOf(f Filter) (kernel, error) {
	switch f {
	case Lanczos:
		return kernel{lanczos, 3}, nil
	case Bilinear:
		return kernel{triangle, 1}, nil
	case Bicubic:
		return kernel{cubic, 2}, nil
	case Box:
		return kernel{box, 0.5}, nil
	case Hamming:
		return kernel{hamming, 1}, nil
	}
	return kernel{}, fmt.Errorf("imageproc: resample filter %d is not supported (want 1 lanczos, 2 bilinear, 3 bicubic, 4 box or 5 hamming)", int(f))
}

// The filter functions follow Resample.c expression by expression. The
// explicit float64 conversions round every product, as C does on x86-64,
// so that no platform fuses them into an FMA and moves a weight by an ulp.

func box(x float64) float64 {
	if x > -0.5 && x <= 0.5 {
		return 1
	}
	return 0
}

func triangle(x float64) float64 {
	x = math.Abs(x)
	if x < 1 {
		return 1 - x
	}
	return 0
}

func hamming(x float64) float64 {
	x = math.Abs(x)
	switch {
	case x == 0:
		return 1
	case x >= 1:
		return 0
	}
	x = float64(x * math.Pi)
	// Resample.c writes the constants as C floats (0.54f, 0.46f).
	return float64(math.Sin(x)/x) * (float64(float32(0.54)) + float64(float64(float32(0.46))*math.Cos(x)))
}

// cubic is Keys' cubic convolution with a = -0.5, Pillow's BICUBIC.
func cubic(x float64) float64 {
	const a = -0.5
	x = math.Abs(x)
	if x < 1 {
		return float64(float64(float64(float64((a+2)*x)-(a+3))*x)*x) + 1
	}
	if x < 2 {
		return float64(float64(float64(float64(float64(x-5)*x)+8)*x)-4) * a
	}
	return 0
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x = float64(x * math.Pi)
	return math.Sin(x) / x
}

func lanczos(x float64) float64 {
	if -3 <= x && x < 3 {
		return float64(sinc(x) * sinc(x/3))
	}
	return 0
}

// precisionBits is the fixed-point precision of Pillow's 8-bit passes:
// 32 bits less 8 for the sample and 2 for filters whose weights sum past 1
// or go negative.
const precisionBits = 32 - 8 - 2

// maxSide bounds either side of a resize, a guard against sizes that
// would exhaust memory long before they were useful.
const maxSide = 1 << 16

// taps are the fixed-point weights of one resampling pass: output sample i
// reads n[i] inputs from first[i] with weights w[i·size : i·size+n[i]].
type taps struct {
	size     int
	first, n []int
	w        []int32
}

// computeTaps is precompute_coeffs followed by normalize_coeffs_8bpc for a
// pass from in to out samples over the whole input.
func computeTaps(in, out int, k kernel) taps {
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1)
	support := k.support * filterscale
	size := int(math.Ceil(support))*2 + 1
	t := taps{size: size, first: make([]int, out), n: make([]int, out), w: make([]int32, out*size)}
	weights := make([]float64, size)
	for o := range out {
		center := float64(float64(o)+0.5) * scale
		ss := 1 / filterscale
		lo := max(int(center-support+0.5), 0) // C's (int) truncates toward zero, as Go's does
		hi := min(int(center+support+0.5), in)
		n := hi - lo
		sum := 0.0
		for j := range n {
			w := k.fn(float64(float64(j+lo)-center+0.5) * ss)
			weights[j] = w
			sum += w
		}
		for j := range n {
			if sum != 0 {
				weights[j] /= sum
			}
			t.w[o*size+j] = fixed(weights[j])
		}
		t.first[o], t.n[o] = lo, n
	}
	return t
}

// fixed rounds a weight to precisionBits fractional bits, half away from
// zero.
func fixed(w float64) int32 {
	if w < 0 {
		return int32(-0.5 + w*(1<<precisionBits))
	}
	return int32(0.5 + w*(1<<precisionBits))
}

// clip8 takes a fixed-point sum (which already holds the rounding half) to
// a sample.
func clip8(s int32) uint8 {
	v := s >> precisionBits
	switch {
	case v < 0:
		return 0
	case v > 255:
		return 255
	}
	return uint8(v)
}

// Resize is Pillow's Image.resize((width, height), filter) on an RGB image
// with the default box and reducing_gap=None: when the size changes, a
// horizontal pass then a vertical one, each with 8-bit fixed-point weights
// and the result clipped to 0..255 after each pass. Downscaling widens the
// filter by the scale factor (antialiasing). The same size returns a copy.
func Resize(src *RGB, width, height int, f Filter) (*RGB, error) {
	k, err := kernelOf(f)
	if err != nil {
		return nil, err
	}
	if err := checkSizes(src, width, height); err != nil {
		return nil, err
	}
	vert := computeTaps(src.Height, height, k)
	// Only rows some output row reads go through the horizontal pass.
	first := vert.first[0]
	last := vert.first[height-1] + vert.n[height-1]
	img := src
	if width != src.Width {
		img = horizontal(src, width, first, last-first, computeTaps(src.Width, width, k))
		for i := range vert.first {
			vert.first[i] -= first
		}
	}
	if height != src.Height {
		return vertical(img, height, vert), nil
	}
	if img == src {
		return &RGB{Width: src.Width, Height: src.Height, Pix: append([]uint8(nil), src.Pix...)}, nil
	}
	return img, nil
}

// ResizeLanczos is Resize with Pillow's LANCZOS (a = 3), the filter
// diffusers' VaeImageProcessor resizes PIL images with.
func ResizeLanczos(src *RGB, width, height int) (*RGB, error) {
	return Resize(src, width, height, Lanczos)
}

func checkSizes(src *RGB, width, height int) error {
	if src == nil || src.Width <= 0 || src.Height <= 0 || len(src.Pix) != 3*src.Width*src.Height {
		return fmt.Errorf("imageproc: source image is empty or its pixels do not match its size")
	}
	if width <= 0 || height <= 0 || width > maxSide || height > maxSide {
		return fmt.Errorf("imageproc: target size %dx%d: each side must be 1 to %d", width, height, maxSide)
	}
	if src.Width > maxSide || src.Height > maxSide {
		return fmt.Errorf("imageproc: source size %dx%d: each side must be at most %d", src.Width, src.Height, maxSide)
	}
	return nil
}

// horizontal resamples rows [row0, row0+rows) of src to width samples.
func horizontal(src *RGB, width, row0, rows int, t taps) *RGB {
	out := &RGB{Width: width, Height: rows, Pix: make([]uint8, 3*width*rows)}
	for y := range rows {
		in := src.Pix[src.at(0, y+row0):]
		for x := range width {
			w := t.w[x*t.size : x*t.size+t.n[x]]
			s0, s1, s2 := int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1))
			p := in[3*t.first[x]:]
			for j, wj := range w {
				s0 += int32(p[3*j]) * wj
				s1 += int32(p[3*j+1]) * wj
				s2 += int32(p[3*j+2]) * wj
			}
			o := out.at(x, y)
			out.Pix[o], out.Pix[o+1], out.Pix[o+2] = clip8(s0), clip8(s1), clip8(s2)
		}
	}
	return out
}

// vertical resamples the columns of src to height samples.
func vertical(src *RGB, height int, t taps) *RGB {
	out := &RGB{Width: src.Width, Height: height, Pix: make([]uint8, 3*src.Width*height)}
	stride := 3 * src.Width
	for y := range height {
		w := t.w[y*t.size : y*t.size+t.n[y]]
		base := t.first[y] * stride
		for x := range src.Width {
			s0, s1, s2 := int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1))
			for j, wj := range w {
				p := src.Pix[base+j*stride+3*x:]
				s0 += int32(p[0]) * wj
				s1 += int32(p[1]) * wj
				s2 += int32(p[2]) * wj
			}
			o := out.at(x, y)
			out.Pix[o], out.Pix[o+1], out.Pix[o+2] = clip8(s0), clip8(s1), clip8(s2)
		}
	}
	return out
}
