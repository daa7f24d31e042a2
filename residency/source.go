package residency

import (
	"fmt"

	"ferry/checkpoint"
	"ferry/dtype"
)

// TensorInfo describes a stored tensor.
type TensorInfo struct {
	DType dtype.DType
	Shape []int
	Size  int64 // bytes
	// Scale multiplies the stored values (a scaled fp8 checkpoint's
	// scale_weight); 0 means 1.
	Scale float32
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

// CheckpointSource adapts a checkpoint.Set (one safetensors file or a
// sharded set) to a Source.
type CheckpointSource struct{ Set *checkpoint.Set }

// SourceOf returns set as a Source.
func SourceOf(set *checkpoint.Set) Source { return CheckpointSource{Set: set} }

// Info implements Source.
func (s CheckpointSource) Info(name string) (TensorInfo, bool) {
	t, ok := s.Set.Lookup(name)
	if !ok {
		return TensorInfo{}, false
	}
	return TensorInfo{DType: t.DType, Shape: t.Shape, Size: t.Size, Scale: s.Set.Scale(name)}, true
}

// Read implements Source.
func (s CheckpointSource) Read(name string, off int64, dst []byte) error {
	t, ok := s.Set.Lookup(name)
	if !ok {
		return fmt.Errorf("%s: no tensor %q", s.Set.Path(), name)
	}
	return s.Set.ReadRange(t, off, dst)
}

// Drop implements Source.
func (s CheckpointSource) Drop(name string) {
	if t, ok := s.Set.Lookup(name); ok {
		_ = s.Set.DropCache(t) // advisory: a failed drop only costs page cache
	}
}
