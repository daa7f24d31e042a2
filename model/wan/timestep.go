package wan

import "math"

// timestepEmbedding is diffusers' get_timestep_embedding as Wan's
// Timesteps(freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0) calls
// it: for each timestep t, [cos(t·f_i), sin(t·f_i)] over i < dim/2 with
// f_i = exp(−ln(10000)·i/(dim/2)), zero-padded when dim is odd. Returns
// [len(ts), dim] row-major.
//
// The reference computes in float32 step by step; each step is rounded to
// float32 here in the same order (the transcendental functions are
// evaluated in float64 and rounded once, within an ulp of PyTorch's).
func timestepEmbedding(ts []float32, dim int) []float32 {
	half := dim / 2
	// -math.log(max_period) is a Python float; multiplied into a float32
	// arange it is rounded to float32 first.
	negLog := float32(-math.Log(10000))
	freqs := make([]float32, half)
	for i := range freqs {
		e := negLog * float32(i)
		e /= float32(half) // half_dim - downscale_freq_shift, with shift 0
		freqs[i] = float32(math.Exp(float64(e)))
	}
	out := make([]float32, len(ts)*dim)
	for b, t := range ts {
		row := out[b*dim : (b+1)*dim]
		for i, f := range freqs {
			arg := float64(float32(t * f)) // the float32 product, as the reference
			// flip_sin_to_cos puts the cosines first.
			row[i] = float32(math.Cos(arg))
			row[half+i] = float32(math.Sin(arg))
		}
	}
	return out
}
