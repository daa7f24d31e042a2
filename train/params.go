package train

import (
	"fmt"
	"math"

	"ferry/tensor"
)

// Param is one trainable tensor: its name (a checkpoint or LoRA tensor
// name), shape and host float32 master values, which the optimizer
// updates in place.
type Param struct {
	Name  string
	Shape []int
	Data  []float32
}

// NewParam makes a zero parameter of the given shape.
func NewParam(name string, shape ...int) *Param {
	return &Param{Name: name, Shape: append([]int(nil), shape...), Data: make([]float32, tensor.NumElems(shape))}
}

// checkGrads verifies that grads has one gradient of the right length per
// parameter.
func checkGrads(params []*Param, grads [][]float32) error {
	if len(grads) != len(params) {
		return fmt.Errorf("%d gradients for %d parameters", len(grads), len(params))
	}
	for i, p := range params {
		if len(grads[i]) != len(p.Data) {
			return fmt.Errorf("gradient of %s has %d values, want %d", p.Name, len(grads[i]), len(p.Data))
		}
	}
	return nil
}

// zeroLike makes one zero slice per parameter.
func zeroLike(params []*Param) [][]float32 {
	out := make([][]float32, len(params))
	for i, p := range params {
		out[i] = make([]float32, len(p.Data))
	}
	return out
}

// copyData returns copies of the parameters' values.
func copyData(params []*Param) [][]float32 {
	out := make([][]float32, len(params))
	for i, p := range params {
		out[i] = append([]float32(nil), p.Data...)
	}
	return out
}

// GradNorm is the global L2 norm of all gradients together (float64
// accumulation).
func GradNorm(grads [][]float32) float64 {
	var s float64
	for _, g := range grads {
		for _, v := range g {
			s += float64(v) * float64(v)
		}
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales the gradients so that their global norm is at most
// maxNorm, as torch.nn.utils.clip_grad_norm_ does: by
// min(1, maxNorm/(norm+1e-6)). It returns the norm before clipping;
// maxNorm <= 0 only measures.
func ClipGradNorm(grads [][]float32, maxNorm float64) float64 {
	norm := GradNorm(grads)
	if maxNorm <= 0 {
		return norm
	}
	coef := maxNorm / (norm + 1e-6)
	if coef >= 1 {
		return norm
	}
	c := float32(coef)
	for _, g := range grads {
		for i := range g {
			g[i] *= c
		}
	}
	return norm
}

// AverageGrads divides gradients summed over n micro-batches by n, so
// that they are the gradient of the mean loss.
func AverageGrads(grads [][]float32, n int) {
	if n <= 1 {
		return
	}
	d := float32(n)
	for _, g := range grads {
		for i := range g {
			g[i] /= d
		}
	}
}
