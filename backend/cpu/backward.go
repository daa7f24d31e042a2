package cpu

import (
	"errors"

	"ferry/tensor"
)

// errNoBackward marks a backward kernel not written yet.
var errNoBackward = errors.New("cpu: backward kernel not implemented yet")

// LinearBackward: see tensor.Backend.
func (be *Backend) LinearBackward(dx, dw, db, dy, x, w *tensor.Tensor) error { return errNoBackward }

// LayerNormBackward: see tensor.Backend.
func (be *Backend) LayerNormBackward(dx, dw, db, dy, x, w *tensor.Tensor, eps float32) error {
	return errNoBackward
}

// RMSNormBackward: see tensor.Backend.
func (be *Backend) RMSNormBackward(dx, dw, dy, x, w *tensor.Tensor, eps float32) error {
	return errNoBackward
}

// UnaryBackward: see tensor.Backend.
func (be *Backend) UnaryBackward(dx, dy, x *tensor.Tensor, op tensor.UnaryOp) error {
	return errNoBackward
}

// RopeBackward: see tensor.Backend.
func (be *Backend) RopeBackward(dx, dy, cos, sin *tensor.Tensor) error { return errNoBackward }

// SumTo: see tensor.Backend.
func (be *Backend) SumTo(dst, a *tensor.Tensor) error { return errNoBackward }
