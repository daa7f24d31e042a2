package sampler

import (
	"fmt"
	"math"
)

// precision says in which float type a numpy expression is evaluated: a
// float64 array (np.linspace output, Python floats) or a float32 array (the
// custom sigmas diffusers casts with .astype(np.float32)). Python scalars
// mixed into a float32 array expression are cast to float32 first (numpy
// 1.24's value-based casting, the reference's, as numpy 2's weak scalars),
// and each operation rounds to float32; a numpy float32 scalar with a
// Python float is float64 under numpy 1.24 (stretchToTerminal). Basic
// operations done in float64 and rounded to float32 give the correctly
// rounded float32 result, so the emulation is exact.
type precision bool

const (
	f64 precision = false
	f32 precision = true
)

// round rounds x to the working precision.
func (p precision) round(x float64) float64 {
	if p == f32 {
		return float64(float32(x))
	}
	return x
}

// r32 rounds to float32, the result of one torch float32 tensor operation.
func r32(x float64) float64 { return float64(float32(x)) }

// linspace is np.linspace(start, stop, num) in float64: start + i*step with
// the last point set to stop exactly, as numpy computes it.
func linspace(start, stop float64, num int) []float64 {
	out := make([]float64, num)
	if num == 1 {
		out[0] = start
		return out
	}
	step := (stop - start) / float64(num-1)
	for i := range out {
		out[i] = float64(float64(i)*step) + start
	}
	out[num-1] = stop
	return out
}

// staticShift applies shift*s / (1 + (shift-1)*s) element-wise, the
// resolution-independent flow shift.
func staticShift(sigmas []float64, shift float64, p precision) {
	sh := p.round(shift)
	shm1 := p.round(shift - 1)
	for i, s := range sigmas {
		num := p.round(sh * s)
		den := p.round(1 + p.round(shm1*s))
		sigmas[i] = p.round(num / den)
	}
}

// timeShift is diffusers' time_shift(mu, 1.0, t): exponential
// exp(mu) / (exp(mu) + (1/t - 1)) or linear mu / (mu + (1/t - 1)).
func timeShift(sigmas []float64, mu float64, kind string, p precision) error {
	var c float64
	switch kind {
	case "exponential":
		c = math.Exp(mu)
	case "linear":
		c = mu
	default:
		return fmt.Errorf("sampler: time_shift_type %q is not supported (exponential, linear)", kind)
	}
	c = p.round(c)
	for i, t := range sigmas {
		q := p.round(p.round(1/t) - 1) // (1/t - 1) ** 1.0 is exact
		sigmas[i] = p.round(c / p.round(c+q))
	}
	return nil
}

// stretchToTerminal is diffusers' stretch_shift_to_terminal: rescales 1-t so
// the schedule ends at the terminal value.
func stretchToTerminal(sigmas []float64, terminal float64, p precision) {
	if len(sigmas) == 0 {
		return
	}
	last := p.round(1 - sigmas[len(sigmas)-1])
	// one_minus_z[-1] / (1 - shift_terminal): a numpy scalar over a
	// Python float, float64 under numpy 1.24; the array expression below
	// then casts it to the array's type.
	scale := p.round(last / (1 - terminal))
	for i, t := range sigmas {
		oneMinus := p.round(1 - t)
		sigmas[i] = p.round(1 - p.round(oneMinus/scale))
	}
}

// toFloat32 rounds a float64 schedule to float32, as torch.from_numpy(...)
// .to(torch.float32) or .astype(np.float32) does.
func toFloat32(xs []float64) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = float32(x)
	}
	return out
}

// checkSigmas rejects custom sigmas a schedule cannot use.
func checkSigmas(sigmas []float64) error {
	for i, s := range sigmas {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("sampler: custom sigma %d is %v", i, s)
		}
	}
	return nil
}
