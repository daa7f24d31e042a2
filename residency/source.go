package residency

import "ferry/dtype"

// TensorInfo describes a stored tensor.
type TensorInfo struct {
	DType dtype.DType
	Shape []int
	Size  int64 // bytes
}

// Source is where a component's weights are stored: a checkpoint on disk.
type Source interface {
	// Info describes a stored tensor; ok is false when it is absent.
	Info(name string) (info TensorInfo, ok bool)
	// Read fills dst with bytes [off, off+len(dst)) of the tensor's data.
	Read(name string, off int64, dst []byte) error
	// Drop tells the OS the tensor's file pages are no longer needed.
	Drop(name string)
}
