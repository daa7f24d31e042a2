package cpu

import (
	"fmt"
	"sync"
	"unsafe"

	"ferry/backend/cpu/gemm"
	"ferry/backend/cpu/parallel"
	"ferry/dtype"
	"ferry/tensor"
)

// Backend runs tensor.Backend kernels on the CPU. Every kernel computes in
// float32 (float64 where that is what keeps it within an ulp or two of the
// exact result), splits large work over parallel.Default(), and takes its
// scratch memory from per-kernel pools, so a steady state allocates nothing
// big.
//
// Matrix products go through a gemm.Impl. Large products are handed to the
// Impl whole, on the assumption that a fast Impl parallelises them itself;
// small ones (attention tiles, convolution tiles, small batches) are run from
// inside the pool's workers, one per worker, by the single-threaded Go GEMM
// whatever the Impl (see Backend.tiles).
type Backend struct {
	dev  *Device
	gemm gemm.Impl
	pool *parallel.Pool
	// tiles multiplies the small products that kernels run inside the
	// pool's workers (attention and convolution tiles): the Go GEMM on a
	// pool of one, so a tile never spawns threads of its own. (OpenBLAS
	// called from the workers ran attention at 8 GFLOP/s: its own threads
	// and their busy-waiting fought the pool for the two cores.)
	tiles gemm.Impl
	// bf16 multiplies bf16 weights when compute is dtype.BF16.
	bf16    gemm.BF16Impl
	compute dtype.DType
}

var _ tensor.Backend = (*Backend)(nil)

// New returns a backend computing on dev with g for matrix products. A nil
// dev gets an unlimited device; a nil g gets gemm.Naive (slow, exact; the
// lead wires the fast implementation).
func New(dev *Device, g gemm.Impl) *Backend {
	if dev == nil {
		dev = NewDevice(0)
	}
	if g == nil {
		g = gemm.Naive{}
	}
	return &Backend{dev: dev, gemm: g, pool: parallel.Default(), tiles: tileGEMM(), bf16: gemm.DefaultBF16(), compute: dtype.F32}
}

var (
	tileGEMMOnce sync.Once
	tileGo       *gemm.Go
)

// tileGEMM is the process-wide single-threaded Go GEMM for tiles.
func tileGEMM() *gemm.Go {
	tileGEMMOnce.Do(func() { tileGo = gemm.NewGo(parallel.New(1)) })
	return tileGo
}

// SetComputeDType chooses how Linear multiplies BF16 weights: F32 (the
// default) widens them exactly and runs the fp32 GEMM; BF16 rounds the
// activations to bf16 as well and runs the bf16 GEMM (VDPBF16PS where the
// CPU has AVX512-BF16, about 1.6× the fp32 rate), the plan's compute dtype
// bf16. F32 weights always run in fp32. Call it before use, not
// concurrently with kernels.
func (be *Backend) SetComputeDType(dt dtype.DType) error {
	if dt != dtype.F32 && dt != dtype.BF16 {
		return fmt.Errorf("cpu: compute dtype %s not supported (want F32 or BF16)", dt)
	}
	be.compute = dt
	return nil
}

// ComputeDType is the dtype BF16-weight products run in (F32 or BF16).
func (be *Backend) ComputeDType() dtype.DType { return be.compute }

// SetBF16GEMM replaces the bf16 GEMM (default gemm.DefaultBF16()), for
// benchmarks and tests.
func (be *Backend) SetBF16GEMM(g gemm.BF16Impl) {
	if g != nil {
		be.bf16 = g
	}
}

// SetTileGEMM replaces the GEMM of the small products run inside the
// pool's workers (default: the single-threaded Go GEMM). It must not start
// threads of its own; for benchmarks and tests.
func (be *Backend) SetTileGEMM(g gemm.Impl) {
	if g != nil {
		be.tiles = g
	}
}

// BF16GEMM is the bf16 matrix-multiply implementation in use.
func (be *Backend) BF16GEMM() gemm.BF16Impl { return be.bf16 }

// Name is "cpu".
func (be *Backend) Name() string { return "cpu" }

// Device is the CPU device tensors live on.
func (be *Backend) Device() tensor.Device { return be.dev }

// GEMM is the matrix-multiply implementation in use.
func (be *Backend) GEMM() gemm.Impl { return be.gemm }

// Work sizes (in elements) below which a loop is not worth splitting.
const (
	grainStream = 1 << 15 // memory-bound elementwise work
	grainMath   = 1 << 12 // elementwise work with a transcendental per element
)

// hostData checks that t's bytes are addressable here (the CPU device or the
// Go heap) and returns them.
func hostData(name string, t *tensor.Tensor) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("cpu: %s is nil", name)
	}
	if t.Len() == 0 {
		return nil, nil
	}
	if t.Ptr() == nil || t.Freed() {
		return nil, fmt.Errorf("cpu: %s %v has no storage", name, t)
	}
	if l := t.Layout(); l != "" {
		return nil, fmt.Errorf("cpu: %s %v is a packed GEMM weight (%s): only Linear reads it", name, t, l)
	}
	if d := t.Device(); d != nil {
		if _, ok := d.(*Device); !ok {
			return nil, fmt.Errorf("cpu: %s %v lives on device %s", name, t, d.Name())
		}
	}
	return t.Raw(), nil
}

// f32 returns t's elements, checking that t is a host-addressable float32
// tensor.
func f32(name string, t *tensor.Tensor) ([]float32, error) {
	if t == nil {
		return nil, fmt.Errorf("cpu: %s is nil", name)
	}
	if t.DType() != dtype.F32 {
		return nil, fmt.Errorf("cpu: %s %v: want F32", name, t)
	}
	if _, err := hostData(name, t); err != nil {
		return nil, err
	}
	return t.F32(), nil
}

// optF32 is f32 for optional parameters (nil gives nil, no error).
func optF32(name string, t *tensor.Tensor) ([]float32, error) {
	if t == nil {
		return nil, nil
	}
	return f32(name, t)
}

// sameShape reports an error unless dst and a have the same dimensions.
func sameShape(dst, a *tensor.Tensor) error {
	if !tensor.SameShape(dst.Shape(), a.Shape()) {
		return fmt.Errorf("cpu: dst %v does not match input %v", dst, a)
	}
	return nil
}

// Upload converts host bytes of type srcType into dst.
func (be *Backend) Upload(dst *tensor.Tensor, src []byte, srcType dtype.DType) error {
	if dst == nil {
		return fmt.Errorf("cpu: upload into nil tensor")
	}
	if srcType.Size() == 0 || len(src) != dst.Len()*srcType.Size() {
		return fmt.Errorf("cpu: upload %d bytes of %s into %v", len(src), srcType, dst)
	}
	host, err := tensor.FromBytes(src, srcType, dst.Shape()...)
	if err != nil {
		return fmt.Errorf("cpu: upload: %w", err)
	}
	return be.Cast(dst, host)
}

// Download converts t into host float32 memory.
func (be *Backend) Download(dst []float32, t *tensor.Tensor) error {
	raw, err := hostData("source", t)
	if err != nil {
		return err
	}
	if len(dst) != t.Len() {
		return fmt.Errorf("cpu: download %v into %d floats", t, len(dst))
	}
	return be.toF32(dst, raw, t.DType())
}

// toF32 widens raw elements of type dt into dst, in parallel chunks.
func (be *Backend) toF32(dst []float32, raw []byte, dt dtype.DType) error {
	switch dt {
	case dtype.F32, dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2, dtype.F64, dtype.I64, dtype.I32, dtype.Bool:
	default:
		return fmt.Errorf("cpu: convert %s to F32 not implemented", dt)
	}
	size := dt.Size()
	if len(raw) != len(dst)*size {
		return fmt.Errorf("cpu: convert %d bytes of %s into %d floats", len(raw), dt, len(dst))
	}
	be.pool.For(len(dst), grainStream, func(lo, hi int) {
		// Cannot fail: the type and the lengths were checked above.
		_ = dtype.ToF32(dst[lo:hi], raw[lo*size:hi*size], dt)
	})
	return nil
}

// Cast converts src into dst: any storage type to F32, any float type to
// BF16, F16 or F64 (through float32, chunk by chunk: fp16 weights under
// bf16 compute), and any type to itself (a copy).
func (be *Backend) Cast(dst, src *tensor.Tensor) error {
	if dst == nil || src == nil {
		return fmt.Errorf("cpu: cast with nil tensor")
	}
	if dst.Len() != src.Len() {
		return fmt.Errorf("cpu: cast %v into %v: element counts differ", src, dst)
	}
	draw, err := hostData("dst", dst)
	if err != nil {
		return err
	}
	sraw, err := hostData("source", src)
	if err != nil {
		return err
	}
	if dst.Len() == 0 {
		return nil
	}
	switch {
	case dst.DType() == src.DType():
		be.copyBytes(draw, sraw)
		return nil
	case dst.DType() == dtype.F32:
		return be.toF32(dst.F32(), sraw, src.DType())
	case !narrows(dst.DType()):
		return fmt.Errorf("cpu: cast %s to %s not implemented", src.DType(), dst.DType())
	case src.DType() == dtype.F32:
		src := src.F32()
		be.pool.For(len(src), grainStream, func(lo, hi int) { narrowF32(dst, lo, src[lo:hi]) })
		return nil
	case src.DType().IsFloat():
		return be.castThroughF32(dst, sraw, src.DType())
	}
	return fmt.Errorf("cpu: cast %s to %s not implemented", src.DType(), dst.DType())
}

// narrows reports whether narrowF32 writes dt.
func narrows(dt dtype.DType) bool { return dt == dtype.BF16 || dt == dtype.F16 || dt == dtype.F64 }

// narrowF32 writes float32 values into dst from element lo on (BF16 and
// F16 round to nearest even, as PyTorch does; F64 widens).
func narrowF32(dst *tensor.Tensor, lo int, src []float32) {
	switch dst.DType() {
	case dtype.BF16:
		d := dst.U16()[lo : lo+len(src)]
		for i, v := range src {
			d[i] = dtype.F32ToBF16(v)
		}
	case dtype.F16:
		d := dst.U16()[lo : lo+len(src)]
		for i, v := range src {
			d[i] = dtype.F32ToF16(v)
		}
	case dtype.F64:
		d := dst.F64()[lo : lo+len(src)]
		for i, v := range src {
			d[i] = float64(v)
		}
	}
}

// chunkPool holds float32 scratch for castThroughF32, one grain each.
var chunkPool = sync.Pool{New: func() any { b := make([]float32, grainStream); return &b }}

// castThroughF32 converts raw elements of float type st into dst (a type
// narrowF32 writes), widening each chunk to float32 in scratch first.
func (be *Backend) castThroughF32(dst *tensor.Tensor, raw []byte, st dtype.DType) error {
	size := st.Size()
	be.pool.For(dst.Len(), grainStream, func(lo, hi int) {
		bp := chunkPool.Get().(*[]float32)
		defer chunkPool.Put(bp)
		for c := lo; c < hi; c += grainStream {
			end := min(c+grainStream, hi)
			buf := (*bp)[:end-c]
			// Cannot fail: st is a float type and the lengths match.
			_ = dtype.ToF32(buf, raw[c*size:end*size], st)
			narrowF32(dst, c, buf)
		}
	})
	return nil
}

// copyBytes copies src into dst (same length) in parallel chunks.
func (be *Backend) copyBytes(dst, src []byte) {
	const grain = 1 << 18
	be.pool.For(len(dst), grain, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
}

// Fill sets every element of dst to v (F32, F64, BF16, F16).
func (be *Backend) Fill(dst *tensor.Tensor, v float32) error {
	raw, err := hostData("dst", dst)
	if err != nil || dst.Len() == 0 {
		return err
	}
	switch dst.DType() {
	case dtype.F32:
		fillT(be.pool, dst.F32(), v)
	case dtype.F64:
		fillT(be.pool, dst.F64(), float64(v))
	case dtype.BF16:
		fillT(be.pool, dst.U16(), dtype.F32ToBF16(v))
	case dtype.F16:
		fillT(be.pool, dst.U16(), dtype.F32ToF16(v))
	default:
		if v == 0 {
			fillT(be.pool, raw, 0)
			return nil
		}
		return fmt.Errorf("cpu: fill %v with %g not implemented", dst, v)
	}
	return nil
}

// fillT sets every element of d to v in parallel chunks.
func fillT[T any](p *parallel.Pool, d []T, v T) {
	p.For(len(d), grainStream, func(lo, hi int) {
		s := d[lo:hi]
		for i := range s {
			s[i] = v
		}
	})
}

// elems views raw bytes as a slice of T (the caller checked the size).
func elems[T any](raw []byte) []T {
	var zero T
	n := len(raw) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&raw[0])), n)
}
