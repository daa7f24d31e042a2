package chart

import (
	"image/color"
	"math"
	"sort"
)

// drawSeries draws a counter as a step line up to the end of the axis.
func drawSeries(sc *scene, f frame, s Series, c color.NRGBA) {
	pts := append([]Point(nil), s.Points...)
	if len(pts) == 0 {
		return
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].T < pts[j].T })
	var path []point
	for i, p := range pts {
		x, y := f.xpos(p.T), f.ypos(p.Bytes)
		if i > 0 {
			path = append(path, point{x, path[len(path)-1].y})
		}
		path = append(path, point{x, y})
	}
	path = append(path, point{f.xpos(f.x.max), path[len(path)-1].y})
	sc.line(polyline{id: "series-" + slug(s.Name), class: "series", points: compact(path), stroke: c, width: 2})
}

// compact merges runs of points less than half a pixel apart in x into
// their first, lowest, highest and last points: the drawing is the same but
// a long run's line stays small.
func compact(path []point) []point {
	var out []point
	for i := 0; i < len(path); {
		j := i + 1
		for j < len(path) && math.Abs(path[j].x-path[i].x) < 0.5 {
			j++
		}
		if j-i <= 4 {
			out = append(out, path[i:j]...)
		} else {
			lo, hi := path[i], path[i]
			for _, p := range path[i:j] {
				if p.y < lo.y {
					lo = p
				}
				if p.y > hi.y {
					hi = p
				}
			}
			out = append(out, path[i], lo, hi, path[j-1])
		}
		i = j
	}
	return out
}

// drawLevels draws budgets (solid) and predictions (dashed) that are on
// scale, each labelled at its right end unless it would cover another label.
func drawLevels(sc *scene, f frame, levels []Level, colors []color.NRGBA) {
	var labelYs []float64
	for i, l := range levels {
		if !onScaleAxis(l, f) {
			continue
		}
		y := f.ypos(l.Bytes)
		pl := polyline{id: "level-" + slug(l.Name), class: "level " + l.Kind.String(),
			points: []point{{f.left, y}, {f.right, y}}, stroke: colors[i], width: 2}
		if l.Kind == Predicted {
			pl.dash = 8
		}
		sc.line(pl)
		if farFrom(labelYs, y, 20) {
			labelYs = append(labelYs, y)
			label := l.Name + " " + formatBytes(l.Bytes)
			w := textWidth(label, textScale)
			// A pale backing keeps the label readable over the series.
			sc.rect(rect{class: "level-label-back", x: f.right - 10 - w, y: y - 6 - capHeight*textScale - 3, w: w + 8,
				h: capHeight*textScale + 6, fill: withAlpha(colorBackground, 210)})
			sc.text(text{class: "level-label", x: f.right - 6, y: y - 6, s: label, scale: textScale, fill: colors[i], align: anchorEnd})
		}
	}
}

// onScaleAxis says whether a level lies within the drawn axis.
func onScaleAxis(l Level, f frame) bool { return float64(l.Bytes) <= f.y.max*f.unit.size }

// farFrom reports whether y is at least gap from every y in ys.
func farFrom(ys []float64, y, gap float64) bool {
	for _, v := range ys {
		if math.Abs(v-y) < gap {
			return false
		}
	}
	return true
}
