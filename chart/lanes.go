package chart

import (
	"fmt"
	"image/color"
	"math"
	"sort"
)

// laneShades are the two fills that alternate along a lane so adjacent
// blocks stay distinguishable.
func laneShades(c color.NRGBA) [2]color.NRGBA {
	light := color.NRGBA{R: c.R + (255-c.R)/3, G: c.G + (255-c.G)/3, B: c.B + (255-c.B)/3, A: 255}
	return [2]color.NRGBA{c, light}
}

// thinSpan is the width in pixels below which spans are drawn as density.
const thinSpan = 2

// densityLevels quantises a pixel column's busy fraction.
const densityLevels = 8

// drawLane draws lane i: its label, background and spans. Spans at least
// thinSpan pixels wide are drawn one by one; thinner ones (thousands of
// blocks on a long run) are summed per pixel column and drawn with an
// opacity that is the column's busy fraction, so idle time stays visible.
// A lane with MinWidth draws every span at that width instead: a stall must
// show however short.
func drawLane(sc *scene, f frame, i int, l Lane, c color.NRGBA) {
	y := f.lanesTop + float64(i*(laneHeight+laneGap))
	sc.text(text{class: "lane-label", x: f.left - 8, y: y + 15, s: fitText(l.Name, textScale, marginLeft-12),
		scale: textScale, fill: colorInk, align: anchorEnd})
	sc.rect(rect{class: "lane", x: f.left, y: y, w: f.right - f.left, h: laneHeight, fill: colorLaneBack})
	spans := append([]Span(nil), l.Spans...)
	sort.SliceStable(spans, func(a, b int) bool { return spans[a].Start < spans[b].Start })
	class := "span lane-" + slug(l.Name)
	var thin []Span
	var wide []rect
	for _, s := range spans {
		x0, x1 := f.xpos(s.Start), f.xpos(s.End)
		w := math.Max(x1-x0, l.MinWidth)
		if w < thinSpan && l.MinWidth == 0 {
			thin = append(thin, s)
			continue
		}
		r := rect{class: class, x: x0, y: y, w: w, h: laneHeight, title: fmt.Sprintf("%s: %.3f s at %.3f s", s.Name, s.End-s.Start, s.Start)}
		if n := len(wide); n > 0 && w < thinSpan && x0 <= wide[n-1].x+wide[n-1].w {
			wide[n-1].w = math.Max(wide[n-1].w, x0+w-wide[n-1].x) // short stalls in one pixel: one mark
			wide[n-1].title = "several spans"
			continue
		}
		wide = append(wide, r)
	}
	drawDensity(sc, f, y, thin, c, class)
	shades := laneShades(c)
	for k, r := range wide {
		touching := k > 0 && r.x-(wide[k-1].x+wide[k-1].w) < 1
		if touching && wide[k-1].fill == shades[0] {
			r.fill = shades[1] // alternate along touching spans so blocks stay distinct
		} else {
			r.fill = shades[0]
		}
		wide[k] = r
		sc.rect(r)
	}
}

// drawDensity draws thin spans as runs of pixel columns shaded by how busy
// each column is (at least one level, so any activity shows).
func drawDensity(sc *scene, f frame, y float64, spans []Span, c color.NRGBA, class string) {
	if len(spans) == 0 {
		return
	}
	cover := make([]float64, int(math.Ceil(f.right-f.left)))
	for _, s := range spans {
		x0, x1 := f.xpos(s.Start)-f.left, f.xpos(s.End)-f.left
		for col := int(x0); col < len(cover) && float64(col) < x1; col++ {
			cover[col] += math.Min(x1, float64(col+1)) - math.Max(x0, float64(col))
		}
	}
	level := func(v float64) int {
		return int(math.Ceil(math.Min(v, 1)*densityLevels - 1e-6))
	}
	for start := 0; start < len(cover); {
		q := level(cover[start])
		end := start + 1
		for end < len(cover) && level(cover[end]) == q {
			end++
		}
		if q > 0 {
			sc.rect(rect{class: class + " density", x: f.left + float64(start), y: y, w: float64(end - start), h: laneHeight,
				fill: withAlpha(c, uint8(255*q/densityLevels)), title: fmt.Sprintf("busy %d%%", 100*q/densityLevels)})
		}
		start = end
	}
}
