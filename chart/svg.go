package chart

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// svgFont is a monospace face whose advance (0.6 em) and cap height
// (about 0.7 em) match the bitmap font's 6x7 cells at font-size 10*scale.
const svgFont = "DejaVu Sans Mono, Menlo, Consolas, monospace"

// writeSVG writes the scene as a standalone SVG document.
func writeSVG(w io.Writer, sc *scene) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n",
		sc.width, sc.height, sc.width, sc.height, attr(svgFont))
	fmt.Fprintf(bw, `<rect class="background" x="0" y="0" width="%d" height="%d" fill="%s"/>`+"\n", sc.width, sc.height, hex(sc.background))
	for _, it := range sc.items {
		switch v := it.(type) {
		case *polyline:
			svgLine(bw, v)
		case *rect:
			svgRect(bw, v)
		case *text:
			svgText(bw, v)
		}
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// svgLine writes a two-point path as <line> (easy to find and check) and
// longer ones as <polyline>.
func svgLine(w io.Writer, l *polyline) {
	if len(l.points) < 2 {
		return
	}
	style := fmt.Sprintf(` stroke="%s" stroke-width="%s" fill="none"`, hex(l.stroke), num(l.width))
	if l.stroke.A != 255 {
		style += fmt.Sprintf(` stroke-opacity="%s"`, opacity(l.stroke.A))
	}
	if l.dash > 0 {
		style += fmt.Sprintf(` stroke-dasharray="%s %s"`, num(l.dash), num(l.dash))
	}
	if len(l.points) == 2 {
		a, b := l.points[0], l.points[1]
		fmt.Fprintf(w, `<line%s x1="%s" y1="%s" x2="%s" y2="%s"%s/>`+"\n", ids(l.id, l.class), num(a.x), num(a.y), num(b.x), num(b.y), style)
		return
	}
	var pts strings.Builder
	for i, p := range l.points {
		if i > 0 {
			pts.WriteByte(' ')
		}
		pts.WriteString(num(p.x) + "," + num(p.y))
	}
	fmt.Fprintf(w, `<polyline%s points="%s"%s stroke-linejoin="miter"/>`+"\n", ids(l.id, l.class), pts.String(), style)
}

func svgRect(w io.Writer, r *rect) {
	fill := fmt.Sprintf(` fill="%s"`, hex(r.fill))
	if r.fill.A != 255 {
		fill += fmt.Sprintf(` fill-opacity="%s"`, opacity(r.fill.A))
	}
	head := fmt.Sprintf(`<rect%s x="%s" y="%s" width="%s" height="%s"%s`, ids(r.id, r.class), num(r.x), num(r.y), num(r.w), num(r.h), fill)
	if r.title == "" {
		fmt.Fprintln(w, head+"/>")
		return
	}
	fmt.Fprintf(w, "%s><title>%s</title></rect>\n", head, escape(r.title))
}

func svgText(w io.Writer, t *text) {
	anchor := [...]string{"start", "middle", "end"}[t.align]
	fmt.Fprintf(w, `<text%s x="%s" y="%s" font-size="%d" fill="%s" text-anchor="%s" xml:space="preserve">%s</text>`+"\n",
		ids("", t.class), num(t.x), num(t.y), 10*t.scale, hex(t.fill), anchor, escape(t.s))
}

// ids writes the id and class attributes that are set.
func ids(id, class string) string {
	s := ""
	if id != "" {
		s += fmt.Sprintf(` id="%s"`, attr(id))
	}
	if class != "" {
		s += fmt.Sprintf(` class="%s"`, attr(class))
	}
	return s
}

// num writes a coordinate with at most two decimals.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func opacity(a uint8) string { return strconv.FormatFloat(float64(a)/255, 'f', 3, 64) }

// escape makes s safe as XML character data.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// attr makes s safe inside a double-quoted attribute (EscapeText escapes
// quotes as well as <, > and &).
func attr(s string) string { return escape(s) }
