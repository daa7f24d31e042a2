package chart

import (
	"fmt"
	"image/color"
	"math"
	"strings"
)

// Page geometry in pixels. The plot's right edge leaves room for the legend;
// lanes sit between the plot and the time labels.
const (
	marginLeft   = 120
	legendWidth  = 340
	plotTop      = 84
	titleY       = 36
	subtitleY    = 62
	laneHeight   = 20
	laneGap      = 6
	lanesBelow   = 60 // from the lanes' bottom to the image's bottom
	plotLaneGap  = 14
	minPlotH     = 120
	minWidth     = 700
	textScale    = 2
	titleScale   = 3
	levelOnScale = 4 // a level more than this many times the data's peak is off scale
)

// Colors of the page.
var (
	colorBackground = rgb(0xffffff)
	colorInk        = rgb(0x222222)
	colorMuted      = rgb(0x666666)
	colorGrid       = rgb(0xe3e3e3)
	colorLaneBack   = rgb(0xf3f3f3)
	phaseFills      = []color.NRGBA{withAlpha(rgb(0x9ecae1), 60), withAlpha(rgb(0xfdd0a2), 70)}
	stepFills       = []color.NRGBA{rgb(0xbdbdbd), rgb(0x8c8c8c)}
	seriesPalette   = []uint32{0x1f77b4, 0x9ecae1, 0xff7f0e, 0x9467bd, 0x2ca02c, 0x8c564b, 0xe377c2, 0x7f7f7f}
)

// knownColors gives the usual counters and lanes fixed colors, so every
// chart reads the same way.
var knownColors = map[string]uint32{
	"device allocated": 0x1f77b4,
	"device reserved":  0x9ecae1,
	"host allocated":   0xffbb78,
	"host reserved":    0xff7f0e,
	"rss":              0x9467bd,
	"compute":          0x4c78a8,
	"copy":             0x54a24b,
	"wait":             0xe45756,
}

// frame is the plot's pixel rectangle and its axes.
type frame struct {
	left, right, top, bottom float64
	x, y                     axis
	unit                     byteUnit
	lanesTop                 float64
}

// layout turns data into a scene.
func layout(d Data) (*scene, error) {
	if d.Width == 0 {
		d.Width = DefaultWidth
	}
	if d.Height == 0 {
		d.Height = DefaultHeight
	}
	f, err := newFrame(d)
	if err != nil {
		return nil, err
	}
	colors, err := resolveColors(d)
	if err != nil {
		return nil, err
	}
	sc := &scene{width: d.Width, height: d.Height, background: colorBackground}
	drawPhases(sc, f, d.Phases)
	drawGrid(sc, f)
	for i, s := range d.Series {
		drawSeries(sc, f, s, colors.series[i])
	}
	drawLevels(sc, f, d.Levels, colors.levels)
	drawAxes(sc, f)
	for i, l := range d.Lanes {
		drawLane(sc, f, i, l, colors.lanes[i])
	}
	drawLegend(sc, f, d, colors)
	drawTitle(sc, d)
	return sc, nil
}

// newFrame places the plot and fits its axes to the data.
func newFrame(d Data) (frame, error) {
	if d.Width < minWidth {
		return frame{}, fmt.Errorf("chart: width %d is below %d pixels", d.Width, minWidth)
	}
	lanesBottom := float64(d.Height - lanesBelow)
	lanesTop := lanesBottom - float64(len(d.Lanes)*(laneHeight+laneGap))
	f := frame{left: marginLeft, right: float64(d.Width - legendWidth), top: plotTop, bottom: lanesTop - plotLaneGap, lanesTop: lanesTop}
	if f.bottom-f.top < minPlotH {
		return frame{}, fmt.Errorf("chart: height %d leaves no room for the plot with %d lanes", d.Height, len(d.Lanes))
	}
	top := float64(maxSeriesBytes(d.Series))
	for _, l := range d.Levels {
		if onScale(l, d.Series) {
			top = math.Max(top, float64(l.Bytes))
		}
	}
	f.unit = unitFor(top)
	f.y = niceAxis(top*1.04/f.unit.size, 5, f.bottom, f.top)
	f.x = niceAxis(endTime(d), 8, f.left, f.right)
	return f, nil
}

// xpos and ypos map seconds and bytes to pixels, clamped to the plot.
func (f frame) xpos(t float64) float64 {
	return math.Min(math.Max(f.x.pos(t), f.left), f.right)
}

func (f frame) ypos(b int64) float64 { return f.y.pos(float64(b) / f.unit.size) }

// maxSeriesBytes is the largest value or stated peak of any series.
func maxSeriesBytes(series []Series) int64 {
	var m int64
	for _, s := range series {
		m = max(m, s.Peak)
		for _, p := range s.Points {
			m = max(m, p.Bytes)
		}
	}
	return m
}

// onScale says whether a level is near enough the data to fit the axis; a
// 64 GiB host budget would flatten a 2 GiB run to nothing.
func onScale(l Level, series []Series) bool {
	m := maxSeriesBytes(series)
	return m == 0 || l.Bytes <= levelOnScale*m
}

// endTime is d.End or the latest time anything in d reaches.
func endTime(d Data) float64 {
	if d.End > 0 {
		return d.End
	}
	var t float64
	for _, s := range d.Series {
		for _, p := range s.Points {
			t = math.Max(t, p.T)
		}
	}
	for _, p := range d.Phases {
		t = math.Max(t, p.End)
	}
	for _, l := range d.Lanes {
		for _, s := range l.Spans {
			t = math.Max(t, s.End)
		}
	}
	return t
}

// palette holds the resolved color of every series, level and lane.
type palette struct {
	series, levels, lanes []color.NRGBA
}

// resolveColors parses the given colors and picks the missing ones.
func resolveColors(d Data) (palette, error) {
	var p palette
	pick := func(what, name, given string, fallback uint32) (color.NRGBA, error) {
		if given == "" {
			if v, ok := knownColors[strings.ToLower(name)]; ok {
				return rgb(v), nil
			}
			return rgb(fallback), nil
		}
		c, err := parseColor(given)
		if err != nil {
			return c, fmt.Errorf("chart: %s %q: %w", what, name, err)
		}
		return c, nil
	}
	for i, s := range d.Series {
		c, err := pick("series", s.Name, s.Color, seriesPalette[i%len(seriesPalette)])
		if err != nil {
			return p, err
		}
		p.series = append(p.series, c)
	}
	for _, l := range d.Levels {
		fallback := uint32(0xd62728)
		if strings.Contains(strings.ToLower(l.Name), "host") {
			fallback = 0xe6550d
		}
		c, err := pick("level", l.Name, l.Color, fallback)
		if err != nil {
			return p, err
		}
		p.levels = append(p.levels, c)
	}
	for _, l := range d.Lanes {
		c, err := pick("lane", l.Name, l.Color, 0x7f7f7f)
		if err != nil {
			return p, err
		}
		p.lanes = append(p.lanes, c)
	}
	return p, nil
}

// drawPhases shades top-level phases across the plot and draws nested ones
// (denoise steps) as a strip along its top.
func drawPhases(sc *scene, f frame, phases []Phase) {
	top, nested := 0, 0
	for _, p := range phases {
		x0, x1 := f.xpos(p.Start), f.xpos(p.End)
		title := fmt.Sprintf("%s: %.2f s to %.2f s", p.Name, p.Start, p.End)
		if p.Depth > 0 {
			sc.rect(rect{class: "step", x: x0, y: f.top, w: x1 - x0, h: 6, fill: stepFills[nested%2], title: title})
			nested++
			continue
		}
		sc.rect(rect{id: "phase-" + slug(p.Name), class: "phase", x: x0, y: f.top, w: x1 - x0, h: f.bottom - f.top,
			fill: phaseFills[top%2], title: title})
		top++
		for scale := textScale; scale >= 1; scale-- { // smaller text before none
			if textWidth(p.Name, scale) <= x1-x0-8 {
				sc.text(text{class: "phase-label", x: x0 + 4, y: f.top + 12 + float64(capHeight*scale), s: p.Name, scale: scale, fill: colorMuted})
				break
			}
		}
	}
}

// drawGrid draws the tick lines and labels of both axes.
func drawGrid(sc *scene, f frame) {
	for _, v := range f.y.ticks {
		y := f.y.pos(v)
		sc.line(polyline{class: "grid ytick", points: []point{{f.left, y}, {f.right, y}}, stroke: colorGrid, width: 1})
		sc.text(text{class: "ytick-label", x: f.left - 8, y: y + 7, s: formatTick(v, f.y.step) + " " + f.unit.name,
			scale: textScale, fill: colorInk, align: anchorEnd})
	}
	for _, v := range f.x.ticks {
		x := f.x.pos(v)
		sc.line(polyline{class: "grid xtick", points: []point{{x, f.top}, {x, f.bottom}}, stroke: colorGrid, width: 1})
		sc.text(text{class: "xtick-label", x: x, y: float64(sc.height - lanesBelow + 22), s: formatTick(v, f.x.step),
			scale: textScale, fill: colorInk, align: anchorMiddle})
	}
	sc.text(text{class: "axis-title", x: (f.left + f.right) / 2, y: float64(sc.height - 10), s: "time (s)",
		scale: textScale, fill: colorMuted, align: anchorMiddle})
}

// drawAxes draws the left and bottom axis lines over the data.
func drawAxes(sc *scene, f frame) {
	sc.line(polyline{class: "axis", points: []point{{f.left, f.top}, {f.left, f.bottom}, {f.right, f.bottom}}, stroke: colorInk, width: 1})
}
