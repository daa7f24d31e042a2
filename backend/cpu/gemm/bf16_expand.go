package gemm

import (
	"sync"
	"unsafe"

	"ferry/dtype"
)

// The "expand" bf16 kernel: where the CPU has no AVX512-BF16 but runs the
// expanding packers (AVX2 + F16C), the bf16 GEMM rounds the activations to
// bf16, as VDPBF16PS's operands are, and multiplies them by the weights
// widened panel by panel (Stored) with the fp32 kernel: the bf16 GEMM's
// results (products of bf16 values, float32 sums) at the fp32 GEMM's rate
// instead of the portable kernel's scalar loop. Packed weights use the
// Stored layout in the words PackWeights is given.

// expandBF16Kernel is the expand kernel over the best fp32 kernel, or nil
// where the expanding packers do not run.
func expandBF16Kernel() *bf16Kernel {
	if !hasExpand() {
		return nil
	}
	fk := archKernels()[0] // hasExpand implies an AVX2 kernel at least
	return &bf16Kernel{name: "expand", mr: fk.mr, nr: fk.nr, kc: fk.kc, mc: fk.mc, nc: fk.nc, expand: fk}
}

// roundedPool holds the scratch the expand kernel rounds activations into.
var roundedPool sync.Pool

// roundActivations returns rows of a (m×k, row stride lda) rounded to bf16
// (nearest even, as packActivations rounds) as float32, packed with row
// stride k in pooled scratch; done returns the scratch.
func (g *GoBF16) roundActivations(m, k int, a []float32, lda int) (r []float32, done func()) {
	sp, _ := roundedPool.Get().(*[]float32)
	if sp == nil || cap(*sp) < m*k {
		s := make([]float32, m*k)
		sp = &s
	}
	r = (*sp)[:m*k]
	g.pool.For(m, max(1, (1<<14)/max(k, 1)), func(i0, i1 int) {
		for i := i0; i < i1; i++ {
			src, dst := a[i*lda:i*lda+k], r[i*k:(i+1)*k]
			for p, v := range src {
				dst[p] = dtype.BF16ToF32(dtype.F32ToBF16(v))
			}
		}
	})
	return r, func() { roundedPool.Put(sp) }
}

// storedPool holds the per-call packing of unpacked weights.
var storedPool sync.Pool

// gemmWide is GemmBF16 on the expand kernel (arguments checked, m, n, k
// all positive).
func (g *GoBF16) gemmWide(m, n, k int, a []float32, lda int, w []uint16, ldw int, beta float32, c []float32, ldc int) {
	r, done := g.roundActivations(m, k, a, lda)
	defer done()
	need := g.wide.StoredBytes(dtype.BF16, n, k)
	sp, _ := storedPool.Get().(*[]byte)
	if sp == nil || cap(*sp) < need {
		s := make([]byte, need)
		sp = &s
	}
	defer storedPool.Put(sp)
	st, err := g.wide.PackStored((*sp)[:need], dtype.BF16, n, k, u16Bytes(w), ldw)
	if err == nil {
		err = g.wide.SgemmStored(m, r, k, st, beta, c, ldc)
	}
	if err != nil {
		panic(err) // the arguments were checked: a bug
	}
}

// packWide is PackWeights on the expand kernel: the Stored layout in the
// words of dst.
func (g *GoBF16) packWide(dst []uint32, n, k int, w []uint16, ldw int) error {
	_, err := g.wide.PackStored(wordBytes(dst)[:g.wide.StoredBytes(dtype.BF16, n, k)], dtype.BF16, n, k, u16Bytes(w), ldw)
	return err
}

// gemmWidePacked is GemmBF16Packed on the expand kernel.
func (g *GoBF16) gemmWidePacked(m int, a []float32, lda int, w *PackedBF16, beta float32, c []float32, ldc int) error {
	st, err := g.wide.StoredView(dtype.BF16, wordBytes(w.data)[:g.wide.StoredBytes(dtype.BF16, w.n, w.k)], w.n, w.k)
	if err != nil {
		return err
	}
	r, done := g.roundActivations(m, w.k, a, lda)
	defer done()
	return g.wide.SgemmStored(m, r, w.k, st, beta, c, ldc)
}

// u16Bytes views w as bytes.
func u16Bytes(w []uint16) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 2*len(w))
}

// wordBytes views w as bytes.
func wordBytes(w []uint32) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))
}
