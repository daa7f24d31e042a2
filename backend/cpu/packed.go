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
// bf16 for the bf16 GEMM where the CPU has its AVX512-BF16 kernel, an fp32
// weight for the Go fp32 GEMM (OpenBLAS packs its own operands; weights
// stay dense for it), and a bf16, fp16 or fp8 weight otherwise in its own
// dtype for the Go fp32 GEMM's expanding packers (gemm.Stored: widened to
// float32 panel by panel inside each product), wherever the CPU runs them
// at the fp32 rate (AVX2 + F16C). Only shapes whose packing takes exactly
// the weight's bytes are packed (whole panels of output rows, an even K
// for bf16 pairs: every DiT and T5 Linear), so block sizes, and the
// planner's predictions of them, do not change.

var _ tensor.MatrixPacker = (*Backend)(nil)

// bf16Packer is the bf16 GEMM when it packs weights and computes: under
// compute dtype bf16, with a kernel faster than the fp32 one (a portable
// bf16 kernel is a scalar loop: bf16 weights then take the expanding
// fp32 path, which multiplies the activations unrounded).
func (be *Backend) bf16Packer() (gemm.BF16Packer, bool) {
	p, ok := be.bf16.(gemm.BF16Packer)
	if !ok || be.compute != dtype.BF16 {
		return nil, false
	}
	if g, isGo := p.(*gemm.GoBF16); isGo && g.Kernel() == "portable" && be.expander().Expands(dtype.BF16) {
		return nil, false
	}
	return p, true
}

// expander is the Go fp32 GEMM that multiplies weights kept in a 16- or
// 8-bit dtype: the backend's GEMM when it is the Go one, else the
// process-wide one (OpenBLAS has no such product).
func (be *Backend) expander() *gemm.Go {
	if g, ok := be.gemm.(*gemm.Go); ok {
		return g
	}
	return gemm.DefaultGo()
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
			return p.Layout(), p.PanelWidth()
		}
	case dtype.F32:
		if p, ok := be.f32Packer(); ok {
			return p.Layout(), p.PanelWidth()
		}
		return "", 0
	}
	if g := be.expander(); g.Expands(dt) {
		return g.StoredLayout(dt), g.PanelWidth()
	}
	return "", 0
}

// storedPacked says whether weights of dtype dt are packed for the
// expanding fp32 GEMM (not for the bf16 one, nor fp32 panels).
func (be *Backend) storedPacked(dt dtype.DType) bool {
	if dt == dtype.F32 {
		return false
	}
	_, bf16 := be.bf16Packer()
	return !(dt == dtype.BF16 && bf16) && be.expander().Expands(dt)
}

// packedBytes is the size of an n×k weight of dtype dt packed.
func (be *Backend) packedBytes(dt dtype.DType, n, k int) int64 {
	if be.storedPacked(dt) {
		return int64(be.expander().StoredBytes(dt, n, k))
	}
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

// PackRows packs rows [r0, r0+rows) of a row-major weight (raw, of type
// src, converted to dst's dtype on the way as Cast converts) into dst.
func (be *Backend) PackRows(dst *tensor.Tensor, raw []byte, src dtype.DType, r0 int) error {
	if dst == nil || dst.Rank() != 2 {
		return fmt.Errorf("cpu: pack rows into %v: want a 2-D weight", dst)
	}
	layout, nr := be.layoutOf(dst.DType())
	if layout == "" || dst.Layout() != layout {
		return fmt.Errorf("cpu: pack rows into %v (%s): not a layout this backend packs", dst, dst.Layout())
	}
	n, k := dst.Dim(0), dst.Dim(1)
	rowBytes := max(k*src.Size(), 1)
	rows := len(raw) / rowBytes
	if len(raw)%rowBytes != 0 || r0 < 0 || r0%nr != 0 || r0+rows > n || (rows%nr != 0 && r0+rows != n) {
		return fmt.Errorf("cpu: pack %d bytes as rows from %d of %v: not whole panels of %d rows", len(raw), r0, dst, nr)
	}
	if rows == 0 {
		return nil
	}
	w, done, err := be.rowsAs(raw, src, dst.DType(), rows*k)
	if err != nil {
		return fmt.Errorf("cpu: pack rows of %v: %w", dst, err)
	}
	defer done()
	switch {
	case be.storedPacked(dst.DType()):
		g, dt := be.expander(), dst.DType()
		start := r0 / nr * g.StoredBytes(dt, nr, k)
		_, err = g.PackStored(dst.Raw()[start:start+g.StoredBytes(dt, rows, k)], dt, rows, k, w, k)
	case dst.DType() == dtype.BF16:
		p, _ := be.bf16Packer()
		words := unsafe.Slice((*uint32)(dst.Ptr()), dst.Bytes()/4)
		start := r0 / nr * p.PackedWords(nr, k)
		_, err = p.PackWeights(words[start:start+p.PackedWords(rows, k)], rows, k, unsafe.Slice((*uint16)(unsafe.Pointer(&w[0])), rows*k), k)
	default:
		p, _ := be.f32Packer()
		start := r0 / nr * p.PackedLen(nr, k)
		_, err = p.PackB(dst.F32()[start:start+p.PackedLen(rows, k)], true, rows, k, unsafe.Slice((*float32)(unsafe.Pointer(&w[0])), rows*k), k)
	}
	if err != nil {
		return fmt.Errorf("cpu: pack rows of %v: %w", dst, err)
	}
	return nil
}

var rowsPool sync.Pool

// rowsAs is raw (n elements of type src) as type dt: raw itself when the
// types match, else converted by Cast into pooled scratch that done
// returns.
func (be *Backend) rowsAs(raw []byte, src, dt dtype.DType, n int) ([]byte, func(), error) {
	if src == dt {
		return raw, func() {}, nil
	}
	from, err := tensor.FromBytes(raw, src, n)
	if err != nil {
		return nil, nil, err
	}
	sp, _ := rowsPool.Get().(*[]byte)
	if sp == nil || cap(*sp) < n*dt.Size() {
		b := make([]byte, n*dt.Size())
		sp = &b
	}
	to, err := tensor.FromBytes((*sp)[:n*dt.Size()], dt, n)
	if err == nil {
		err = be.Cast(to, from)
	}
	if err != nil {
		rowsPool.Put(sp)
		return nil, nil, err
	}
	return to.Raw(), func() { rowsPool.Put(sp) }, nil
}

// linearPacked sets d = xs·wᵀ + bias over a weight packed by PackRows
// (made by packedLinear, which checked the layout).
type linearPacked func(d []float32) error

// packedLinear checks that w was packed by this backend and returns the
// product over it for m rows of xs, plus bias (nil: none), which the fp32
// and stored products add as they write each tile of d (WithBias).
func (be *Backend) packedLinear(w *tensor.Tensor, xs, bias []float32, m int) (linearPacked, error) {
	layout, _ := be.layoutOf(w.DType())
	if layout == "" || w.Layout() != layout || w.Rank() != 2 {
		return nil, fmt.Errorf("cpu: linear with weight %v packed as %s: this backend computes %s with %s and %s", w, w.Layout(), be.compute, be.gemm.Name(), be.bf16.Name())
	}
	if w.Ptr() == nil || w.Freed() {
		return nil, fmt.Errorf("cpu: weight %v has no storage", w)
	}
	n, k := w.Dim(0), w.Dim(1)
	if be.storedPacked(w.DType()) {
		g := be.expander()
		sw, err := g.StoredView(w.DType(), w.Raw(), n, k)
		if err == nil {
			sw, err = sw.Scaled(w.Scale()).WithBias(bias)
		}
		if err != nil {
			return nil, fmt.Errorf("cpu: linear: %w", err)
		}
		return func(d []float32) error { return g.SgemmStored(m, xs, k, sw, 0, d, n) }, nil
	}
	if w.Scale() != 1 {
		return nil, fmt.Errorf("cpu: linear with weight %v: a recorded scale on a %s weight (only fp8 weights keep one)", w, w.DType())
	}
	if w.DType() == dtype.BF16 {
		p, _ := be.bf16Packer()
		pw, err := p.PackedView(unsafe.Slice((*uint32)(w.Ptr()), w.Bytes()/4), n, k)
		if err != nil {
			return nil, fmt.Errorf("cpu: linear: %w", err)
		}
		return func(d []float32) error {
			// The bf16 products have no bias of their own: fill, add onto it.
			beta := float32(0)
			if bias != nil {
				be.fillRows(d, bias, m)
				beta = 1
			}
			return p.GemmBF16Packed(m, xs, k, pw, beta, d, n)
		}, nil
	}
	p, _ := be.f32Packer()
	pw, err := p.PackedView(w.F32(), n, k)
	if err == nil {
		pw, err = pw.WithBias(bias)
	}
	if err != nil {
		return nil, fmt.Errorf("cpu: linear: %w", err)
	}
	return func(d []float32) error { return p.SgemmPacked(false, m, 1, xs, k, pw, 0, d, n) }, nil
}
