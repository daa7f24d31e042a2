package cpu

import (
	"fmt"
	"unsafe"

	"ferry/dtype"
	"ferry/tensor"
)

// ScaleWeight applies a scaled checkpoint's per-tensor weight scale
// (tensor.WeightScaler). An fp8 weight keeps its stored values and records
// s, which Linear passes to the GEMM (the products are multiplied by it,
// not the weights rounded); a wider one has s folded into its values, in
// any layout (packing only moves elements).
func (be *Backend) ScaleWeight(t *tensor.Tensor, s float32) error {
	if t == nil || t.Ptr() == nil {
		return fmt.Errorf("cpu: scale weight %v: no storage", t)
	}
	raw := t.Raw()
	switch t.DType() {
	case dtype.F8E4M3, dtype.F8E5M2:
		t.SetScale(s)
	case dtype.F32:
		v := unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4)
		be.pool.For(len(v), grainStream, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v[i] *= s
			}
		})
	case dtype.BF16, dtype.F16:
		v := unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)
		to, from := dtype.F32ToBF16, dtype.BF16ToF32
		if t.DType() == dtype.F16 {
			to, from = dtype.F32ToF16, dtype.F16ToF32
		}
		be.pool.For(len(v), grainStream, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v[i] = to(from(v[i]) * s)
			}
		})
	default:
		return fmt.Errorf("cpu: scale weight %v: a %s weight cannot be scaled", t, t.DType())
	}
	return nil
}
