package chart

import (
	"fmt"
	"image/color"
	"strconv"
)

// scene is the drawing both renderers consume: primitives in paint order.
type scene struct {
	width, height int
	background    color.NRGBA
	items         []any // *polyline, *rect or *text
	ids           map[string]int
}

// point is a position in pixels, y down.
type point struct{ x, y float64 }

// polyline is a stroked path of straight segments.
type polyline struct {
	id, class string
	points    []point
	stroke    color.NRGBA
	width     float64
	dash      float64 // dash and gap length in pixels; 0: solid
}

// rect is a filled rectangle; title becomes a hover tooltip in SVG.
type rect struct {
	id, class  string
	x, y, w, h float64
	fill       color.NRGBA
	title      string
}

// anchor is where a text's x lies on it.
type anchor uint8

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

// text is a line of text; y is the baseline. Glyph cells are 6*scale wide
// and the capitals 7*scale tall in both renderers.
type text struct {
	class string
	x, y  float64
	s     string
	scale int
	fill  color.NRGBA
	align anchor
}

func (sc *scene) line(l polyline) { l.id = sc.unique(l.id); sc.items = append(sc.items, &l) }
func (sc *scene) rect(r rect)     { r.id = sc.unique(r.id); sc.items = append(sc.items, &r) }
func (sc *scene) text(t text)     { sc.items = append(sc.items, &t) }

// unique returns id, or id with a number when it was used before, so two
// phases of the same name still get distinct SVG ids.
func (sc *scene) unique(id string) string {
	if id == "" {
		return ""
	}
	if sc.ids == nil {
		sc.ids = map[string]int{}
	}
	sc.ids[id]++
	if n := sc.ids[id]; n > 1 {
		return fmt.Sprintf("%s-%d", id, n)
	}
	return id
}

// textWidth is the drawn width of s at scale: cells minus the last gap.
func textWidth(s string, scale int) float64 {
	n := len([]rune(s))
	if n == 0 {
		return 0
	}
	return float64((n*glyphCell - 1) * scale)
}

// fitText shortens s with "..." so it is at most width pixels wide.
func fitText(s string, scale int, width float64) string {
	r := []rune(s)
	if textWidth(s, scale) <= width {
		return s
	}
	for n := len(r) - 1; n > 0; n-- {
		t := string(r[:n]) + "..."
		if textWidth(t, scale) <= width {
			return t
		}
	}
	return ""
}

// parseColor reads "#rrggbb".
func parseColor(s string) (color.NRGBA, error) {
	if len(s) != 7 || s[0] != '#' {
		return color.NRGBA{}, fmt.Errorf("color %q: want #rrggbb", s)
	}
	v, err := strconv.ParseUint(s[1:], 16, 32)
	if err != nil {
		return color.NRGBA{}, fmt.Errorf("color %q: want #rrggbb", s)
	}
	return color.NRGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}, nil
}

// hex writes a color as "#rrggbb" (alpha goes in an opacity attribute).
func hex(c color.NRGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// rgb is an opaque color.
func rgb(v uint32) color.NRGBA {
	return color.NRGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}
}

// withAlpha returns c with opacity a (0-255).
func withAlpha(c color.NRGBA, a uint8) color.NRGBA { c.A = a; return c }
