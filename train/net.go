package train

import "fmt"

// Net is the model as the trainer sees it: trainable parameters held as
// host float32 master copies, a forward pass that keeps what its backward
// needs, and a backward that accumulates gradients until they are taken.
type Net interface {
	// Params are the trainable parameters in a fixed order; the trainer
	// updates their Data in place and then calls Sync.
	Params() []*Param
	// Sync copies the parameters' values to where the model computes
	// with them.
	Sync() error
	// Forward predicts from the model input xt (shape shape, float32 on
	// the host), one timestep per sample and the text context (shape
	// ctxShape), keeping what Backward needs.
	Forward(xt []float32, shape []int, timesteps []float32, context []float32, ctxShape []int) ([]float32, error)
	// Backward takes the gradient of the loss with respect to the last
	// Forward's prediction and adds the parameters' gradients to those
	// accumulated since the last TakeGrads.
	Backward(dpred []float32) error
	// TakeGrads writes the accumulated gradients into dst (one slice per
	// parameter, in Params' order) and starts a new accumulation at zero.
	TakeGrads(dst [][]float32) error
}

// Batch is one micro-batch on the host.
type Batch struct {
	// Latents are the clean latents x0, [B, C, F, H, W].
	Latents     []float32
	LatentShape []int
	// Context is the text encoder's hidden states, [B, L, D].
	Context      []float32
	ContextShape []int
	// Noise and Sigmas, when set, fix ε (like Latents) and σ (one per
	// sample) instead of drawing them: a fixed batch.
	Noise  []float32
	Sigmas []float32
}

// Samples is the batch size B.
func (b *Batch) Samples() int {
	if len(b.LatentShape) == 0 {
		return 0
	}
	return b.LatentShape[0]
}

// Check says what is wrong with b's shapes.
func (b *Batch) Check() error {
	n := b.Samples()
	switch {
	case len(b.LatentShape) != 5 || n <= 0 || numElems(b.LatentShape) != len(b.Latents):
		return fmt.Errorf("latents %v (%d values): want [B, C, F, H, W]", b.LatentShape, len(b.Latents))
	case len(b.ContextShape) != 3 || b.ContextShape[0] != n || numElems(b.ContextShape) != len(b.Context):
		return fmt.Errorf("text context %v (%d values): want [%d, L, D]", b.ContextShape, len(b.Context), n)
	case b.Noise != nil && len(b.Noise) != len(b.Latents):
		return fmt.Errorf("noise has %d values, latents %d", len(b.Noise), len(b.Latents))
	case b.Sigmas != nil && len(b.Sigmas) != n:
		return fmt.Errorf("%d sigmas for %d samples", len(b.Sigmas), n)
	}
	for _, s := range b.Sigmas {
		if !(s >= 0 && s <= 1) {
			return fmt.Errorf("sigma %g is outside [0, 1]", s)
		}
	}
	return nil
}

func numElems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Position is where in the data the next micro-batch comes from: batch
// Index of epoch Epoch's order.
type Position struct {
	Epoch int `json:"epoch"`
	Index int `json:"index"`
}

// Data yields micro-batches in an order that depends only on its seed and
// position, so a resumed run sees the batches an uninterrupted one would.
type Data interface {
	Next() (*Batch, error)
	Position() Position
	Seek(Position) error
}

// FixedData yields the same batch every time (--fixed-batch).
type FixedData struct{ B *Batch }

// Next returns the batch.
func (f FixedData) Next() (*Batch, error) { return f.B, nil }

// Position is always the start: every position holds the same batch.
func (f FixedData) Position() Position { return Position{} }

// Seek does nothing.
func (f FixedData) Seek(Position) error { return nil }
