package cpu

import (
	"fmt"
	"sync"
	"unsafe"

	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// GEMM weights packed at upload (tensor.MatrixPacker). A weight is packed
// into its GEMM's panel layout when the executor moves it to the device,
// so that no product packs it again: a bf16 weight under compute dtype
// bf16 for the bf16 GEMM, an fp32 weight for the Go fp32 GEMM (OpenBLAS
// packs its own operands; weights stay dense for it). Only shapes whose
// packing takes exactly the weight's bytes are packed (whole panels of
// output rows, an even K for bf16: every DiT and T5 Linear), so block
// sizes, and the planner's predictions of them, do not change.

var _ tensor.MatrixPacker = (*Backend)(nil)

// bf16Packer is the bf16 GEMM when it packs weights and computes.
func (be *Backend) bf16Packer() (gemm.BF16Packer, bool) {
	p, ok := be.bf16.(gemm.BF16Packer)
	return p, ok && be.compute == dtype.BF16
}

// f32Packer is the fp32 GEMM when it packs weights.
func (be *Backend) f32Packer() (gemm.PanelPacker, bool) {
	p, ok := be.gemm.(gemm.PanelPacker)
	return p, ok
}

// layoutOf names the packed layout this backend gives weights of dtype dt
// ("" when it packs none) and the rows per panel.
func (be *Backend) layoutOf(dt dtype.DType) (string, int) {
	switch dt {
	case dtype.BF16:
		if p, ok := be.bf16Packer(); ok {
			return fmt.Sprintf("bf16-panels/%s/%d", p.Kernel(), p.PanelWidth()), p.PanelWidth()
		}
	case dtype.F32:
		if p, ok := be.f32Packer(); ok {
			return fmt.Sprintf("f32-panels/%s/%d", p.Kernel(), p.PanelWidth()), p.PanelWidth()
		}
	}
	return "", 0
}

// packedBytes is the size of an n×k weight of dtype dt packed.
func (be *Backend) packedBytes(dt dtype.DType, n, k int) int64 {
	if dt == dtype.BF16 {
		p, _ := be.bf16Packer()
		return 4 * int64(p.PackedWords(n, k))
	}
	p, _ := be.f32Packer()
	return 4 * int64(p.PackedLen(n, k))
}

// PackedLayout reports the layout of an n×k weight of dtype dt (see
// tensor.MatrixPacker).
func (be *Backend) PackedLayout(dt dtype.DType, n, k int) (string, int, bool) {
	layout, group := be.layoutOf(dt)
	if layout == "" || n <= 0 || k <= 0 || be.packedBytes(dt, n, k) != int64(n)*int64(k)*int64(dt.Size()) {
		return "", 0, false
	}
	return layout, group, true
}

var bf16RowsPool, f32RowsPool sync.Pool

// PackRows packs rows [r0, r0+rows) of a row-major weight (raw, of type
// src: BF16 or F32, converted to dst's dtype on the way) into dst.
func (be *Backend) PackRows(dst *tensor.Tensor, raw []byte, src dtype.DType, r0 int) error {
	if dst == nil || dst.Rank() != 2 {
		return fmt.Errorf("cpu: pack rows into %v: want a 2-D weight", dst)
	}
	layout, nr := be.layoutOf(dst.DType())
	if layout == "" || dst.Layout() != layout {
		return fmt.Errorf("cpu: pack rows into %v (%s): not a layout this backend packs", dst, dst.Layout())
	}
	if src != dtype.BF16 && src != dtype.F32 {
		return fmt.Errorf("cpu: pack rows of %s: want BF16 or F32", src)
	}
	n, k := dst.Dim(0), dst.Dim(1)
	rowBytes := k * src.Size()
	rows := len(raw) / rowBytes
	if len(raw)%rowBytes != 0 || r0 < 0 || r0%nr != 0 || r0+rows > n || (rows%nr != 0 && r0+rows != n) {
		return fmt.Errorf("cpu: pack %d bytes as rows from %d of %v: not whole panels of %d rows", len(raw), r0, dst, nr)
	}
	if rows == 0 {
		return nil
	}
	var err error
	if dst.DType() == dtype.BF16 {
		p, _ := be.bf16Packer()
		w, done := be.bf16Rows(raw, src)
		defer done()
		words := unsafe.Slice((*uint32)(dst.Ptr()), dst.Bytes()/4)
		start := r0 / nr * p.PackedWords(nr, k)
		_, err = p.PackWeights(words[start:start+p.PackedWords(rows, k)], rows, k, w, k)
	} else {
		p, _ := be.f32Packer()
		w, done := be.f32Rows(raw, src)
		defer done()
		floats := dst.F32()
		start := r0 / nr * p.PackedLen(nr, k)
		_, err = p.PackB(floats[start:start+p.PackedLen(rows, k)], true, rows, k, w, k)
	}
	if err != nil {
		return fmt.Errorf("cpu: pack rows of %v: %w", dst, err)
	}
	return nil
}

// bf16Rows is raw as bf16 values: itself, or F32 rounded into scratch that
// done returns.
func (be *Backend) bf16Rows(raw []byte, src dtype.DType) ([]uint16, func()) {
	if src == dtype.BF16 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2), func() {}
	}
	f := unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4)
	sp, _ := bf16RowsPool.Get().(*[]uint16)
	if sp == nil || cap(*sp) < len(f) {
		s := make([]uint16, len(f))
		sp = &s
	}
	w := (*sp)[:len(f)]
	be.pool.For(len(w), grainStream, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			w[i] = dtype.F32ToBF16(f[i])
		}
	})
	return w, func() { bf16RowsPool.Put(sp) }
}

// f32Rows is raw as float32 values: itself, or BF16 widened into scratch
// that done returns.
func (be *Backend) f32Rows(raw []byte, src dtype.DType) ([]float32, func()) {
	if src == dtype.F32 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4), func() {}
	}
	h := unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)
	sp, _ := f32RowsPool.Get().(*[]float32)
	if sp == nil || cap(*sp) < len(h) {
		s := make([]float32, len(h))
		sp = &s
	}
	w := (*sp)[:len(h)]
	be.pool.For(len(w), grainStream, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			w[i] = dtype.BF16ToF32(h[i])
		}
	})
	return w, func() { f32RowsPool.Put(sp) }
}

// linearPacked computes d = xs·wᵀ + beta·d over a weight packed by
// PackRows (made by packedLinear, which checked the layout).
type linearPacked func(d []float32, beta float32) error

// packedLinear checks that w was packed by this backend and returns the
// product over it for m rows of xs.
func (be *Backend) packedLinear(w *tensor.Tensor, xs []float32, m int) (linearPacked, error) {
	layout, _ := be.layoutOf(w.DType())
	if layout == "" || w.Layout() != layout || w.Rank() != 2 {
		return nil, fmt.Errorf("cpu: linear with weight %v packed as %s: this backend computes %s with %s and %s", w, w.Layout(), be.compute, be.gemm.Name(), be.bf16.Name())
	}
	if w.Ptr() == nil || w.Freed() {
		return nil, fmt.Errorf("cpu: weight %v has no storage", w)
	}
	n, k := w.Dim(0), w.Dim(1)
	if w.DType() == dtype.BF16 {
		p, _ := be.bf16Packer()
		pw, err := p.PackedView(unsafe.Slice((*uint32)(w.Ptr()), w.Bytes()/4), n, k)
		if err != nil {
			return nil, fmt.Errorf("cpu: linear: %w", err)
		}
		return func(d []float32, beta float32) error { return p.GemmBF16Packed(m, xs, k, pw, beta, d, n) }, nil
	}
	p, _ := be.f32Packer()
	pw, err := p.PackedView(w.F32(), n, k)
	if err != nil {
		return nil, fmt.Errorf("cpu: linear: %w", err)
	}
	return func(d []float32, beta float32) error { return p.SgemmPacked(false, m, 1, xs, k, pw, beta, d, n) }, nil
}
