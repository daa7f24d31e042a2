package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// element is one parsed SVG element with its attributes and text.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

func (e element) float(t *testing.T, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attrs[key], 64)
	if err != nil {
		t.Fatalf("<%s> attribute %s=%q: %v", e.name, key, e.attrs[key], err)
	}
	return v
}

func (e element) hasClass(c string) bool {
	for _, f := range strings.Fields(e.attrs["class"]) {
		if f == c {
			return true
		}
	}
	return false
}

// parseSVG checks that the document is well-formed XML and returns its
// elements in document order.
func parseSVG(t *testing.T, doc []byte) []element {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var out []element
	var stack []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			e := element{name: v.Name.Local, attrs: map[string]string{}}
			for _, a := range v.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(v)
			}
		}
	}
	if len(out) == 0 || out[0].name != "svg" {
		t.Fatalf("root element is not <svg>")
	}
	return out
}

func renderSVG(t *testing.T, d Data) []element {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, d, SVG); err != nil {
		t.Fatal(err)
	}
	return parseSVG(t, buf.Bytes())
}

// tickMapping reads the y axis as a person would: each gridline's height
// and the value its label names, and returns the line through the lowest and
// highest ticks as y(bytes).
func tickMapping(t *testing.T, els []element) func(bytes float64) float64 {
	t.Helper()
	var ys, vs []float64
	for _, e := range els {
		switch {
		case e.name == "line" && e.hasClass("ytick"):
			ys = append(ys, e.float(t, "y1"))
		case e.name == "text" && e.hasClass("ytick-label"):
			vs = append(vs, parseSize(t, e.text))
		}
	}
	if len(ys) < 2 || len(ys) != len(vs) {
		t.Fatalf("%d y gridlines and %d labels", len(ys), len(vs))
	}
	y0, y1, v0, v1 := ys[0], ys[len(ys)-1], vs[0], vs[len(vs)-1]
	return func(b float64) float64 { return y0 + (b-v0)*(y1-y0)/(v1-v0) }
}

// parseSize reads a tick label such as "2.5 GiB" into bytes.
func parseSize(t *testing.T, s string) float64 {
	t.Helper()
	num, unit, ok := strings.Cut(strings.TrimSpace(s), " ")
	units := map[string]float64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || units[unit] == 0 {
		t.Fatalf("tick label %q is not a size", s)
	}
	return v * units[unit]
}

func findByID(t *testing.T, els []element, id string) element {
	t.Helper()
	for _, e := range els {
		if e.attrs["id"] == id {
			return e
		}
	}
	t.Fatalf("no element with id %q", id)
	return element{}
}

func TestLevelLinesAtTheirHeight(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name   string
		peak   int64 // the series' highest point
		levels []Level
		unit   string
	}{
		{"gib budget above data", 3 * gib, []Level{{Name: "device budget", Bytes: 6 * gib}}, "GiB"},
		{"budget below peak", 5 * gib, []Level{{Name: "device budget", Bytes: 4*gib + gib/3}}, "GiB"},
		{"mib scale", 180 * mib, []Level{{Name: "device budget", Bytes: 256 * mib}, {Name: "predicted device peak", Bytes: 200 * mib, Kind: Predicted}}, "MiB"},
		{"odd values", 7*gib + 12345, []Level{{Name: "host budget", Bytes: 9*gib + 777}}, "GiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Data{Title: c.name, Levels: c.levels, Series: []Series{{Name: "device allocated",
				Points: []Point{{0, 0}, {1, c.peak}, {2, c.peak / 2}}}}}
			els := renderSVG(t, d)
			y := tickMapping(t, els)
			for _, l := range c.levels {
				e := findByID(t, els, "level-"+slug(l.Name))
				if e.name != "line" || !e.hasClass(l.Kind.String()) {
					t.Fatalf("level %s is <%s class=%q>", l.Name, e.name, e.attrs["class"])
				}
				y1, y2 := e.float(t, "y1"), e.float(t, "y2")
				if want := y(float64(l.Bytes)); math.Abs(y1-want) > 0.01 || y1 != y2 {
					t.Errorf("%s at y %v..%v, want %.3f from the axis labels", l.Name, y1, y2, want)
				}
				if dashed := e.attrs["stroke-dasharray"] != ""; dashed != (l.Kind == Predicted) {
					t.Errorf("%s dashed=%v", l.Name, dashed)
				}
			}
			for _, e := range els {
				if e.hasClass("ytick-label") && !strings.HasSuffix(e.text, c.unit) {
					t.Errorf("tick %q, want unit %s", e.text, c.unit)
				}
			}
		})
	}
}

func TestSeriesPeakAtItsHeight(t *testing.T) {
	d := Data{Series: []Series{{Name: "device allocated", Points: []Point{{0, gib}, {1, 3 * gib}, {2, 2 * gib}}}}}
	els := renderSVG(t, d)
	y := tickMapping(t, els)
	e := findByID(t, els, "series-device-allocated")
	top := math.Inf(1)
	for _, p := range strings.Fields(e.attrs["points"]) {
		_, ys, _ := strings.Cut(p, ",")
		v, err := strconv.ParseFloat(ys, 64)
		if err != nil {
			t.Fatal(err)
		}
		top = math.Min(top, v)
	}
	if want := y(3 * gib); math.Abs(top-want) > 0.01 {
		t.Fatalf("series peak at y %v, want %v", top, want)
	}
}

func TestOffScaleLevelIsOnlyInLegend(t *testing.T) {
	d := Data{
		Series: []Series{{Name: "device allocated", Points: []Point{{0, gib}, {1, 2 * gib}}}},
		Levels: []Level{{Name: "host budget", Bytes: 64 * gib}, {Name: "device budget", Bytes: 4 * gib}},
	}
	els := renderSVG(t, d)
	legend := ""
	for _, e := range els {
		if e.attrs["id"] == "level-host-budget" {
			t.Fatalf("a 64 GiB level was drawn on a 2 GiB chart")
		}
		if e.hasClass("legend-detail") {
			legend += e.text + "\n"
		}
		if e.hasClass("ytick-label") && parseSize(t, e.text) > 8*gib {
			t.Fatalf("axis stretched to %s", e.text)
		}
	}
	if !strings.Contains(legend, "64.0 GiB (off scale)") {
		t.Fatalf("legend does not mention the off-scale level:\n%s", legend)
	}
	findByID(t, els, "level-device-budget")
}

func TestSVGEscapesText(t *testing.T) {
	title := `a<b & "c" > d`
	d := sampleData()
	d.Title = title
	d.Phases = append(d.Phases, Phase{Name: "<&>", Start: 0, End: 30})
	els := renderSVG(t, d)
	found := false
	for _, e := range els {
		found = found || (e.hasClass("title") && e.text == title)
	}
	if !found {
		t.Fatalf("title %q did not survive escaping", title)
	}
}

func TestSampleChartHasEveryPart(t *testing.T) {
	els := renderSVG(t, sampleData())
	count := map[string]int{}
	for _, e := range els {
		for _, c := range strings.Fields(e.attrs["class"]) {
			count[c]++
		}
	}
	want := map[string]int{
		"phase":        3,  // text encoder, denoise, vae
		"step":         2,  // two denoise steps
		"series":       4,  // device allocated, reserved, host, RSS
		"budget":       1,  // the device budget (the host one is off scale)
		"predicted":    1,  // predicted device peak
		"lane-compute": 16, // 4 text encoder + 2*6 transformer blocks
		"lane-copy":    16,
		"lane-wait":    2,
		"title":        1,
	}
	for c, n := range want {
		if count[c] != n {
			t.Errorf("%d elements of class %q, want %d", count[c], c, n)
		}
	}
}

// TestThinSpansDrawnAsDensity draws a lane busy half the time in spans
// under a pixel wide: the shaded area, weighted by opacity, must be about
// half the lane, not all of it.
func TestThinSpansDrawnAsDensity(t *testing.T) {
	var spans []Span
	for k := range 500 {
		t0 := 0.2 * float64(k)
		spans = append(spans, Span{Name: "b", Start: t0, End: t0 + 0.1})
	}
	d := Data{End: 100, Lanes: []Lane{{Name: "compute", Spans: spans}}}
	var plot, busy float64
	for _, e := range renderSVG(t, d) {
		switch {
		case e.name == "rect" && e.hasClass("lane"):
			plot = e.float(t, "width")
		case e.name == "rect" && e.hasClass("lane-compute"):
			op := 1.0
			if e.attrs["fill-opacity"] != "" {
				op = e.float(t, "fill-opacity")
			}
			busy += e.float(t, "width") * op
		}
	}
	if frac := busy / plot; math.Abs(frac-0.5) > 0.1 {
		t.Fatalf("lane drawn %.2f busy, want about 0.5", frac)
	}
}
