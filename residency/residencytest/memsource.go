// Package residencytest holds what tests and benchmarks of models need to
// run the residency executor without a checkpoint on disk.
package residencytest

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"ferry/dtype"
	"ferry/residency"
)

// MemSource is an in-memory float32 checkpoint: a residency.Source over
// tensors held in Go slices.
type MemSource struct {
	data   map[string][]float32
	shapes map[string][]int
}

// NewMemSource returns an empty source.
func NewMemSource() *MemSource {
	return &MemSource{data: map[string][]float32{}, shapes: map[string][]int{}}
}

// Put stores a tensor (the slice is kept, not copied).
func (s *MemSource) Put(name string, shape []int, data []float32) {
	s.data[name] = data
	s.shapes[name] = slices.Clone(shape)
}

// Get returns a stored tensor's values.
func (s *MemSource) Get(name string) ([]float32, bool) {
	d, ok := s.data[name]
	return d, ok
}

// Delete removes a tensor (to test missing weights).
func (s *MemSource) Delete(name string) {
	delete(s.data, name)
	delete(s.shapes, name)
}

// Info implements residency.Source.
func (s *MemSource) Info(name string) (residency.TensorInfo, bool) {
	d, ok := s.data[name]
	if !ok {
		return residency.TensorInfo{}, false
	}
	return residency.TensorInfo{DType: dtype.F32, Shape: s.shapes[name], Size: int64(4 * len(d))}, true
}

// Read implements residency.Source.
func (s *MemSource) Read(name string, off int64, dst []byte) error {
	d, ok := s.data[name]
	if !ok || off%4 != 0 || len(dst)%4 != 0 || int(off)/4+len(dst)/4 > len(d) {
		return fmt.Errorf("read %s [%d, +%d) out of range", name, off, len(dst))
	}
	for i := range len(dst) / 4 {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(d[int(off)/4+i]))
	}
	return nil
}

// Drop implements residency.Source (nothing to drop).
func (s *MemSource) Drop(string) {}

// Tensors returns every stored tensor by name (the map itself: reference
// implementations in tests read it directly).
func (s *MemSource) Tensors() map[string][]float32 { return s.data }
