// Package bench holds what the benchmarks against PyTorch need on the Go
// side: an in-memory residency.Source of random weights (so a model runs
// with no checkpoint on disk) and a Runner that binds weights kept in
// bf16 on the device. The programs live in bench/block (ferry's Wan block)
// and bench/torch_block.py (the same math in PyTorch), compared by
// bench/compare.sh, and bench/trainblock and bench/torch_train_block.py
// (one training step of the block), compared by bench/compare_train.sh:
// both scripts run the two sides interleaved and print the ratio.
package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"ferry/dtype"
	"ferry/residency"
	"ferry/tensor"
)

// MemorySource is a residency.Source over tensors held in memory, stored
// as BF16 like a diffusers checkpoint.
type MemorySource struct {
	tensors map[string]stored
}

type stored struct {
	info residency.TensorInfo
	data []byte
}

var _ residency.Source = (*MemorySource)(nil)

// RandomSource makes a MemorySource with every parameter of specs filled
// with normal values of standard deviation 1/√fan_in (fan_in is the
// product of every dimension after the first; 1-D parameters get 1 ± 0.1,
// as norm weights would). The seed fixes the values.
func RandomSource(specs []residency.ParamSpec, seed uint64) *MemorySource {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &MemorySource{tensors: map[string]stored{}}
	for _, p := range specs {
		n := tensor.NumElems(p.Shape)
		std, mean := 0.1, 1.0
		if len(p.Shape) > 1 {
			std, mean = 1/math.Sqrt(float64(n/p.Shape[0])), 0
		}
		data := make([]byte, 2*n)
		for i := range n {
			v := float32(mean + std*rng.NormFloat64())
			binary.LittleEndian.PutUint16(data[2*i:], dtype.F32ToBF16(v))
		}
		s.tensors[p.Name] = stored{
			info: residency.TensorInfo{DType: dtype.BF16, Shape: append([]int(nil), p.Shape...), Size: int64(len(data))},
			data: data,
		}
	}
	return s
}

// Info describes a stored tensor.
func (s *MemorySource) Info(name string) (residency.TensorInfo, bool) {
	t, ok := s.tensors[name]
	return t.info, ok
}

// Read copies bytes [off, off+len(dst)) of a tensor's data.
func (s *MemorySource) Read(name string, off int64, dst []byte) error {
	t, ok := s.tensors[name]
	if !ok {
		return fmt.Errorf("bench: tensor %q not in the source", name)
	}
	if off < 0 || off+int64(len(dst)) > int64(len(t.data)) {
		return fmt.Errorf("bench: read [%d, %d) of %q, which has %d bytes", off, off+int64(len(dst)), name, len(t.data))
	}
	copy(dst, t.data[off:])
	return nil
}

// Drop does nothing: there are no file pages to release.
func (s *MemorySource) Drop(string) {}

// Float32 returns a stored tensor widened to float32 (training binds
// dense fp32 weights).
func (s *MemorySource) Float32(name string) ([]float32, error) {
	t, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("bench: no tensor %q", name)
	}
	out := make([]float32, len(t.data)/2)
	for i := range out {
		out[i] = dtype.BF16ToF32(binary.LittleEndian.Uint16(t.data[2*i:]))
	}
	return out, nil
}
