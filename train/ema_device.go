package train

import (
	"fmt"

	"ferry/dtype"
	"ferry/tensor"
)

// The EMA on the device (--ema-tier device): one float32 tensor per
// parameter on ops' device, so its bytes count against the device budget
// (exactly the trainable bytes, which is what keeping it on the host
// frees). The update rule is the host's, elementwise in float32 in the
// same order: ema·decay, then + w·(1−decay) (the parameters' host values
// are uploaded one at a time for it, as the device holds no float32 copy
// of them under bf16 autocast).

// NewDeviceEMA starts an average on ops' device at the parameters' current
// values.
func NewDeviceEMA(decay float64, params []*Param, ops *tensor.Ops) (*EMA, error) {
	e := &EMA{Decay: decay, W: zeroLike(params), ops: ops}
	for _, p := range params {
		e.dev = append(e.dev, ops.Upload(p.Data, p.Shape...))
	}
	if err := ops.Err(); err != nil {
		e.Free()
		return nil, fmt.Errorf("EMA on the device: %w", err)
	}
	return e, nil
}

// OnDevice reports whether the average lives on the device.
func (e *EMA) OnDevice() bool { return e.dev != nil }

// DeviceBytes is the device memory the average takes (0 on the host).
func (e *EMA) DeviceBytes() int64 {
	var n int64
	for _, t := range e.dev {
		n += t.Bytes()
	}
	return n
}

// updateDevice is Update on the device tensors.
func (e *EMA) updateDevice(params []*Param) error {
	if len(e.dev) != len(params) {
		return fmt.Errorf("ema: state for %d parameters, given %d", len(e.dev), len(params))
	}
	ops := e.ops
	d, rest := float32(e.Decay), float32(1-e.Decay)
	for i, p := range params {
		if e.dev[i].Len() != len(p.Data) {
			return fmt.Errorf("ema: state of %s has %d values, want %d", p.Name, e.dev[i].Len(), len(p.Data))
		}
		w := ops.Upload(p.Data, p.Shape...)
		ops.AffineInPlace(w, rest, 0)
		ops.AffineInPlace(e.dev[i], d, 0)
		ops.AddInPlace(e.dev[i], w)
		w.Free()
	}
	if err := ops.Err(); err != nil {
		return fmt.Errorf("ema on the device: %w", err)
	}
	return nil
}

// Values returns the averages on the host (downloaded into W from a
// device EMA).
func (e *EMA) Values() ([][]float32, error) {
	for i, t := range e.dev {
		if err := e.ops.B.Download(e.W[i], t); err != nil {
			return nil, fmt.Errorf("ema: download: %w", err)
		}
	}
	return e.W, nil
}

// load uploads W into a device EMA (after a checkpoint was read into W).
func (e *EMA) load() error {
	for i, t := range e.dev {
		if err := e.ops.B.Upload(t, f32Bytes(e.W[i]), dtype.F32); err != nil {
			return fmt.Errorf("ema: upload: %w", err)
		}
	}
	return nil
}

// Free releases a device EMA's tensors (nothing on the host).
func (e *EMA) Free() {
	if e == nil {
		return
	}
	tensor.Free(e.dev...)
	e.dev = nil
}
