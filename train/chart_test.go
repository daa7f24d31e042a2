package train

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestWriteLossChart(t *testing.T) {
	tests := []struct {
		name   string
		losses []float32
		want   []string
	}{
		{"falling", []float32{4, 2, 1, 0.5, 0.05}, []string{"<polyline", "1e-2", "1e1", "smoothed loss", "&lt;run&gt;"}},
		{"one step", []float32{0.3}, []string{"<polyline", "1e-1"}},
		{"nothing to plot", []float32{float32(math.NaN()), 0}, []string{"no finite positive loss"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hist []StepStat
			for i, l := range tt.losses {
				hist = append(hist, StepStat{Step: i + 1, Loss: l})
			}
			var b bytes.Buffer
			if err := WriteLossChart(&b, "<run>", hist); err != nil {
				t.Fatal(err)
			}
			svg := b.String()
			if !strings.HasPrefix(svg, "<svg") || !strings.HasSuffix(svg, "</svg>\n") || strings.Contains(svg, "NaN") {
				t.Fatalf("not a clean SVG document: %.200s", svg)
			}
			for _, w := range tt.want {
				if !strings.Contains(svg, w) {
					t.Errorf("chart lacks %q", w)
				}
			}
		})
	}
}

func TestSmoothed(t *testing.T) {
	// Bias correction makes the first value the first loss, and a
	// constant loss stays constant.
	got := Smoothed([]StepStat{{Loss: 2}, {Loss: 2}, {Loss: 2}}, 0.9)
	for i, v := range got {
		if math.Abs(v-2) > 1e-12 {
			t.Errorf("[%d] = %g, want 2", i, v)
		}
	}
	got = Smoothed([]StepStat{{Loss: 1}, {Loss: 0}}, 0.5)
	// m = 0.5, then 0.25; corrected by 1−0.5 and 1−0.25: 1 and 1/3.
	if math.Abs(got[0]-1) > 1e-12 || math.Abs(got[1]-1.0/3) > 1e-12 {
		t.Errorf("got %v, want [1 0.333]", got)
	}
}
