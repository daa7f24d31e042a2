package chart

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
)

// canvas rasterises scene primitives onto an RGBA image without
// anti-aliasing: pixel edges are rounded the same way everywhere, so a line
// at y lands on the row that contains y.
type canvas struct {
	img *image.RGBA
}

// writePNG rasterises the scene and encodes it.
func writePNG(w io.Writer, sc *scene) error {
	return png.Encode(w, rasterise(sc))
}

// rasterise paints the scene's items in order.
func rasterise(sc *scene) *image.RGBA {
	c := canvas{img: image.NewRGBA(image.Rect(0, 0, sc.width, sc.height))}
	c.fill(0, 0, sc.width, sc.height, sc.background)
	for _, it := range sc.items {
		switch v := it.(type) {
		case *polyline:
			c.polyline(v)
		case *rect:
			c.rect(v)
		case *text:
			c.text(v)
		}
	}
	return c.img
}

// fill blends col over the pixels [x0,x1) x [y0,y1), clipped to the image.
func (c canvas) fill(x0, y0, x1, y1 int, col color.NRGBA) {
	r := image.Rect(x0, y0, x1, y1).Intersect(c.img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.blend(x, y, col)
		}
	}
}

// blend mixes col over pixel (x, y) by its alpha.
func (c canvas) blend(x, y int, col color.NRGBA) {
	i := c.img.PixOffset(x, y)
	p := c.img.Pix[i : i+4 : i+4]
	a := uint32(col.A)
	mix := func(dst uint8, src uint8) uint8 { return uint8((uint32(src)*a + uint32(dst)*(255-a) + 127) / 255) }
	p[0], p[1], p[2], p[3] = mix(p[0], col.R), mix(p[1], col.G), mix(p[2], col.B), 255
}

// span covers [a, a+w) in whole pixels: edges round to the nearest pixel
// boundary, and anything with positive width gets at least one pixel.
func span(a, w float64) (int, int) {
	lo, hi := int(math.Round(a)), int(math.Round(a+w))
	if w > 0 && hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

func (c canvas) rect(r *rect) {
	x0, x1 := span(r.x, r.w)
	y0, y1 := span(r.y, r.h)
	c.fill(x0, y0, x1, y1, r.fill)
}

// polyline strokes each segment, applying the dash pattern along the path's
// length so dashes run on across corners as in SVG.
func (c canvas) polyline(l *polyline) {
	dist := 0.0
	for i := 1; i < len(l.points); i++ {
		a, b := l.points[i-1], l.points[i]
		n := math.Hypot(b.x-a.x, b.y-a.y)
		if l.dash <= 0 {
			c.segment(a, b, l.width, l.stroke)
		} else {
			c.dashed(a, b, n, dist, l)
		}
		dist += n
	}
}

// dashed strokes the "on" parts of segment a-b, which starts dist along the
// path.
func (c canvas) dashed(a, b point, n, dist float64, l *polyline) {
	if n == 0 {
		return
	}
	period := 2 * l.dash
	for t := 0.0; t < n; {
		phase := math.Mod(dist+t, period)
		next := math.Min(n, t+period-phase)
		if phase < l.dash {
			next = math.Min(n, t+l.dash-phase)
			p0 := point{a.x + (b.x-a.x)*t/n, a.y + (b.y-a.y)*t/n}
			p1 := point{a.x + (b.x-a.x)*next/n, a.y + (b.y-a.y)*next/n}
			c.segment(p0, p1, l.width, l.stroke)
		}
		t = next
	}
}

// segment strokes a straight segment of width w. Axis-aligned segments (all
// of a chart's step lines and levels) are exact rectangles; others are drawn
// by stamping squares along the segment.
func (c canvas) segment(a, b point, w float64, col color.NRGBA) {
	half := w / 2
	switch {
	case a.y == b.y:
		x0, x1 := span(math.Min(a.x, b.x)-half, math.Abs(b.x-a.x)+w)
		y0, y1 := span(a.y-half, w)
		c.fill(x0, y0, x1, y1, col)
	case a.x == b.x:
		x0, x1 := span(a.x-half, w)
		y0, y1 := span(math.Min(a.y, b.y)-half, math.Abs(b.y-a.y)+w)
		c.fill(x0, y0, x1, y1, col)
	default:
		n := int(math.Ceil(2*math.Hypot(b.x-a.x, b.y-a.y))) + 1
		for i := 0; i <= n; i++ {
			t := float64(i) / float64(n)
			x0, x1 := span(a.x+(b.x-a.x)*t-half, w)
			y0, y1 := span(a.y+(b.y-a.y)*t-half, w)
			c.fill(x0, y0, x1, y1, col)
		}
	}
}

// text draws t with the bitmap font, each font pixel a scale x scale block.
func (c canvas) text(t *text) {
	s := t.scale
	x := t.x
	switch t.align {
	case anchorMiddle:
		x -= textWidth(t.s, s) / 2
	case anchorEnd:
		x -= textWidth(t.s, s)
	}
	x0 := int(math.Round(x))
	top := int(math.Round(t.y)) - capHeight*s
	for i, r := range []rune(t.s) {
		g := glyphFor(r)
		gx := x0 + i*glyphCell*s
		for row, bits := range g {
			for col := range glyphCols {
				if bits&(1<<(glyphCols-1-col)) != 0 {
					px, py := gx+col*s, top+row*s
					c.fill(px, py, px+s, py+s, t.fill)
				}
			}
		}
	}
}
