package gemm

import (
	"fmt"
	"strings"
	"unsafe"

	"ferry/dtype"
)

// Stored is a weight W (n×k, PyTorch's [out, in]) kept in its storage
// dtype (bf16, fp16, F8_E4M3 or F8_E5M2) in the fp32 kernel's panel
// layout: column panels of nr output columns, each k steps of nr elements,
// zero past n. It takes roundup(n, nr)·k·size bytes, W's own bytes when nr
// divides n (every DiT Linear). SgemmStored widens each panel to float32
// as it packs it and runs the fp32 micro-kernel, times a per-tensor scale
// (fp8 checkpoints carry one beside the weight).
type Stored struct {
	dt     dtype.DType
	n, k   int
	nr     int
	kernel string
	data   []byte
	scale  float32
	bias   []float32 // n column biases (WithBias), or nil
}

// DType is the storage dtype.
func (s *Stored) DType() dtype.DType { return s.dt }

// N is the output width (W's row count).
func (s *Stored) N() int { return s.n }

// K is the inner dimension (W's column count).
func (s *Stored) K() int { return s.k }

// Scale is the factor the products are multiplied by (1 unless set).
func (s *Stored) Scale() float32 { return s.scale }

// Bytes is the memory the packed weight takes.
func (s *Stored) Bytes() int64 { return int64(len(s.data)) }

// Scaled returns s multiplied by scale (sharing s's data): the per-tensor
// scale_weight of an fp8 checkpoint. s's own scale returns s.
func (s *Stored) Scaled(scale float32) *Stored {
	if scale == s.scale {
		return s
	}
	c := *s
	c.scale = scale
	return &c
}

// WithBias returns s (sharing its data) with a bias per output column,
// which SgemmStored adds to every row of C as Packed.WithBias does; the
// scale does not multiply it. A nil bias on s without one returns s.
func (s *Stored) WithBias(bias []float32) (*Stored, error) {
	if bias == nil && s.bias == nil {
		return s, nil
	}
	if bias != nil && len(bias) != s.n {
		return nil, fmt.Errorf("gemm: %d biases for a stored weight of %d rows", len(bias), s.n)
	}
	c := *s
	c.bias = bias
	return &c, nil
}

// panel widens K steps [pc, pc+kc) of panel q into dst (kc·nr floats).
func (s *Stored) panel(dst []float32, q, pc, kc int, vec bool) {
	size := s.dt.Size()
	off := (q*s.k + pc) * s.nr * size
	expand(dst[:kc*s.nr], s.data[off:off+kc*s.nr*size], s.dt, vec)
}

// Expands reports whether this GEMM multiplies weights stored as dt at
// the fp32 kernel's speed: dt is one of bf16, fp16, F8_E4M3, F8_E5M2, the
// kernel is an assembly one and the CPU widens with AVX2 and F16C. (The
// Stored products work everywhere; without this they widen in Go.)
func (g *Go) Expands(dt dtype.DType) bool { return g.expand && expandable(dt) }

// Expands is DefaultGo().Expands: whether GEMM weights stored as dt can
// stay as stored on this CPU's device without slowing the products.
func Expands(dt dtype.DType) bool { return DefaultGo().Expands(dt) }

// StoredLayout names the layout PackStored writes for dt, e.g.
// "bf16-expand/avx2/16": a weight packed under another name cannot be
// read by this GEMM.
func (g *Go) StoredLayout(dt dtype.DType) string {
	return fmt.Sprintf("%s-expand/%s/%d", strings.ToLower(dt.String()), g.kern.name, g.kern.nr)
}

// StoredBytes is the number of bytes PackStored writes for an n×k weight
// of dt.
func (g *Go) StoredBytes(dt dtype.DType, n, k int) int {
	return roundUp(max(n, 0), g.kern.nr) * max(k, 0) * dt.Size()
}

// PackStored packs the n×k weight w (raw bytes of dt, row stride ldw
// elements) into dst, which must hold StoredBytes(dt, n, k) bytes (nil:
// allocated). Panels are packed in parallel on the pool.
func (g *Go) PackStored(dst []byte, dt dtype.DType, n, k int, w []byte, ldw int) (*Stored, error) {
	if !expandable(dt) {
		return nil, fmt.Errorf("gemm: pack stored weight: %s is not bf16, fp16 or fp8", dt)
	}
	if n < 0 || k < 0 {
		return nil, fmt.Errorf("gemm: pack stored weight %d×%d", n, k)
	}
	size := dt.Size()
	if err := checkMatrix("W", n, k, len(w)/size, ldw); err != nil {
		return nil, fmt.Errorf("gemm: pack stored weight: %w", err)
	}
	need := g.StoredBytes(dt, n, k)
	if dst == nil {
		dst = make([]byte, need)
	}
	if len(dst) < need {
		return nil, fmt.Errorf("gemm: pack %s weight %d×%d needs %d bytes, dst has %d", dt, n, k, need, len(dst))
	}
	s := &Stored{dt: dt, n: n, k: k, nr: g.kern.nr, kernel: g.kern.name, data: dst[:need], scale: 1}
	if need == 0 {
		return s, nil
	}
	nr := g.kern.nr
	g.pool.For(ceilDiv(n, nr), 1, func(q0, q1 int) {
		for q := q0; q < q1; q++ {
			panel := s.data[q*k*nr*size : (q+1)*k*nr*size]
			cols := min(nr, n-q*nr)
			if size == 2 {
				packStoredPanel(words(panel), nr, words(w), ldw, k, q*nr, cols)
			} else {
				packStoredPanel(panel, nr, w, ldw, k, q*nr, cols)
			}
		}
	})
	return s, nil
}

// words views b as 16-bit elements.
func words(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// storedTransposeStep is how many K steps packStoredPanel copies per row
// before moving to the next: one weight row's stretch and the panel's
// steps stay in L1 while the nr rows are interleaved.
const storedTransposeStep = 256

// packStoredPanel writes weight rows [j0, j0+cols) into panel (k steps of
// nr elements): panel[p·nr + j] = w[(j0+j)·ldw + p], zero past cols. It is
// a transpose of 1- or 2-byte elements, done at every upload of a weight
// (each load of a streamed block). Eight rows go at once, so that each
// step writes eight neighbours where one element at a time wrote one
// element per step: 2.4x faster on a 8960x1536 bf16 weight
// (BenchmarkPackStored, 6.49 against 2.72 ms, medians of three
// interleaved runs, Zen 5 kind), and it was 1.7-2.9% of streaming
// profiles.
func packStoredPanel[T uint8 | uint16](panel []T, nr int, w []T, ldw, k, j0, cols int) {
	for p0 := 0; p0 < k; p0 += storedTransposeStep {
		p1 := min(k, p0+storedTransposeStep)
		j := 0
		for ; j+8 <= cols; j += 8 {
			// Eight rows at once: each step writes eight neighbours.
			var r [8][]T
			for x := range r {
				r[x] = w[(j0+j+x)*ldw+p0 : (j0+j+x)*ldw+p1]
			}
			r0, r1, r2, r3, r4, r5, r6, r7 := r[0], r[1][:len(r[0])], r[2][:len(r[0])], r[3][:len(r[0])], r[4][:len(r[0])], r[5][:len(r[0])], r[6][:len(r[0])], r[7][:len(r[0])]
			out := panel[p0*nr+j:]
			for i := range r0 {
				o := out[i*nr : i*nr+8]
				o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7] = r0[i], r1[i], r2[i], r3[i], r4[i], r5[i], r6[i], r7[i]
			}
		}
		for ; j < cols; j++ {
			row := w[(j0+j)*ldw+p0 : (j0+j)*ldw+p1]
			for i, v := range row {
				panel[(p0+i)*nr+j] = v
			}
		}
		if cols < nr {
			for p := p0; p < p1; p++ {
				clear(panel[p*nr+cols : (p+1)*nr])
			}
		}
	}
}

// StoredView wraps data packed by PackStored (of this GEMM's kernel) for
// an n×k weight of dt, scale 1 (the executor packs into device memory and
// binds views).
func (g *Go) StoredView(dt dtype.DType, data []byte, n, k int) (*Stored, error) {
	if !expandable(dt) {
		return nil, fmt.Errorf("gemm: stored view: %s is not bf16, fp16 or fp8", dt)
	}
	if n < 0 || k < 0 || len(data) != g.StoredBytes(dt, n, k) {
		return nil, fmt.Errorf("gemm: %d packed bytes for a %d×%d %s weight, want %d", len(data), n, k, dt, g.StoredBytes(dt, max(n, 0), max(k, 0)))
	}
	return &Stored{dt: dt, n: n, k: k, nr: g.kern.nr, kernel: g.kern.name, data: data, scale: 1}, nil
}

// SgemmStored computes C[m×n] = scale·A[m×k]·Wᵀ + beta·C (+ W's bias, see
// WithBias) with W packed by PackStored: float32 activations (row stride
// lda) times the weight widened exactly, float32 accumulation, as the fp32
// GEMM over the widened weight. beta = 0 never reads C.
func (g *Go) SgemmStored(m int, a []float32, lda int, w *Stored, beta float32, c []float32, ldc int) error {
	switch {
	case w == nil:
		return fmt.Errorf("gemm: stored product with nil weight")
	case w.nr != g.kern.nr:
		return fmt.Errorf("gemm: weight packed for kernel %s (nr=%d), this GEMM runs %s (nr=%d)", w.kernel, w.nr, g.kern.name, g.kern.nr)
	case m < 0:
		return fmt.Errorf("gemm: stored product with m=%d", m)
	}
	if err := checkMatrix("A", m, w.k, len(a), lda); err != nil {
		return fmt.Errorf("gemm: stored product: %w", err)
	}
	if err := checkMatrix("C", m, w.n, len(c), ldc); err != nil {
		return fmt.Errorf("gemm: stored product: %w", err)
	}
	g.gemm(problem{
		m: m, n: w.n, k: w.k, alpha: w.scale * expandUnit(w.dt), a: a, lda: lda,
		stored: w, beta: beta, c: c, ldc: ldc,
	})
	return nil
}
