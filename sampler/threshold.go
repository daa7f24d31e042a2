package sampler

import (
	"math"
	"slices"
)

// threshold is diffusers' dynamic thresholding (_threshold_sample, Imagen):
// s is the dynamic_thresholding_ratio quantile of |x0|, clamped to
// [1, sample_max_value]; x0 is clamped to [-s, s] and divided by s. The
// whole sample is one batch item, as in Wan's pipelines (diffusers takes
// one quantile per batch item).
func (u *UniPC) threshold(x0 []float32) {
	abs := u.sorted[:len(x0)]
	for j, v := range x0 {
		abs[j] = float32(math.Abs(float64(v)))
	}
	slices.Sort(abs)
	s := quantileSorted(abs, float32(u.cfg.DynamicThresholdingRatio))
	// torch.clamp(s, min=1, max=sample_max_value): the max wins when the
	// bounds cross.
	s = min(max(s, 1), float32(u.cfg.SampleMaxValue))
	for j, v := range x0 {
		x0[j] = min(max(v, -s), s) / s
	}
}

// quantileSorted is torch.quantile's linear interpolation on sorted float32
// values: the rank q*(n-1) in float32, truncated for the value below, its
// ceiling for the value above, and torch.lerp between them by the rank's
// fraction.
func quantileSorted(sorted []float32, q float32) float32 {
	rank := q * float32(len(sorted)-1)
	below := int(rank)
	above := int(float32(math.Ceil(float64(rank))))
	w := rank - float32(below)
	return lerp32(sorted[below], sorted[above], w)
}

// lerp32 is ATen's lerp: start + w*(end-start) for |w| < 0.5, else
// end - (end-start)*(1-w), each operation in float32.
func lerp32(start, end, w float32) float32 {
	if float32(math.Abs(float64(w))) < 0.5 {
		return start + float32(w*(end-start))
	}
	return end - float32((end-start)*(1-w))
}
