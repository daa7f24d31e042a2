package train

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
)

// Loss chart geometry, in SVG pixels.
const (
	chartW, chartH                    = 900, 420
	padLeft, padRight, padTop, padBot = 70, 20, 40, 45
)

// WriteLossChart draws the per-step loss as an SVG line chart with a
// logarithmic loss axis (training losses fall by decades), the smoothed
// loss over it, and the title on top. The memory chart (package chart)
// plots bytes over seconds, which fits no loss curve.
func WriteLossChart(w io.Writer, title string, hist []StepStat) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", padLeft, html.EscapeString(title))
	lo, hi, ok := lossRange(hist)
	if !ok {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no finite positive loss to plot</text>`+"\n", padLeft, chartH/2)
		b.WriteString("</svg>\n")
		_, err := w.Write(b.Bytes())
		return err
	}
	first, last := hist[0].Step, hist[len(hist)-1].Step
	x := func(step int) float64 {
		if last == first {
			return padLeft
		}
		return padLeft + float64(step-first)/float64(last-first)*float64(chartW-padLeft-padRight)
	}
	y := func(loss float64) float64 {
		f := (math.Log10(loss) - lo) / (hi - lo)
		return float64(chartH-padBot) - f*float64(chartH-padTop-padBot)
	}
	axes(&b, lo, hi, first, last, x, y)
	raw := make([]float64, len(hist))
	for i, s := range hist {
		raw[i] = float64(s.Loss)
	}
	polyline(&b, hist, x, y, raw, "#9ab8dd", 1)
	polyline(&b, hist, x, y, Smoothed(hist, 0.9), "#1f5fa8", 2)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#1f5fa8">smoothed loss</text>`+"\n", chartW-padRight-100, padTop-8)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// lossRange is the decades the chart spans, from the finite positive
// losses.
func lossRange(hist []StepStat) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range hist {
		l := float64(s.Loss)
		if l > 0 && !math.IsInf(l, 0) {
			lo, hi = math.Min(lo, l), math.Max(hi, l)
		}
	}
	if math.IsInf(lo, 1) {
		return 0, 0, false
	}
	lo, hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if hi == lo {
		hi++
	}
	return lo, hi, true
}

// axes draws the frame, a grid line and label per decade, and step
// labels at both ends.
func axes(b *bytes.Buffer, lo, hi float64, first, last int, x func(int) float64, y func(float64) float64) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n",
		padLeft, padTop, chartW-padLeft-padRight, chartH-padTop-padBot)
	for d := lo; d <= hi; d++ {
		yy := y(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", padLeft, yy, chartW-padRight, yy)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">1e%d</text>`+"\n", padLeft-6, yy+4, int(d))
	}
	for _, s := range []int{first, last} {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(s), chartH-padBot+16, s)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">step</text>`+"\n", (chartW+padLeft)/2, chartH-10)
	fmt.Fprintf(b, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">loss</text>`+"\n",
		(chartH)/2, chartH/2)
}

// polyline draws one series, skipping values the log axis cannot show.
func polyline(b *bytes.Buffer, hist []StepStat, x func(int) float64, y func(float64) float64, v []float64, color string, width int) {
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%d" points="`, color, width)
	for i, s := range hist {
		if l := v[i]; l > 0 && !math.IsInf(l, 0) {
			fmt.Fprintf(b, "%.1f,%.1f ", x(s.Step), y(l))
		}
	}
	b.WriteString(`"/>` + "\n")
}

// Smoothed is the exponentially smoothed loss of every step (decay d,
// bias-corrected as Adam's moments are, so early values are not pulled
// towards zero).
func Smoothed(hist []StepStat, d float64) []float64 {
	out := make([]float64, len(hist))
	var m float64
	for i, s := range hist {
		m = d*m + (1-d)*float64(s.Loss)
		out[i] = m / (1 - math.Pow(d, float64(i+1)))
	}
	return out
}
