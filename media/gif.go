package media

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"io"
	"math"
	"slices"
)

// writeGIF writes c as a looping animated GIF. Each frame gets its own
// 256-colour palette by median cut and is Floyd–Steinberg dithered to it.
// The frame delay is 100/fps centiseconds rounded, at least 2 (browsers
// slow shorter delays down to 10).
func writeGIF(w io.Writer, c *clip) error {
	delay := max(int(math.Round(100/c.fps)), 2)
	anim := gif.GIF{LoopCount: 0} // 0 loops forever
	img := c.newRGBA()
	var q quantizer
	for i := 0; i < c.f; i++ {
		if err := c.frame(i, img); err != nil {
			return err
		}
		anim.Image = append(anim.Image, q.paletted(img))
		anim.Delay = append(anim.Delay, delay)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := gif.EncodeAll(bw, &anim); err != nil {
		return fmt.Errorf("media: encode gif: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("media: write gif: %w", err)
	}
	return nil
}

// Colour quantization. The histogram has 5 bits per channel; the
// nearest-colour cache has 6 bits per channel, so dithering costs O(1) per
// pixel instead of a 256-entry palette scan (image/draw's Floyd–Steinberg
// scans the palette for every pixel: about 0.3 s per 480p frame).
const (
	histBits  = 5
	cacheBits = 6
)

// bin is one occupied histogram cell.
type bin struct {
	key     [3]uint8 // the cell's 5-bit coordinates
	count   uint32
	r, g, b uint64 // sums of the 8-bit values that fell in the cell
}

// quantizer holds the buffers reused from frame to frame.
type quantizer struct {
	hist  []bin
	bins  []bin
	cache []int16
	errs  []float32
}

// paletted quantizes img to a new paletted image: exactly when the frame
// has at most 256 colours, otherwise by median cut and dithering.
func (q *quantizer) paletted(img *image.RGBA) *image.Paletted {
	if dst, ok := exactPaletted(img); ok {
		return dst
	}
	pal := q.medianCut(img)
	dst := image.NewPaletted(img.Rect, pal)
	q.dither(img, dst, pal)
	return dst
}

// exactPaletted indexes a frame of at most 256 distinct colours without
// loss; natural frames exceed that within a few rows and return early.
func exactPaletted(img *image.RGBA) (*image.Paletted, bool) {
	index := make(map[[3]uint8]uint8, 256)
	var pal color.Palette
	w, h := img.Rect.Dx(), img.Rect.Dy()
	idx := make([]uint8, w*h)
	for p := range idx {
		o := (p/w)*img.Stride + (p%w)*4
		c := [3]uint8{img.Pix[o], img.Pix[o+1], img.Pix[o+2]}
		i, ok := index[c]
		if !ok {
			if len(pal) == 256 {
				return nil, false
			}
			i = uint8(len(pal))
			index[c] = i
			pal = append(pal, color.RGBA{c[0], c[1], c[2], 255})
		}
		idx[p] = i
	}
	return &image.Paletted{Pix: idx, Stride: w, Rect: image.Rect(0, 0, w, h), Palette: pal}, true
}

// medianCut builds a palette of at most 256 colours: the occupied histogram
// cells are split recursively at the count median of their widest channel,
// and each box's colour is the mean of the pixels in it.
func (q *quantizer) medianCut(img *image.RGBA) color.Palette {
	const cells = 1 << (3 * histBits)
	if q.hist == nil {
		q.hist = make([]bin, cells)
	}
	clear(q.hist)
	for p := 0; p+3 < len(img.Pix); p += 4 {
		r, g, b := img.Pix[p], img.Pix[p+1], img.Pix[p+2]
		k := int(r>>3)<<10 | int(g>>3)<<5 | int(b>>3)
		h := &q.hist[k]
		h.count++
		h.r += uint64(r)
		h.g += uint64(g)
		h.b += uint64(b)
		h.key = [3]uint8{r >> 3, g >> 3, b >> 3}
	}
	q.bins = q.bins[:0]
	for _, h := range q.hist {
		if h.count > 0 {
			q.bins = append(q.bins, h)
		}
	}
	boxes := splitBoxes(q.bins, 256)
	pal := make(color.Palette, 0, len(boxes))
	for _, b := range boxes {
		pal = append(pal, meanColor(b.bins))
	}
	return pal
}

// box is a set of histogram cells with its widest channel and pixel count,
// computed once when the box is made.
type box struct {
	bins  []bin
	ch    int    // the channel with the widest range
	rng   int    // that range, in histogram cells
	count uint64 // pixels in the box
}

func newBox(bins []bin) box {
	b := box{bins: bins}
	for c := 0; c < 3; c++ {
		lo, hi := 255, 0
		for _, x := range bins {
			lo, hi = min(lo, int(x.key[c])), max(hi, int(x.key[c]))
		}
		if hi-lo > b.rng {
			b.ch, b.rng = c, hi-lo
		}
	}
	for _, x := range bins {
		b.count += uint64(x.count)
	}
	return b
}

// splitBoxes splits bins into at most n boxes by median cut, always
// splitting the box with the widest range (ties: the most pixels).
func splitBoxes(bins []bin, n int) []box {
	boxes := []box{newBox(bins)}
	for len(boxes) < n {
		best := -1
		for i, b := range boxes {
			if len(b.bins) < 2 {
				continue
			}
			if best < 0 || b.rng > boxes[best].rng || (b.rng == boxes[best].rng && b.count > boxes[best].count) {
				best = i
			}
		}
		if best < 0 {
			break // every box is a single cell
		}
		lo, hi := splitAtMedian(boxes[best])
		boxes[best] = newBox(lo)
		boxes = append(boxes, newBox(hi))
	}
	return boxes
}

// splitAtMedian sorts the box along its widest channel and cuts it where
// half the pixels lie on each side, keeping both halves non-empty.
func splitAtMedian(b box) ([]bin, []bin) {
	bins, ch := b.bins, b.ch
	slices.SortFunc(bins, func(x, y bin) int { return int(x.key[ch]) - int(y.key[ch]) })
	var acc uint64
	cut := len(bins) - 1
	for i := 0; i < len(bins)-1; i++ {
		acc += uint64(bins[i].count)
		if acc*2 >= b.count {
			cut = i + 1
			break
		}
	}
	return bins[:cut], bins[cut:]
}

func meanColor(box []bin) color.RGBA {
	var n, r, g, b uint64
	for _, x := range box {
		n += uint64(x.count)
		r += x.r
		g += x.g
		b += x.b
	}
	return color.RGBA{uint8((r + n/2) / n), uint8((g + n/2) / n), uint8((b + n/2) / n), 255}
}

// dither maps img onto pal with Floyd–Steinberg error diffusion (7/16 right,
// 3/16 down-left, 5/16 down, 1/16 down-right).
func (q *quantizer) dither(img *image.RGBA, dst *image.Paletted, pal color.Palette) {
	const cells = 1 << (3 * cacheBits)
	if q.cache == nil {
		q.cache = make([]int16, cells)
	}
	for i := range q.cache {
		q.cache[i] = -1
	}
	w, h := img.Rect.Dx(), img.Rect.Dy()
	if need := 2 * (w + 2) * 3; len(q.errs) < need {
		q.errs = make([]float32, need)
	}
	cur, next := q.errs[:(w+2)*3], q.errs[(w+2)*3:2*(w+2)*3]
	clear(cur)
	rgb := paletteRGB(pal)
	for y := 0; y < h; y++ {
		clear(next)
		for x := 0; x < w; x++ {
			var c [3]float32
			for ch := 0; ch < 3; ch++ {
				v := float32(img.Pix[y*img.Stride+x*4+ch]) + cur[(x+1)*3+ch]
				c[ch] = min(max(v, 0), 255)
			}
			idx := q.nearest(c, rgb)
			dst.Pix[y*dst.Stride+x] = uint8(idx)
			for ch := 0; ch < 3; ch++ {
				e := c[ch] - float32(rgb[idx][ch])
				cur[(x+2)*3+ch] += e * 7 / 16
				next[x*3+ch] += e * 3 / 16
				next[(x+1)*3+ch] += e * 5 / 16
				next[(x+2)*3+ch] += e * 1 / 16
			}
		}
		cur, next = next, cur
	}
}

func paletteRGB(pal color.Palette) [][3]uint8 {
	out := make([][3]uint8, len(pal))
	for i, c := range pal {
		r, g, b, _ := c.RGBA()
		out[i] = [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
	}
	return out
}

// nearest returns the palette index closest to the centre of c's cache
// cell, computing it once per cell and frame.
func (q *quantizer) nearest(c [3]float32, pal [][3]uint8) int {
	const shift = 8 - cacheBits
	var k int
	var centre [3]int
	for ch := 0; ch < 3; ch++ {
		v := int(c[ch]) >> shift
		k = k<<cacheBits | v
		centre[ch] = v<<shift | 1<<(shift-1)
	}
	if i := q.cache[k]; i >= 0 {
		return int(i)
	}
	best, bestD := 0, math.MaxInt
	for i, p := range pal {
		dr, dg, db := centre[0]-int(p[0]), centre[1]-int(p[1]), centre[2]-int(p[2])
		if d := dr*dr + dg*dg + db*db; d < bestD {
			best, bestD = i, d
		}
	}
	q.cache[k] = int16(best)
	return best
}
