package chart

import (
	"fmt"
	"strings"
)

// drawLegend lists series, levels and lanes to the right of the plot, each
// with its figure: peak, value, or total time.
func drawLegend(sc *scene, f frame, d Data, colors palette) {
	x := f.right + 20
	y := f.top + 10
	width := float64(legendWidth - 56)
	entry := func(name, detail string, swatch func(y float64)) {
		if y+40 > float64(sc.height) {
			return
		}
		swatch(y - 6)
		sc.text(text{class: "legend", x: x + 32, y: y, s: fitText(name, textScale, width), scale: textScale, fill: colorInk})
		if detail != "" {
			sc.text(text{class: "legend-detail", x: x + 32, y: y + 20, s: fitText(detail, textScale, width), scale: textScale, fill: colorMuted})
			y += 18
		}
		y += 28
	}
	for i, s := range d.Series {
		peak := max(s.Peak, maxSeriesBytes([]Series{s}))
		entry(s.Name, "peak "+formatBytes(peak), func(y float64) {
			sc.line(polyline{class: "legend-swatch", points: []point{{x, y}, {x + 26, y}}, stroke: colors.series[i], width: 3})
		})
	}
	for i, l := range d.Levels {
		detail := formatBytes(l.Bytes)
		if !onScaleAxis(l, f) {
			detail += " (off scale)"
		}
		entry(l.Name, detail, func(y float64) {
			pl := polyline{class: "legend-swatch", points: []point{{x, y}, {x + 26, y}}, stroke: colors.levels[i], width: 2}
			if l.Kind == Predicted {
				pl.dash = 6
			}
			sc.line(pl)
		})
	}
	for i, l := range d.Lanes {
		var total float64
		for _, s := range l.Spans {
			total += s.End - s.Start
		}
		detail := fmt.Sprintf("%d spans, %s", len(l.Spans), formatSeconds(total))
		if span := endTime(d); span > 0 {
			detail += fmt.Sprintf(" (%.0f%%)", 100*total/span)
		}
		entry(l.Name, detail, func(y float64) {
			sc.rect(rect{class: "legend-swatch", x: x, y: y - 7, w: 26, h: 14, fill: colors.lanes[i]})
		})
	}
}

// drawTitle writes the title and subtitle across the top.
func drawTitle(sc *scene, d Data) {
	w := float64(sc.width - 40)
	sc.text(text{class: "title", x: 20, y: titleY, s: fitText(d.Title, titleScale, w), scale: titleScale, fill: colorInk})
	if d.Subtitle != "" {
		sc.text(text{class: "subtitle", x: 20, y: subtitleY, s: fitText(d.Subtitle, textScale, w), scale: textScale, fill: colorMuted})
	}
}

// formatSeconds writes a duration in seconds with three significant digits.
func formatSeconds(s float64) string {
	switch {
	case s >= 100:
		return fmt.Sprintf("%.0f s", s)
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

// slug makes a name usable in an id: lower case, dashes for the rest.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
