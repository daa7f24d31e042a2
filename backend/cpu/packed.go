package cpu

import (
	"fmt"
	"sync"
	"unsafe"

	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// GEMM weights packed at upload (tensor.MatrixPacker). With compute dtype
// bf16, a bf16 weight is packed into the bf16 kernel's panel layout when
// the executor moves it to the device, so that no product transposes it
// again. Only shapes whose packing takes exactly the weight's bytes are
// packed (whole panels of output rows, an even K: every DiT and T5 Linear),
// so block sizes, and the planner's predictions of them, do not change.

var _ tensor.MatrixPacker = (*Backend)(nil)

// packer is the bf16 GEMM when it can pack weights.
func (be *Backend) packer() (gemm.BF16Packer, bool) {
	p, ok := be.bf16.(gemm.BF16Packer)
	return p, ok && be.compute == dtype.BF16
}

// packedLayout names the layout of p's packing.
func packedLayout(p gemm.BF16Packer) string {
	return fmt.Sprintf("bf16-panels/%s/%d", p.Kernel(), p.PanelWidth())
}

// PackedLayout reports the layout of a bf16 n×k weight under compute dtype
// bf16 (see tensor.MatrixPacker).
func (be *Backend) PackedLayout(dt dtype.DType, n, k int) (string, int, bool) {
	p, ok := be.packer()
	if !ok || dt != dtype.BF16 || n <= 0 || k <= 0 || 4*int64(p.PackedWords(n, k)) != 2*int64(n)*int64(k) {
		return "", 0, false
	}
	return packedLayout(p), p.PanelWidth(), true
}

var widenBF16Pool sync.Pool

// PackRows packs rows [r0, r0+rows) of a row-major weight (raw, of type
// src: BF16, or F32 rounded to bf16 on the way) into dst.
func (be *Backend) PackRows(dst *tensor.Tensor, raw []byte, src dtype.DType, r0 int) error {
	p, ok := be.packer()
	if !ok || dst == nil || dst.Layout() != packedLayout(p) || dst.Rank() != 2 {
		return fmt.Errorf("cpu: pack rows into %v: not a weight this backend packs", dst)
	}
	if src != dtype.BF16 && src != dtype.F32 {
		return fmt.Errorf("cpu: pack rows of %s: want BF16 or F32", src)
	}
	n, k, nr := dst.Dim(0), dst.Dim(1), p.PanelWidth()
	rowBytes := k * src.Size()
	rows := len(raw) / rowBytes
	if len(raw)%rowBytes != 0 || r0 < 0 || r0%nr != 0 || r0+rows > n || (rows%nr != 0 && r0+rows != n) {
		return fmt.Errorf("cpu: pack %d bytes as rows from %d of %v: not whole panels of %d rows", len(raw), r0, dst, nr)
	}
	if rows == 0 {
		return nil
	}
	w := unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)
	if src == dtype.F32 {
		sp, _ := widenBF16Pool.Get().(*[]uint16)
		if sp == nil || cap(*sp) < rows*k {
			s := make([]uint16, rows*k)
			sp = &s
		}
		defer widenBF16Pool.Put(sp)
		w = (*sp)[:rows*k]
		f := unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), rows*k)
		be.pool.For(len(w), grainStream, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				w[i] = dtype.F32ToBF16(f[i])
			}
		})
	}
	words := packedWords(dst)
	start := r0 / nr * p.PackedWords(nr, k)
	if _, err := p.PackWeights(words[start:start+p.PackedWords(rows, k)], rows, k, w, k); err != nil {
		return fmt.Errorf("cpu: pack rows of %v: %w", dst, err)
	}
	return nil
}

// packedWords is a packed tensor's storage as 32-bit words.
func packedWords(t *tensor.Tensor) []uint32 {
	return unsafe.Slice((*uint32)(t.Ptr()), t.Bytes()/4)
}

// packedWeight checks that w was packed by this backend's bf16 GEMM and
// wraps its storage for GemmBF16Packed.
func (be *Backend) packedWeight(w *tensor.Tensor) (gemm.BF16Packer, *gemm.PackedBF16, error) {
	p, ok := be.packer()
	if !ok || w.Layout() != packedLayout(p) || w.Rank() != 2 {
		return nil, nil, fmt.Errorf("cpu: linear with weight %v packed as %s: this backend computes %s with %s", w, w.Layout(), be.compute, be.bf16.Name())
	}
	if w.Ptr() == nil || w.Freed() {
		return nil, nil, fmt.Errorf("cpu: weight %v has no storage", w)
	}
	pw, err := p.PackedView(packedWords(w), w.Dim(0), w.Dim(1))
	if err != nil {
		return nil, nil, fmt.Errorf("cpu: linear: %w", err)
	}
	return p, pw, nil
}
