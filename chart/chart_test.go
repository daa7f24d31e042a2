package chart

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"ferry/trace"
)

func TestRenderErrors(t *testing.T) {
	cases := []struct {
		name   string
		data   Data
		format string
		want   string
	}{
		{"unknown format", Data{}, "jpg", "unknown format"},
		{"bad color", Data{Series: []Series{{Name: "x", Color: "red"}}}, SVG, "#rrggbb"},
		{"too narrow", Data{Width: 100}, SVG, "width"},
		{"too short", Data{Height: 200, Lanes: make([]Lane, 3)}, PNG, "height"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Render(&bytes.Buffer{}, c.data, c.format)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestEmptyDataRenders(t *testing.T) {
	for _, f := range []string{SVG, PNG} {
		if err := Render(&bytes.Buffer{}, Data{}, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestFormatFromPath(t *testing.T) {
	cases := []struct{ path, want string }{
		{"out/chart.svg", SVG},
		{"CHART.PNG", PNG},
		{"chart.jpg", ""},
		{"chart", ""},
	}
	for _, c := range cases {
		got, err := FormatFromPath(c.path)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("FormatFromPath(%q) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
}

func TestNiceAxis(t *testing.T) {
	cases := []struct {
		top      float64
		want     int
		max      float64
		step     float64
		nTicks   int
		firstTwo string
	}{
		{5.3, 5, 6, 2, 4, "0 2"},
		{8, 5, 8, 2, 5, "0 2"},
		{0.7, 5, 0.8, 0.2, 5, "0 0.2"},
		{123, 8, 140, 20, 8, "0 20"},
		{123, 5, 125, 25, 6, "0 25"},
		{0, 5, 1, 0.2, 6, "0 0.2"},
	}
	for _, c := range cases {
		a := niceAxis(c.top, c.want, 0, 100)
		first := fmt.Sprintf("%s %s", formatTick(a.ticks[0], a.step), formatTick(a.ticks[1], a.step))
		if a.max != c.max || a.step != c.step || len(a.ticks) != c.nTicks || first != c.firstTwo {
			t.Errorf("niceAxis(%v, %d): first %q max %v step %v ticks %v; want max %v step %v %d ticks starting %q",
				c.top, c.want, first, a.max, a.step, a.ticks, c.max, c.step, c.nTicks, c.firstTwo)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	cases := []struct {
		n    int64
		want string
	}{
		{512, "512 B"},
		{1536, "1.50 KiB"},
		{200 << 20, "200 MiB"},
		{6 << 30, "6.00 GiB"},
		{48 << 30, "48.0 GiB"},
	}
	for _, c := range cases {
		if got := formatBytes(c.n); got != c.want {
			t.Errorf("formatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCompactKeepsExtremes(t *testing.T) {
	var path []point
	for i := range 100 {
		path = append(path, point{10 + float64(i)/1000, float64(i % 37)})
	}
	path = append(path, point{20, 5})
	got := compact(path)
	if len(got) != 5 {
		t.Fatalf("compact kept %d points, want 5", len(got))
	}
	if got[0] != path[0] || got[3] != path[99] || got[4] != path[100] {
		t.Errorf("first/last points changed: %v", got)
	}
	if got[1].y != 0 || got[2].y != 36 {
		t.Errorf("extremes %v %v, want y 0 and 36", got[1], got[2])
	}
}

func TestFromRecorder(t *testing.T) {
	r := sampleRecorder()
	r.SetResolution(trace.CounterDeviceAllocated, 1<<20)
	for _, v := range []int64{1 << 30, 1<<30 + 1000, 0} {
		r.Count(trace.CounterDeviceAllocated, v) // the middle one is dropped
	}
	r.Count("zz custom", 1)
	r.Count(trace.CounterRSS, 2<<30)
	d := FromRecorder(r, Info{Title: "t", DeviceBudget: gib, PredictedHostPeak: 2 * gib})

	var names []string
	for _, s := range d.Series {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "device allocated,RSS,zz custom" {
		t.Errorf("series %s", got)
	}
	if d.Series[0].Peak != 1<<30+1000 || len(d.Series[0].Points) != 2 {
		t.Errorf("device allocated: peak %d from %d points; want the exact peak from 2 points", d.Series[0].Peak, len(d.Series[0].Points))
	}
	if len(d.Levels) != 2 || d.Levels[0].Kind != Budget || d.Levels[1].Kind != Predicted {
		t.Errorf("levels %+v", d.Levels)
	}
	depth := map[string]int{}
	for _, p := range d.Phases {
		depth[p.Name] = p.Depth
	}
	if depth["denoise"] != 0 || depth["denoise step 1"] != 1 || depth["vae"] != 0 || len(d.Phases) != 5 {
		t.Errorf("phases %+v", d.Phases)
	}
	sizes := map[string]int{}
	for _, l := range d.Lanes {
		sizes[l.Name] = len(l.Spans)
	}
	if sizes["compute"] != 16 || sizes["copy"] != 16 || sizes["wait"] != 2 {
		t.Errorf("lanes %v", sizes)
	}
	if d.End < 32 || d.End > 32+float64(time.Minute/time.Second) {
		t.Errorf("end %v, want the vae's end at 32 s", d.End)
	}
}

func TestFontCoversASCII(t *testing.T) {
	seen := map[glyph]rune{}
	for r := rune(32); r < 127; r++ {
		src, ok := glyphSource[r]
		if !ok {
			t.Errorf("no glyph for %q", r)
			continue
		}
		rows := strings.Split(src, "|")
		if len(rows) < capHeight || len(rows) > glyphRows {
			t.Errorf("%q has %d rows", r, len(rows))
		}
		for _, row := range rows {
			if len(row) != glyphCols || strings.Trim(row, "#.") != "" {
				t.Errorf("%q row %q", r, row)
			}
		}
		g := glyphs[r]
		if other, dup := seen[g]; dup {
			t.Errorf("%q and %q look the same", r, other)
		}
		seen[g] = r
	}
}

func TestGlyphFallbacks(t *testing.T) {
	cases := []struct {
		in, want rune
	}{
		{'A', 'A'},
		{'×', 'x'},
		{'·', '.'},
		{'é', '?'},
	}
	for _, c := range cases {
		if glyphFor(c.in) != glyphs[c.want] {
			t.Errorf("glyph for %q is not %q's", c.in, c.want)
		}
	}
}
