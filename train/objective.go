package train

import (
	"fmt"
	"math"
	"strings"
)

// SigmaSampling chooses how the noise level σ of every sample is drawn.
type SigmaSampling uint8

// The σ distributions, as musubi-tuner names them.
const (
	// Uniform draws σ ~ U(0, 1).
	Uniform SigmaSampling = iota
	// LogitNormal draws σ = sigmoid(n), n ~ N(0, 1): more weight on the
	// middle noise levels.
	LogitNormal
	// Shift draws σ = sigmoid(n) and then shifts it as the inference
	// schedule does, σ·s/(1+(s−1)·σ): more weight on high noise for s > 1.
	Shift
)

var samplingNames = [...]string{"uniform", "logit-normal", "shift"}

func (s SigmaSampling) String() string {
	if int(s) < len(samplingNames) {
		return samplingNames[s]
	}
	return fmt.Sprintf("sampling(%d)", s)
}

// ParseSigmaSampling reads a --timestep-sampling value.
func ParseSigmaSampling(s string) (SigmaSampling, error) {
	for i, n := range samplingNames {
		if strings.EqualFold(s, n) {
			return SigmaSampling(i), nil
		}
	}
	return 0, fmt.Errorf("timestep sampling %q: use %s", s, strings.Join(samplingNames[:], ", "))
}

// Timesteps draws σ for each sample.
type Timesteps struct {
	Sampling SigmaSampling
	// FlowShift is s of the Shift sampling (discrete_flow_shift); it must
	// be > 0 there and is ignored otherwise.
	FlowShift float64
}

// Check says what is wrong with t.
func (t Timesteps) Check() error {
	if t.Sampling > Shift {
		return fmt.Errorf("unknown timestep sampling %d", t.Sampling)
	}
	if t.Sampling == Shift && !(t.FlowShift > 0) {
		return fmt.Errorf("discrete flow shift must be > 0, got %g", t.FlowShift)
	}
	return nil
}

// Sigma draws one σ in [0, 1] from rng, as float32 (the dtype the model
// sees).
func (t Timesteps) Sigma(rng *RNG) float32 {
	switch t.Sampling {
	case LogitNormal:
		return float32(sigmoid(rng.Norm()))
	case Shift:
		s := sigmoid(rng.Norm())
		return float32(s * t.FlowShift / (1 + (t.FlowShift-1)*s))
	default:
		return float32(rng.Float64())
	}
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// TimestepOf is the timestep the transformer is given for σ: σ·1000 in
// float32, as the reference multiplies its float32 sigmas.
func TimestepOf(sigma float32) float32 { return sigma * float32(1000) }

// Noise mixes clean latents x0 and noise eps, both laid out as samples of
// perSample values, into the model input x_t = (1−σ)·x0 + σ·ε (σ one per
// sample) and the target ε − x0, in float32 as the reference computes them.
func Noise(x0, eps, sigmas []float32, perSample int) (xt, target []float32, err error) {
	if len(x0) != len(eps) || perSample <= 0 || len(x0) != perSample*len(sigmas) {
		return nil, nil, fmt.Errorf("noise: %d latents, %d noise values, %d sigmas of %d values each do not match",
			len(x0), len(eps), len(sigmas), perSample)
	}
	xt, target = make([]float32, len(x0)), make([]float32, len(x0))
	for b, s := range sigmas {
		keep := 1 - s
		for i := b * perSample; i < (b+1)*perSample; i++ {
			// The conversions keep each product rounded to float32
			// before the sum, as the reference does (no fused multiply-add).
			xt[i] = float32(keep*x0[i]) + float32(s*eps[i])
			target[i] = eps[i] - x0[i]
		}
	}
	return xt, target, nil
}

// MSE is the mean squared error of pred against target over every element
// and its gradient with respect to pred, dpred = 2(pred−target)/N. The sum
// is taken in float64, so the float32 loss is the exact mean rounded once.
func MSE(pred, target []float32) (loss float32, dpred []float32, err error) {
	if len(pred) != len(target) || len(pred) == 0 {
		return 0, nil, fmt.Errorf("loss: %d predictions for %d targets", len(pred), len(target))
	}
	n := float32(len(pred))
	dpred = make([]float32, len(pred))
	var sum float64
	for i, p := range pred {
		d := p - target[i]
		sum += float64(d) * float64(d)
		dpred[i] = 2 * d / n
	}
	return float32(sum / float64(len(pred))), dpred, nil
}
