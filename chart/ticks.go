package chart

import (
	"math"
	"strconv"
)

// axis maps values in [0, max] onto pixels [lo, hi] (hi may be above lo on
// screen: for y, lo is the bottom).
type axis struct {
	max    float64 // in data units (bytes or seconds)
	lo, hi float64 // pixel positions of 0 and max
	ticks  []float64
	step   float64
}

func (a axis) pos(v float64) float64 { return a.lo + (a.hi-a.lo)*v/a.max }

// niceAxis picks a step of 1, 2, 2.5 or 5 times a power of ten giving about
// want intervals over [0, top], and extends the axis to a whole step.
func niceAxis(top float64, want int, lo, hi float64) axis {
	if !(top > 0) || math.IsInf(top, 0) {
		top = 1
	}
	step := niceStep(top / float64(want))
	n := math.Ceil(top/step - 1e-9)
	a := axis{max: clean(n * step), lo: lo, hi: hi, step: step}
	for i := 0.0; i <= n; i++ {
		a.ticks = append(a.ticks, clean(i*step))
	}
	return a
}

// clean drops the binary noise of a product like 3*0.2 (0.6000000000000001).
func clean(v float64) float64 {
	c, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	if err != nil {
		return v
	}
	return c
}

// niceStep rounds raw up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw*(1-1e-9) {
			return clean(m * p)
		}
	}
	return clean(10 * p)
}

// byteUnit is the unit a byte axis is labelled in.
type byteUnit struct {
	name string
	size float64
}

// unitFor picks GiB when the axis reaches a GiB, MiB when it reaches a MiB,
// KiB below that.
func unitFor(maxBytes float64) byteUnit {
	switch {
	case maxBytes >= 1<<30:
		return byteUnit{"GiB", 1 << 30}
	case maxBytes >= 1<<20:
		return byteUnit{"MiB", 1 << 20}
	default:
		return byteUnit{"KiB", 1 << 10}
	}
}

// formatTick writes v with as many decimals as the step needs (the origin
// is plain "0").
func formatTick(v, step float64) string {
	if v == 0 {
		return "0"
	}
	dec := 0
	for s := step; dec < 4 && math.Abs(s-math.Round(s)) > 1e-9*math.Max(1, s); s *= 10 {
		dec++
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// formatBytes writes n in GiB, MiB or KiB with three significant digits.
func formatBytes(n int64) string {
	u := unitFor(float64(n))
	v := float64(n) / u.size
	if n < 1<<10 {
		return strconv.FormatInt(n, 10) + " B"
	}
	prec := 2
	switch {
	case v >= 100:
		prec = 0
	case v >= 10:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + u.name
}
