package cpu

import "ferry/tensor"

// AttentionLSE: see tensor.Backend.
func (be *Backend) AttentionLSE(dst, lse, q, k, v *tensor.Tensor, scale float32) error {
	return errNoBackward
}

// AttentionBackward: see tensor.Backend.
func (be *Backend) AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse *tensor.Tensor, scale float32) error {
	return errNoBackward
}
