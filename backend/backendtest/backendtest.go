// Package backendtest is the conformance suite every tensor.Backend passes.
//
// Run exercises each kernel of tensor.Backend, through tensor.Ops and by
// direct calls into guarded destinations, on many shapes (odd sizes, size-1
// dims, broadcasting, in-place aliasing, lengths that no tile size divides),
// and compares the results with plain float64 reference implementations in
// this package. Each op's tolerance is the worst-case error bound of a
// correct float32 evaluation (in any order), stated next to the op, so that
// a backend that passes is right and a wrong index or formula fails.
//
// It also checks that device memory returns to its starting level once the
// results are freed, that running out of device memory surfaces as an error
// from Ops.Err, that kernels write nothing outside dst, and that bad shapes
// passed straight to a kernel give an error rather than a panic.
//
// A backend's tests call it once:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(c int64) tensor.Backend { return cpu.New(cpu.NewDevice(c), gemm.Naive{}) })
//	}
package backendtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/dtype"
	"ferry/tensor"
)

// capacity is the device size for the functional tests: room for every
// case's operands many times over.
const capacity = 1 << 30

// Run runs the whole suite; every group is a subtest with a fresh backend.
func Run(t *testing.T, newBackend func(capacity int64) tensor.Backend) {
	groups := []struct {
		name string
		fn   func(h *harness)
	}{
		{"Identity", testIdentity},
		{"UploadDownload", testUploadDownload},
		{"Cast", testCast},
		{"Fill", testFill},
		{"Binary", testBinary},
		{"BinaryInPlace", testBinaryInPlace},
		{"Affine", testAffine},
		{"Clamp", testClamp},
		{"Unary", testUnary},
		{"Softmax", testSoftmax},
		{"LayerNorm", testLayerNorm},
		{"RMSNorm", testRMSNorm},
		{"RMSNormChannels", testRMSNormChannels},
		{"GroupNorm", testGroupNorm},
		{"Linear", testLinear},
		{"MatMul", testMatMul},
		{"Permute", testPermute},
		{"Concat", testConcat},
		{"Narrow", testNarrow},
		{"Pad", testPad},
		{"Upsample", testUpsample},
		{"Attention", testAttention},
		{"Rope", testRope},
		{"Embedding", testEmbedding},
		{"Conv", testConv},
		{"Backward", testBackward},
		{"AttentionBackward", testAttentionBackward},
		{"BadShapes", testBadShapes},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			h := newHarness(t, newBackend(capacity))
			g.fn(h)
			h.finish()
		})
	}
	t.Run("OutOfMemory", func(t *testing.T) { testOutOfMemory(t, newBackend) })
}

// harness runs one group of cases on one backend and owns every tensor the
// cases create, so that it can free them all and check for leaks.
type harness struct {
	t     *testing.T
	be    tensor.Backend
	ops   *tensor.Ops
	rng   *rand.Rand
	owned []*tensor.Tensor
	start int64 // device bytes allocated before the group ran
}

func newHarness(t *testing.T, be tensor.Backend) *harness {
	return &harness{
		t:     t,
		be:    be,
		ops:   tensor.NewOps(be),
		rng:   rand.New(rand.NewPCG(1, uint64(len(t.Name())))),
		start: be.Device().Stats().Allocated,
	}
}

// finish frees everything and checks that the device is back where it
// started: a kernel that keeps device memory (or a result the front end
// loses) shows up here.
func (h *harness) finish() {
	h.t.Helper()
	if err := h.ops.Err(); err != nil {
		h.t.Errorf("unexpected error left in Ops: %v", err)
	}
	tensor.Free(h.owned...)
	h.owned = nil
	if got := h.be.Device().Stats().Allocated; got != h.start {
		h.t.Errorf("device holds %d bytes after every result was freed, %d before the cases ran", got, h.start)
	}
}

// own records t (and returns it) so finish frees it.
func (h *harness) own(t *tensor.Tensor) *tensor.Tensor {
	h.owned = append(h.owned, t)
	return t
}

// ok reports (and clears) an error recorded in Ops during case name.
func (h *harness) ok(name string) bool {
	h.t.Helper()
	if err := h.ops.Err(); err != nil {
		h.t.Errorf("%s: %v", name, err)
		h.ops.ClearErr()
		return false
	}
	return true
}

// call runs fn, turning a panic into an error: a kernel must never panic on
// what a caller hands it.
func call(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// inputOffset is the number of elements in front of every input view, so
// that kernels see operands that do not start on an allocation boundary.
const inputOffset = 3

// input uploads data as an F32 tensor that is a view starting a few
// elements into a larger device buffer.
func (h *harness) input(data []float32, shape ...int) *tensor.Tensor {
	h.t.Helper()
	return h.inputBytes(f32Bytes(data), dtype.F32, shape...)
}

// inputBytes uploads raw little-endian elements of dt as a tensor of dt
// (a same-type Upload), viewed at an offset inside a larger buffer.
func (h *harness) inputBytes(raw []byte, dt dtype.DType, shape ...int) *tensor.Tensor {
	h.t.Helper()
	n := tensor.NumElems(shape)
	whole := h.own(h.ops.Empty(dt, n+2*inputOffset))
	if !h.ok("allocate input") {
		h.t.FailNow()
	}
	v, err := tensor.View(whole.Buffer(), int64(inputOffset*dt.Size()), dt, shape...)
	if err != nil {
		h.t.Fatalf("input view: %v", err)
	}
	if err := call(func() error { return h.be.Upload(v, raw, dt) }); err != nil {
		h.t.Fatalf("upload %s%v: %v", dt, shape, err)
	}
	return v
}

// f64Input uploads float64 data (RoPE tables) as an F64 tensor.
func (h *harness) f64Input(data []float64, shape ...int) *tensor.Tensor {
	h.t.Helper()
	raw := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
	}
	return h.inputBytes(raw, dtype.F64, shape...)
}

func (h *harness) download(t *tensor.Tensor) []float32 {
	h.t.Helper()
	out := h.ops.Download(t)
	h.ok("download")
	return out
}

// Guarded destinations: dst is a view into a buffer with guardElems extra
// elements on each side, all set to the sentinel; after the kernel the
// guards must still hold it. The sentinel also starts in dst itself, so an
// element the kernel forgets to write shows up as a mismatch.
const (
	guardElems = 7
	sentinel   = -12288 // exact in F32, BF16, F16 and F64
)

type guarded struct {
	whole, dst *tensor.Tensor
	n          int
}

func (h *harness) guarded(dt dtype.DType, shape ...int) *guarded {
	h.t.Helper()
	n := tensor.NumElems(shape)
	total := n + 2*guardElems
	whole := h.own(h.ops.Empty(dt, total))
	if !h.ok("allocate guarded dst") {
		h.t.FailNow()
	}
	if err := call(func() error { return h.be.Upload(whole, sentinelBytes(dt, total), dt) }); err != nil {
		h.t.Fatalf("fill guards: %v", err)
	}
	dst, err := tensor.View(whole.Buffer(), int64(guardElems*dt.Size()), dt, shape...)
	if err != nil {
		h.t.Fatalf("guarded view: %v", err)
	}
	return &guarded{whole: whole, dst: dst, n: n}
}

// intact reports an error for every guard element the kernel overwrote.
func (h *harness) intact(name string, g *guarded) {
	h.t.Helper()
	all := h.download(g.whole)
	for i, v := range all {
		if (i < guardElems || i >= guardElems+g.n) && v != sentinel {
			h.t.Errorf("%s: wrote %g outside dst (element %d of the guard region around %d elements)", name, v, i-guardElems, g.n)
			return
		}
	}
}

func sentinelBytes(dt dtype.DType, n int) []byte {
	size := dt.Size()
	raw := make([]byte, n*size)
	for i := range n {
		switch dt {
		case dtype.F32:
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(sentinel))
		case dtype.BF16:
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(math.Float32bits(sentinel)>>16))
		case dtype.F16:
			binary.LittleEndian.PutUint16(raw[2*i:], 0xf200) // -1.5·2^13
		case dtype.F64:
			binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(sentinel))
		default:
			panic("backendtest: no sentinel for " + dt.String())
		}
	}
	return raw
}

// both runs one kernel twice, through the allocating front end and directly
// into a guarded dst of dt and shape, and returns the two results.
func (h *harness) both(name string, dt dtype.DType, shape []int, viaOps func() *tensor.Tensor, direct func(dst *tensor.Tensor) error) [][]float32 {
	h.t.Helper()
	var results [][]float32
	var r *tensor.Tensor
	if err := call(func() error { r = viaOps(); return nil }); err != nil {
		h.t.Errorf("%s via Ops: %v", name, err)
	} else if h.own(r); h.ok(name + " via Ops") {
		if !sameShape(r.Shape(), shape) {
			h.t.Errorf("%s via Ops: result shape %v, want %v", name, r.Shape(), shape)
		} else {
			results = append(results, h.download(r))
		}
	}
	g := h.guarded(dt, shape...)
	if err := call(func() error { return direct(g.dst) }); err != nil {
		h.t.Errorf("%s direct: %v", name, err)
		return results
	}
	results = append(results, h.download(g.dst))
	h.intact(name, g)
	return results
}

// u is the unit roundoff of float32: one correctly rounded float32
// operation is off by at most u·|result|.
const u = 1.0 / (1 << 24)

// near checks got against want element by element within tol[i]. A NaN in
// want needs a NaN in got; an infinity needs the same infinity.
func (h *harness) near(name string, got []float32, want, tol []float64) {
	h.t.Helper()
	if len(got) != len(want) {
		h.t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	bad, worst, worstAt := 0, 0.0, -1
	for i, w := range want {
		g := float64(got[i])
		var fail bool
		switch {
		case math.IsNaN(w):
			fail = !math.IsNaN(g)
		case math.IsInf(w, 0):
			fail = g != w
		case math.IsInf(float64(float32(w)), 0):
			// Past float32's range: the rounded result is infinite.
			fail = g != float64(float32(w)) && !(math.Abs(g-w) <= tol[i])
		default:
			e := math.Abs(g - w)
			fail = !(e <= tol[i]) // NaN in got fails too
			if r := e / tol[i]; fail && (r > worst || math.IsNaN(r)) {
				worst, worstAt = r, i
			}
		}
		if fail {
			if bad < 3 {
				h.t.Errorf("%s: element %d = %.9g, want %.9g (tolerance %.3g)", name, i, g, w, tol[i])
			}
			bad++
		}
	}
	if bad > 3 {
		h.t.Errorf("%s: %d of %d elements out of tolerance (worst at %d: %.3gx tolerance)", name, bad, len(want), worstAt, worst)
	}
}

// exact checks got against want bit for bit (any NaN matches any NaN).
func (h *harness) exact(name string, got, want []float32) {
	h.t.Helper()
	if len(got) != len(want) {
		h.t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	bad := 0
	for i, w := range want {
		g := got[i]
		if math.Float32bits(g) == math.Float32bits(w) || (g != g && w != w) {
			continue
		}
		if bad < 3 {
			h.t.Errorf("%s: element %d = %g, want %g", name, i, g, w)
		}
		bad++
	}
	if bad > 3 {
		h.t.Errorf("%s: %d of %d elements differ", name, bad, len(want))
	}
}

// relTol is a tolerance rel·|want[i]| + abs for every element.
func relTol(want []float64, rel, abs float64) []float64 {
	t := make([]float64, len(want))
	for i, w := range want {
		t[i] = rel*math.Abs(w) + abs
	}
	return t
}

// rounded is want rounded to float32, for the exact comparisons of kernels
// whose results are one correctly rounded operation.
func rounded(want []float64) []float32 {
	out := make([]float32, len(want))
	for i, w := range want {
		out[i] = float32(w)
	}
	return out
}

func (h *harness) randn(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(h.rng.NormFloat64() * scale)
	}
	return out
}

func (h *harness) uniform(n int, lo, hi float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(lo + (hi-lo)*h.rng.Float64())
	}
	return out
}

func f32Bytes(data []float32) []byte {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return raw
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func sameShape(a, b []int) bool {
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

func numElems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// testIdentity: a backend names itself and its device.
func testIdentity(h *harness) {
	if h.be.Name() == "" {
		h.t.Errorf("backend has no name")
	}
	if d := h.be.Device(); d == nil || d.Name() == "" {
		h.t.Errorf("backend has no named device")
	}
}

// testOutOfMemory checks that a request past the device's capacity is an
// error wrapping tensor.ErrOutOfMemory, that the error sticks in Ops, and
// that the device is usable again after ClearErr.
func testOutOfMemory(t *testing.T, newBackend func(int64) tensor.Backend) {
	const small = 8 << 20
	be := newBackend(small)
	ops := tensor.NewOps(be)
	start := be.Device().Stats().Allocated
	a := ops.Zeros(1024)
	big := ops.Zeros(small) // 4 bytes each: four times the capacity
	if err := ops.Err(); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("allocating %d floats on a %d-byte device: error %v, want one wrapping ErrOutOfMemory", small, small, err)
	}
	sum := ops.Add(a, a)
	if err := ops.Err(); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Errorf("after an OOM the first error must stick, got %v", err)
	}
	if s := be.Device().Stats(); s.Reserved > small || s.PeakReserved > small {
		t.Errorf("reserved %d (peak %d) past capacity %d", s.Reserved, s.PeakReserved, small)
	}
	tensor.Free(big, sum) // results of failed calls: Free must be a no-op
	ops.ClearErr()
	b := ops.Affine(a, 2, 1)
	got := ops.Download(b)
	if err := ops.Err(); err != nil {
		t.Fatalf("after ClearErr: %v", err)
	}
	for i, v := range got {
		if v != 1 {
			t.Fatalf("after ClearErr: element %d = %g, want 1", i, v)
		}
	}
	tensor.Free(a, b)
	if got := be.Device().Stats().Allocated; got != start {
		t.Errorf("device holds %d bytes after freeing everything, %d at start", got, start)
	}
}
