package sampler

import (
	"fmt"
	"math"
)

// The sigma reshapings diffusers' FlowMatchEulerDiscreteScheduler offers
// after the shift (use_karras_sigmas, use_exponential_sigmas,
// use_beta_sigmas). Each keeps the shifted schedule's first and last sigma
// and respaces the steps between them; diffusers computes them in float64
// numpy whatever the precision of the schedule it starts from.

// karrasRho is the rho of Karras et al. (2022), fixed in diffusers.
const karrasRho = 7.0

// betaAlpha and betaBeta are the beta distribution's parameters diffusers
// uses for beta sigmas (its _convert_to_beta defaults).
const betaAlpha, betaBeta = 0.6, 0.6

// respacing is the sigma respacing both schedulers offer
// (use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas): n sigmas
// between a schedule's largest and smallest sigma, or the config's
// sigma_max and sigma_min where it sets them.
type respacing struct {
	karras, exponential, beta bool
	min, max                  *float64
}

func (r respacing) on() bool { return r.karras || r.exponential || r.beta }

// apply returns n sigmas from hi down to lo, respaced.
func (r respacing) apply(hi, lo float64, n int) ([]float64, error) {
	if r.max != nil {
		hi = *r.max
	}
	if r.min != nil {
		lo = *r.min
	}
	switch {
	case r.karras:
		return karrasSigmas(hi, lo, n), nil
	case r.exponential:
		if !(lo > 0) {
			return nil, fmt.Errorf("sampler: use_exponential_sigmas needs a positive last sigma (it takes its log), got %v", lo)
		}
		return exponentialSigmas(hi, lo, n), nil
	}
	return betaSigmas(hi, lo, n), nil
}

func (c FlowMatchEulerConfig) respacing() respacing {
	return respacing{c.UseKarrasSigmas, c.UseExponentialSigmas, c.UseBetaSigmas, c.SigmaMin, c.SigmaMax}
}

func (c UniPCConfig) respacing() respacing {
	return respacing{c.UseKarrasSigmas, c.UseExponentialSigmas, c.UseBetaSigmas, c.SigmaMin, c.SigmaMax}
}

// reshapeSigmas applies the config's respacing, if any, to the shifted
// sigmas (largest first).
func (c FlowMatchEulerConfig) reshapeSigmas(sigmas []float64) ([]float64, error) {
	r := c.respacing()
	if len(sigmas) == 0 || !r.on() {
		return sigmas, nil
	}
	return r.apply(sigmas[0], sigmas[len(sigmas)-1], len(sigmas))
}

// karrasSigmas spaces n sigmas evenly in sigma^(1/rho) from hi to lo.
func karrasSigmas(hi, lo float64, n int) []float64 {
	ramp := linspace(0, 1, n)
	minInv := math.Pow(lo, 1/karrasRho)
	maxInv := math.Pow(hi, 1/karrasRho)
	out := make([]float64, n)
	for i, r := range ramp {
		out[i] = math.Pow(float64(maxInv+float64(r*(minInv-maxInv))), karrasRho)
	}
	return out
}

// exponentialSigmas spaces n sigmas evenly in log sigma from hi to lo.
func exponentialSigmas(hi, lo float64, n int) []float64 {
	out := linspace(math.Log(hi), math.Log(lo), n)
	for i, v := range out {
		out[i] = math.Exp(v)
	}
	return out
}

// betaSigmas places n sigmas between hi and lo at the quantiles of a
// Beta(0.6, 0.6) distribution ("Beta Sampling is All You Need"): more steps
// near both ends of the schedule.
func betaSigmas(hi, lo float64, n int) []float64 {
	out := linspace(0, 1, n)
	for i, v := range out {
		q := betaQuantile(float64(1-v), betaAlpha, betaBeta)
		out[i] = lo + float64(q*(hi-lo))
	}
	return out
}

// betaQuantile is the inverse of the regularized incomplete beta function,
// scipy.stats.beta.ppf(p, a, b), found by bisection to the last float64 the
// function's accuracy allows. p outside [0, 1] gives NaN.
func betaQuantile(p, a, b float64) float64 {
	switch {
	case !(p >= 0 && p <= 1):
		return math.NaN()
	case p == 0:
		return 0
	case p == 1:
		return 1
	}
	lo, hi := 0.0, 1.0
	for range 2000 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if regIncBeta(mid, a, b) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), from
// its continued fraction (modified Lentz), on the side of the symmetry
// I_x(a, b) = 1 - I_{1-x}(b, a) where the fraction converges fast.
func regIncBeta(x, a, b float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	if x > (a+1)/(a+b+2) {
		return 1 - regIncBeta(1-x, b, a)
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(a*math.Log(x) + b*math.Log1p(-x) - (la + lb - lab))
	return front * betaFraction(x, a, b) / a
}

// betaFraction evaluates the continued fraction of I_x(a, b) (Numerical
// Recipes' betacf, with Lentz's method) to float64 precision.
func betaFraction(x, a, b float64) float64 {
	const tiny = 1e-300
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 1000; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d, c = lentzStep(aa, d, c)
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d, c = lentzStep(aa, d, c)
		del := d * c
		h *= del
		if math.Abs(del-1) < 4e-16 {
			break
		}
	}
	return h
}

// lentzStep is one Lentz update of the fraction's D and C by the term aa.
func lentzStep(aa, d, c float64) (float64, float64) {
	const tiny = 1e-300
	d = 1 + aa*d
	if math.Abs(d) < tiny {
		d = tiny
	}
	c = 1 + aa/c
	if math.Abs(c) < tiny {
		c = tiny
	}
	return 1 / d, c
}
