package chart

import (
	"fmt"
	"testing"
)

// longRun is chart data the size of a long video run: 40 steps of 40
// streamed blocks over ten minutes and 20,000 samples per counter.
func longRun() Data {
	d := Data{Title: "long run", Levels: []Level{{Name: "device budget", Bytes: 8 * gib}}}
	names := []string{"device allocated", "device reserved", "host reserved", "rss"}
	for i, n := range names {
		s := Series{Name: n}
		for j := range 20000 {
			s.Points = append(s.Points, Point{T: float64(j) * 0.03, Bytes: int64(i+1)*gib + int64(j%97)<<22})
		}
		d.Series = append(d.Series, s)
	}
	lanes := []Lane{{Name: "compute"}, {Name: "copy"}, {Name: "wait", MinWidth: 1}}
	for k := range 1600 {
		t := float64(k) * 0.375
		name := fmt.Sprintf("transformer.blocks.%d", k%40)
		lanes[1].Spans = append(lanes[1].Spans, Span{Name: name, Start: t, End: t + 0.3})
		lanes[0].Spans = append(lanes[0].Spans, Span{Name: name, Start: t + 0.3, End: t + 0.37})
		if k%40 == 0 {
			lanes[2].Spans = append(lanes[2].Spans, Span{Name: name, Start: t, End: t + 0.3})
		}
	}
	d.Lanes = lanes
	for s := range 40 {
		d.Phases = append(d.Phases, Phase{Name: fmt.Sprintf("step %d", s), Start: float64(s) * 15, End: float64(s+1) * 15, Depth: 1})
	}
	return d
}

// countingWriter counts the bytes written.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func BenchmarkRender(b *testing.B) {
	d := longRun()
	for _, format := range []string{SVG, PNG} {
		b.Run(format, func(b *testing.B) {
			var w countingWriter
			for b.Loop() {
				w.n = 0
				if err := Render(&w, d, format); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(w.n), "file-bytes")
		})
	}
}
