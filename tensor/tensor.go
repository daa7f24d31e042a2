// Package tensor holds the Tensor type (shape, dtype, storage on a device),
// the Device and Backend interfaces that backends implement, and Ops, the
// allocating front end that model code computes with.
//
// Model code never sees where memory comes from: it asks Ops for results and
// frees what it no longer needs. Backends (backend/cpu, later backend/cuda)
// implement the kernels against preallocated outputs.
package tensor

import (
	"fmt"
	"unsafe"

	"ferry/dtype"
)

// Tensor is a dense, row-major (C-contiguous) array on a device.
type Tensor struct {
	shape []int
	dtype dtype.DType
	buf   *Buffer
	off   int64 // byte offset of element 0 inside buf
	view  bool  // a view does not own buf: Free on it does nothing
	// layout names a backend's packed arrangement of a GEMM weight (see
	// MatrixPacker); "" is the dense row-major layout every op reads.
	layout string
	// scale multiplies the values of a weight kept in a storage dtype too
	// narrow to hold them scaled (WeightScaler); 0 means 1.
	scale float32
}

// New wraps an existing buffer. The tensor owns it: Free releases it.
func New(buf *Buffer, dt dtype.DType, shape ...int) (*Tensor, error) {
	n := NumElems(shape)
	if need := int64(n) * int64(dt.Size()); buf == nil || need > buf.Size {
		have := int64(0)
		if buf != nil {
			have = buf.Size
		}
		return nil, fmt.Errorf("tensor %v %s needs %d bytes, buffer has %d", shape, dt, need, have)
	}
	return &Tensor{shape: append([]int(nil), shape...), dtype: dt, buf: buf}, nil
}

// FromF32 makes a float32 tensor on the Go heap holding data (not copied).
// It belongs to no device: use it for inputs and test data.
func FromF32(data []float32, shape ...int) *Tensor {
	if NumElems(shape) != len(data) {
		panic(fmt.Sprintf("tensor.FromF32: %d values for shape %v", len(data), shape))
	}
	var b []byte
	if len(data) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
	}
	return &Tensor{shape: append([]int(nil), shape...), dtype: dtype.F32, buf: HostBuffer(b)}
}

// FromBytes makes a tensor on the Go heap over raw little-endian bytes.
func FromBytes(data []byte, dt dtype.DType, shape ...int) (*Tensor, error) {
	return New(HostBuffer(data), dt, shape...)
}

// Shape returns the dimensions. Do not modify the result.
func (t *Tensor) Shape() []int { return t.shape }

// Dim returns dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// DType is the element type.
func (t *Tensor) DType() dtype.DType { return t.dtype }

// Len is the number of elements.
func (t *Tensor) Len() int { return NumElems(t.shape) }

// Bytes is the size of the data in bytes.
func (t *Tensor) Bytes() int64 { return int64(t.Len()) * int64(t.dtype.Size()) }

// Buffer is the storage (shared by views).
func (t *Tensor) Buffer() *Buffer { return t.buf }

// Device is the device holding the storage, nil for the Go heap.
func (t *Tensor) Device() Device {
	if t.buf == nil {
		return nil
	}
	return t.buf.Device
}

// Ptr is the address of element 0.
func (t *Tensor) Ptr() unsafe.Pointer {
	if t.buf == nil || t.buf.Ptr == nil {
		return nil
	}
	return unsafe.Add(t.buf.Ptr, t.off)
}

// Raw views the data as bytes (host-addressable memory only).
func (t *Tensor) Raw() []byte {
	p := t.Ptr()
	if p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), t.Bytes())
}

// F32 views the data as float32 (host-addressable memory only). It panics
// on another dtype: that is a programming error in the caller.
func (t *Tensor) F32() []float32 {
	if t.dtype != dtype.F32 {
		panic(fmt.Sprintf("tensor.F32 on %s tensor %v", t.dtype, t.shape))
	}
	p := t.Ptr()
	if p == nil {
		return nil
	}
	return unsafe.Slice((*float32)(p), t.Len())
}

// U16 views 2-byte data (BF16, F16) as raw uint16 bits.
func (t *Tensor) U16() []uint16 {
	if t.dtype.Size() != 2 {
		panic(fmt.Sprintf("tensor.U16 on %s tensor %v", t.dtype, t.shape))
	}
	p := t.Ptr()
	if p == nil {
		return nil
	}
	return unsafe.Slice((*uint16)(p), t.Len())
}

// F64 views float64 data.
func (t *Tensor) F64() []float64 {
	if t.dtype != dtype.F64 {
		panic(fmt.Sprintf("tensor.F64 on %s tensor %v", t.dtype, t.shape))
	}
	p := t.Ptr()
	if p == nil {
		return nil
	}
	return unsafe.Slice((*float64)(p), t.Len())
}

// Reshape returns a view with a new shape and the same elements. One
// dimension may be -1 and is inferred. A packed tensor keeps its shape.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	s, err := inferShape(t.Len(), shape)
	if err != nil {
		return nil, fmt.Errorf("reshape %v to %v: %w", t.shape, shape, err)
	}
	if t.layout != "" && !SameShape(s, t.shape) {
		return nil, fmt.Errorf("reshape %v to %v: the tensor is packed (%s)", t.shape, shape, t.layout)
	}
	return &Tensor{shape: s, dtype: t.dtype, buf: t.buf, off: t.off, view: true, layout: t.layout}, nil
}

// Rows returns a view of rows [start, start+n) along dimension 0.
func (t *Tensor) Rows(start, n int) (*Tensor, error) {
	if len(t.shape) == 0 || start < 0 || n < 0 || start+n > t.shape[0] {
		return nil, fmt.Errorf("rows [%d,%d) of %v out of range", start, start+n, t.shape)
	}
	if t.layout != "" {
		return nil, fmt.Errorf("rows of %v: the tensor is packed (%s)", t.shape, t.layout)
	}
	inner := NumElems(t.shape[1:])
	s := append([]int{n}, t.shape[1:]...)
	return &Tensor{shape: s, dtype: t.dtype, buf: t.buf, off: t.off + int64(start*inner*t.dtype.Size()), view: true}, nil
}

// IsView reports whether t borrows another tensor's storage.
func (t *Tensor) IsView() bool { return t.view }

// Free releases the storage unless t is a view. Safe on nil and idempotent.
func (t *Tensor) Free() {
	if t == nil || t.view {
		return
	}
	t.buf.Free()
}

// Freed reports whether the storage has been released.
func (t *Tensor) Freed() bool { return t != nil && t.buf.Freed() }

func (t *Tensor) String() string {
	if t == nil {
		return "<nil tensor>"
	}
	return fmt.Sprintf("%s%v", t.dtype, t.shape)
}

// NumElems multiplies the dimensions (1 for a scalar).
func NumElems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// SameShape reports whether a and b have identical dimensions.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func inferShape(n int, shape []int) ([]int, error) {
	s := append([]int(nil), shape...)
	neg, prod := -1, 1
	for i, d := range s {
		switch {
		case d == -1 && neg < 0:
			neg = i
		case d < 0:
			return nil, fmt.Errorf("bad dimension %d", d)
		default:
			prod *= d
		}
	}
	if neg >= 0 {
		if prod == 0 || n%prod != 0 {
			return nil, fmt.Errorf("cannot infer -1 for %d elements", n)
		}
		s[neg] = n / prod
		prod *= s[neg]
	}
	if prod != n {
		return nil, fmt.Errorf("%d elements do not fit", n)
	}
	return s, nil
}

// BroadcastShape returns the numpy broadcast of a and b.
func BroadcastShape(a, b []int) ([]int, error) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// View makes a non-owning tensor over buf starting off bytes in. Freeing a
// view does nothing; the buffer's owner frees it.
func View(buf *Buffer, off int64, dt dtype.DType, shape ...int) (*Tensor, error) {
	need := int64(NumElems(shape)) * int64(dt.Size())
	if buf == nil || off < 0 || off+need > buf.Size {
		return nil, fmt.Errorf("view %s%v at offset %d does not fit the buffer", dt, shape, off)
	}
	return &Tensor{shape: append([]int(nil), shape...), dtype: dt, buf: buf, off: off, view: true}, nil
}

// Layout is "" for the dense row-major layout, else the name of the
// packed arrangement a backend gave this GEMM weight (see MatrixPacker).
func (t *Tensor) Layout() string { return t.layout }

// Scale is the factor a weight's stored values are multiplied by (1 unless
// a WeightScaler recorded one).
func (t *Tensor) Scale() float32 {
	if t.scale == 0 {
		return 1
	}
	return t.scale
}

// SetScale records the factor t's stored values are multiplied by: for
// backends (WeightScaler), whose products apply it.
func (t *Tensor) SetScale(s float32) { t.scale = s }

// PackedView is View for a weight the backend packed as layout; it takes
// the same bytes as the dense tensor (backends pack only such shapes).
func PackedView(buf *Buffer, off int64, dt dtype.DType, layout string, shape ...int) (*Tensor, error) {
	t, err := View(buf, off, dt, shape...)
	if err != nil {
		return nil, err
	}
	t.layout = layout
	return t, nil
}

// SetShape changes t's own shape in place (same element count), keeping
// ownership: use it instead of Reshape when the result replaces t.
func (t *Tensor) SetShape(shape ...int) error {
	s, err := inferShape(t.Len(), shape)
	if err != nil {
		return fmt.Errorf("reshape %v to %v: %w", t.shape, shape, err)
	}
	if t.layout != "" && !SameShape(s, t.shape) {
		return fmt.Errorf("reshape %v to %v: the tensor is packed (%s)", t.shape, shape, t.layout)
	}
	t.shape = s
	return nil
}
