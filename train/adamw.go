package train

import (
	"fmt"
	"math"

	"ferry/tensor"
)

// AdamConfig is AdamW's hyperparameters (torch.optim.AdamW's names).
type AdamConfig struct {
	LR           float64
	Beta1, Beta2 float64
	Eps          float64
	WeightDecay  float64
}

// DefaultAdam is torch.optim.AdamW's defaults apart from the learning rate.
func DefaultAdam(lr float64) AdamConfig {
	return AdamConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
}

// Check says what is wrong with c.
func (c AdamConfig) Check() error {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("learning rate must be >= 0, got %g", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1) || !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("betas must be in [0, 1), got %g,%g", c.Beta1, c.Beta2)
	case !(c.Eps >= 0):
		return fmt.Errorf("adam eps must be >= 0, got %g", c.Eps)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("weight decay must be >= 0, got %g", c.WeightDecay)
	}
	return nil
}

// AdamW is torch.optim.AdamW (the single-tensor CPU path) on host float32
// slices: for each step t, p ← p·(1−lr·wd); m ← m + (1−β1)(g−m);
// v ← β2·v + (1−β2)·g²; p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + eps).
// Scalars are computed in float64 and used as float32, elementwise work is
// float32, in the reference's order, so results match it to the last bit
// or nearly.
//
// The moments live on the host beside the master weights: the device only
// ever holds the weights it computes with and their gradients.
type AdamW struct {
	Config AdamConfig
	// Steps is the number of updates done (t of the last update).
	Steps int64
	// M and V are the first and second moments, one slice per parameter.
	M, V [][]float32
}

// NewAdamW makes an optimizer with zero moments for params.
func NewAdamW(c AdamConfig, params []*Param) *AdamW {
	return &AdamW{Config: c, M: zeroLike(params), V: zeroLike(params)}
}

// Step updates params in place from grads (one per parameter, same order
// as given to NewAdamW).
func (o *AdamW) Step(params []*Param, grads [][]float32) error {
	if err := checkGrads(params, grads); err != nil {
		return fmt.Errorf("adamw: %w", err)
	}
	if len(o.M) != len(params) {
		return fmt.Errorf("adamw: state for %d parameters, given %d", len(o.M), len(params))
	}
	o.Steps++
	c, t := o.Config, float64(o.Steps)
	decay := float32(1 - c.LR*c.WeightDecay)
	w1, b2, w2 := float32(1-c.Beta1), float32(c.Beta2), float32(1-c.Beta2)
	stepSize := float32(-c.LR / (1 - math.Pow(c.Beta1, t)))
	bc2Sqrt := float32(math.Sqrt(1 - math.Pow(c.Beta2, t)))
	eps := float32(c.Eps)
	for i, p := range params {
		m, v, g := o.M[i], o.V[i], grads[i]
		if len(m) != len(p.Data) {
			return fmt.Errorf("adamw: state of %s has %d values, want %d", p.Name, len(m), len(p.Data))
		}
		for j, gj := range g {
			w := p.Data[j]
			if c.WeightDecay != 0 {
				w *= decay
			}
			m[j] = lerp(m[j], gj, w1)
			v[j] = float32(v[j]*b2) + float32(float32(w2*gj)*gj)
			denom := float32(sqrt32(v[j])/bc2Sqrt) + eps
			p.Data[j] = w + float32(stepSize*m[j])/denom
		}
	}
	return nil
}

// lerp is torch.lerp's float32 formula, which depends on which end the
// weight is nearer to.
func lerp(a, b, w float32) float32 {
	if w < 0.5 {
		return a + float32(w*(b-a))
	}
	return b - float32(float32(b-a)*(1-w))
}

// sqrt32 is a correctly rounded float32 square root (the float64 root of
// a float32 rounds to the float32 root exactly).
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// EMA is an exponential moving average of the parameters: it starts at
// their initial values and after every optimizer step becomes
// decay·ema + (1−decay)·w. It lives on the host (W) or, made by
// NewDeviceEMA, as device tensors (ema_device.go).
type EMA struct {
	Decay float64
	// W holds the averages, one slice per parameter (on the host tier;
	// with a device EMA, what Values last downloaded).
	W [][]float32

	ops *tensor.Ops
	dev []*tensor.Tensor
}

// NewEMA starts an average at the parameters' current values.
func NewEMA(decay float64, params []*Param) *EMA {
	return &EMA{Decay: decay, W: copyData(params)}
}

// Update folds the parameters' current values into the average.
func (e *EMA) Update(params []*Param) error {
	if e.dev != nil {
		return e.updateDevice(params)
	}
	if len(e.W) != len(params) {
		return fmt.Errorf("ema: state for %d parameters, given %d", len(e.W), len(params))
	}
	d, rest := float32(e.Decay), float32(1-e.Decay)
	for i, p := range params {
		w := e.W[i]
		if len(w) != len(p.Data) {
			return fmt.Errorf("ema: state of %s has %d values, want %d", p.Name, len(w), len(p.Data))
		}
		for j, x := range p.Data {
			w[j] = float32(d*w[j]) + float32(rest*x)
		}
	}
	return nil
}
