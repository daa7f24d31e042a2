package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// Decoders written from the format definitions, independent of package
// dtype, for the conversion references.

func decodeBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// decodeF16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
func decodeF16(h uint16) float32 {
	return decodeMinifloat(uint32(h), 5, 10, false)
}

// decodeF8E4M3: 4 exponent bits (bias 7), 3 mantissa bits, no infinities;
// only S.1111.111 is NaN ("fn" variant).
func decodeF8E4M3(v uint8) float32 { return decodeMinifloat(uint32(v), 4, 3, true) }

// decodeF8E5M2: the IEEE-like 5/2 layout with infinities and NaNs.
func decodeF8E5M2(v uint8) float32 { return decodeMinifloat(uint32(v), 5, 2, false) }

func decodeMinifloat(bits uint32, ebits, mbits uint, fn bool) float32 {
	sign := 1.0
	if bits>>(ebits+mbits)&1 == 1 {
		sign = -1
	}
	e := int(bits >> mbits & (1<<ebits - 1))
	m := float64(bits & (1<<mbits - 1))
	bias := 1<<(ebits-1) - 1
	top := 1<<ebits - 1
	switch {
	case fn && e == top && m == float64(int(1)<<mbits-1):
		return float32(math.NaN())
	case !fn && e == top && m != 0:
		return float32(math.NaN())
	case !fn && e == top:
		return float32(sign * math.Inf(1))
	case e == 0:
		return float32(sign * math.Ldexp(m, 1-bias-int(mbits)))
	}
	return float32(sign * math.Ldexp(1+m/float64(int(1)<<mbits), e-bias))
}

// roundBF16 rounds to the nearest bfloat16, ties to even (by the bits).
func roundBF16(f float32) float32 {
	b := math.Float32bits(f)
	if f != f {
		return f
	}
	hi, lo := b>>16, b&0xffff
	if lo > 0x8000 || (lo == 0x8000 && hi&1 == 1) {
		hi++
	}
	return math.Float32frombits(hi << 16)
}

// encoded holds random host data of one dtype and its exact F32 values.
type encoded struct {
	dt   dtype.DType
	raw  []byte
	want []float32
}

// encode makes n random elements of dt covering its bit patterns (16- and
// 8-bit types) or a wide range of values (wider types).
func (h *harness) encode(dt dtype.DType, n int) encoded {
	e := encoded{dt: dt, raw: make([]byte, n*dt.Size()), want: make([]float32, n)}
	for i := range n {
		switch dt {
		case dtype.F32:
			v := float32(h.rng.NormFloat64() * 100)
			binary.LittleEndian.PutUint32(e.raw[4*i:], math.Float32bits(v))
			e.want[i] = v
		case dtype.BF16:
			b := uint16(h.rng.Uint32())
			binary.LittleEndian.PutUint16(e.raw[2*i:], b)
			e.want[i] = decodeBF16(b)
		case dtype.F16:
			b := uint16(h.rng.Uint32())
			binary.LittleEndian.PutUint16(e.raw[2*i:], b)
			e.want[i] = decodeF16(b)
		case dtype.F8E4M3:
			e.raw[i] = uint8(h.rng.Uint32())
			e.want[i] = decodeF8E4M3(e.raw[i])
		case dtype.F8E5M2:
			e.raw[i] = uint8(h.rng.Uint32())
			e.want[i] = decodeF8E5M2(e.raw[i])
		case dtype.F64:
			v := h.rng.NormFloat64() * math.Pow(10, float64(h.rng.IntN(80)-40))
			if i%97 == 0 {
				v = 1e300 // past float32's range: +Inf
			}
			binary.LittleEndian.PutUint64(e.raw[8*i:], math.Float64bits(v))
			e.want[i] = float32(v)
		case dtype.I32:
			v := int32(h.rng.Uint32())
			binary.LittleEndian.PutUint32(e.raw[4*i:], uint32(v))
			e.want[i] = float32(v)
		case dtype.I64:
			v := int64(h.rng.Uint64()) >> h.rng.IntN(60)
			binary.LittleEndian.PutUint64(e.raw[8*i:], uint64(v))
			e.want[i] = float32(v)
		default:
			panic("backendtest: cannot encode " + dt.String())
		}
	}
	return e
}

var storageTypes = []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2, dtype.F64, dtype.I32, dtype.I64}

// testUploadDownload: host bytes of every storage type become exact F32
// values on the device (large sizes cross any chunking), a same-type upload
// keeps the bits, and Download gives back what was uploaded.
func testUploadDownload(h *harness) {
	for _, dt := range storageTypes {
		for _, n := range []int{1, 37, 200003} {
			name := fmt.Sprintf("upload %s[%d] to F32", dt, n)
			e := h.encode(dt, n)
			g := h.guarded(dtype.F32, n)
			if err := call(func() error { return h.be.Upload(g.dst, e.raw, dt) }); err != nil {
				h.t.Errorf("%s: %v", name, err)
				continue
			}
			h.exact(name, h.download(g.dst), e.want)
			h.intact(name, g)
		}
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F64} {
		name := fmt.Sprintf("upload %s to %s", dt, dt)
		e := h.encode(dt, 1001)
		g := h.guarded(dt, 7, 11, 13)
		if err := call(func() error { return h.be.Upload(g.dst, e.raw, dt) }); err != nil {
			h.t.Errorf("%s: %v", name, err)
			continue
		}
		h.exact(name, h.download(g.dst), e.want)
		h.intact(name, g)
	}

	data := h.randn(5003, 3)
	t := h.own(h.ops.Upload(data, 5003))
	h.exact("Ops upload/download", h.ops.Download(t), data)
	h.ok("Ops upload/download")
	got := make([]float32, 5003)
	if err := call(func() error { return h.be.Download(got, t) }); err != nil {
		h.t.Errorf("download: %v", err)
	}
	h.exact("download", got, data)
	if err := call(func() error { return h.be.Download(make([]float32, 5), t) }); err == nil {
		h.t.Errorf("download into a short slice: no error")
	}
	if err := call(func() error { return h.be.Upload(t, make([]byte, 12), dtype.F32) }); err == nil {
		h.t.Errorf("upload of 3 values into %v: no error", t)
	}
}

// testCast: every storage type to F32 exactly; F32 to BF16 rounds to
// nearest even; every other float type to BF16 and F16 as through F32;
// same-type casts copy.
func testCast(h *harness) {
	shape := []int{3, 5, 67}
	n := numElems(shape)
	for _, dt := range storageTypes {
		e := h.encode(dt, n)
		src := h.inputBytes(e.raw, dt, shape...)
		for _, got := range h.both("cast "+dt.String()+" to F32", dtype.F32, shape,
			func() *tensor.Tensor { return h.ops.Cast(src, dtype.F32) },
			func(dst *tensor.Tensor) error { return h.be.Cast(dst, src) }) {
			h.exact("cast "+dt.String()+" to F32", got, e.want)
		}
	}
	testCastNarrow(h)

	data := h.randn(n, 10)
	// Values exactly halfway between two bfloat16s (ties), both parities,
	// the largest float (rounds to +Inf), infinities and NaN.
	data[0] = math.Float32frombits(0x3f808000)
	data[1] = math.Float32frombits(0x3f818000)
	data[2] = math.MaxFloat32
	data[3] = float32(math.Inf(-1))
	data[4] = float32(math.NaN())
	data[5] = float32(math.Copysign(0, -1))
	want := make([]float32, n)
	for i, v := range data {
		want[i] = roundBF16(v)
	}
	x := h.input(data, shape...)
	var bf *tensor.Tensor
	for _, got := range h.both("cast F32 to BF16", dtype.BF16, shape,
		func() *tensor.Tensor { bf = h.ops.Cast(x, dtype.BF16); return bf },
		func(dst *tensor.Tensor) error { return h.be.Cast(dst, x) }) {
		h.exact("cast F32 to BF16", got, want)
	}
	if !h.ok("cast F32 to BF16") || bf == nil {
		return
	}
	for _, got := range h.both("cast BF16 to BF16", dtype.BF16, shape,
		func() *tensor.Tensor { return h.ops.Copy(bf) },
		func(dst *tensor.Tensor) error { return h.be.Cast(dst, bf) }) {
		h.exact("copy BF16", got, want)
	}
	for _, got := range h.both("copy F32", dtype.F32, shape,
		func() *tensor.Tensor { return h.ops.Copy(x) },
		func(dst *tensor.Tensor) error { return h.be.Cast(dst, x) }) {
		h.exact("copy F32", got, data)
	}
}

// testCastNarrow: a float type to a 16-bit one (fp16 weights multiplied in
// bf16) rounds as F32 to that type would, over sizes that cross any
// chunking.
func testCastNarrow(h *harness) {
	round := map[dtype.DType]func(float32) float32{
		dtype.BF16: roundBF16,
		dtype.F16:  func(v float32) float32 { return dtype.F16ToF32(dtype.F32ToF16(v)) },
	}
	for _, to := range []dtype.DType{dtype.BF16, dtype.F16} {
		for _, from := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2, dtype.F64} {
			if from == to {
				continue
			}
			for _, n := range []int{1005, 100003} {
				name := fmt.Sprintf("cast %v to %v [%d]", from, to, n)
				e := h.encode(from, n)
				src := h.inputBytes(e.raw, from, n)
				want := make([]float32, n)
				for i, v := range e.want {
					want[i] = round[to](v)
				}
				for _, got := range h.both(name, to, []int{n},
					func() *tensor.Tensor { return h.ops.Cast(src, to) },
					func(dst *tensor.Tensor) error { return h.be.Cast(dst, src) }) {
					h.exact(name, got, want)
				}
			}
		}
	}
}

// testFill: every element takes the value, whatever the size.
func testFill(h *harness) {
	for _, n := range []int{1, 31, 300007} {
		for _, v := range []float32{0, -2.5, float32(math.Inf(1)), float32(math.NaN())} {
			name := fmt.Sprintf("fill [%d] with %g", n, v)
			want := make([]float32, n)
			for i := range want {
				want[i] = v
			}
			for _, got := range h.both(name, dtype.F32, []int{n},
				func() *tensor.Tensor {
					t := h.ops.Zeros(n)
					if h.ops.Err() == nil {
						h.ops.Fail(h.be.Fill(t, v))
					}
					return t
				},
				func(dst *tensor.Tensor) error { return h.be.Fill(dst, v) }) {
				h.exact(name, got, want)
			}
		}
	}
	g := h.guarded(dtype.BF16, 5, 9)
	if err := call(func() error { return h.be.Fill(g.dst, 1.5) }); err != nil {
		h.t.Errorf("fill BF16: %v", err)
		return
	}
	want := make([]float32, 45)
	for i := range want {
		want[i] = 1.5
	}
	h.exact("fill BF16", h.download(g.dst), want)
	h.intact("fill BF16", g)
}

// broadcastPairs are the shapes the binary ops meet: same shapes, a bias
// over leading dims, an adaLN modulation [B, 1, C], a per-channel scale
// [1, C, 1, 1, 1], an outer product, scalars, size-1 and empty dims.
var broadcastPairs = [][2][]int{
	{{7}, {7}},
	{{}, {}},
	{{3, 5}, {3, 5}},
	{{2, 3, 4, 5}, {2, 3, 4, 5}},
	{{100003}, {100003}},
	{{4, 7, 33}, {33}},
	{{4, 7, 33}, {1, 1, 33}},
	{{4, 7, 33}, {7, 33}},
	{{64, 1030}, {1030}},
	{{2, 9, 16}, {2, 1, 16}},
	{{2, 6, 3, 4, 5}, {1, 6, 1, 1, 1}},
	{{2, 6, 5}, {6, 1}},
	{{2, 6, 1000}, {2, 6, 1}},
	{{5}, {3, 5}},
	{{3, 1}, {1, 4}},
	{{1, 4, 1}, {3, 1, 5}},
	{{3, 4}, {1}},
	{{3, 4}, {}},
	{{}, {3, 4}},
	{{1, 3, 1, 5}, {1, 1, 1, 5}},
	{{2, 1, 3, 1, 2, 1, 4}, {5, 1, 1, 4}},
	{{0, 5}, {5}},
}

// testBinary: a+b and a·b are one correctly rounded float32 operation, so
// the float64 reference rounded to float32 must match bit for bit (double
// rounding through float64 is harmless for + and ·).
func testBinary(h *harness) {
	for _, pair := range broadcastPairs {
		as, bs := pair[0], pair[1]
		a := h.randn(numElems(as), 2)
		b := h.randn(numElems(bs), 2)
		ta, tb := h.input(a, as...), h.input(b, bs...)
		for _, mul := range []bool{false, true} {
			want, shape := refBinary(a, as, b, bs, mul)
			name := fmt.Sprintf("add %v + %v", as, bs)
			op, kernel := h.ops.Add, h.be.Add
			if mul {
				name = fmt.Sprintf("mul %v · %v", as, bs)
				op, kernel = h.ops.Mul, h.be.Mul
			}
			for _, got := range h.both(name, dtype.F32, shape,
				func() *tensor.Tensor { return op(ta, tb) },
				func(dst *tensor.Tensor) error { return kernel(dst, ta, tb) }) {
				h.exact(name, got, rounded(want))
			}
		}
	}
}

// testBinaryInPlace: dst aliasing a, through Ops (AddInPlace, MulInPlace)
// and directly.
func testBinaryInPlace(h *harness) {
	for _, pair := range broadcastPairs {
		as, bs := pair[0], pair[1]
		if !sameShape(broadcastShape(as, bs), as) {
			continue
		}
		a := h.randn(numElems(as), 2)
		b := h.randn(numElems(bs), 2)
		tb := h.input(b, bs...)
		for _, mul := range []bool{false, true} {
			want, _ := refBinary(a, as, b, bs, mul)
			name := fmt.Sprintf("in place %v += %v (mul %v)", as, bs, mul)
			ta := h.input(a, as...)
			if mul {
				h.ops.MulInPlace(ta, tb)
			} else {
				h.ops.AddInPlace(ta, tb)
			}
			if h.ok(name) {
				h.exact(name, h.download(ta), rounded(want))
			}
			tc := h.input(a, as...)
			kernel := h.be.Add
			if mul {
				kernel = h.be.Mul
			}
			if err := call(func() error { return kernel(tc, tc, tb) }); err != nil {
				h.t.Errorf("%s direct: %v", name, err)
				continue
			}
			h.exact(name+" direct", h.download(tc), rounded(want))
		}
	}
}

var unaryShapes = [][]int{{1}, {3, 7}, {2, 5, 67}, {200003}}

// testAffine: a·scale + shift is at most two roundings (one with a fused
// multiply-add): u·|a·scale| + u·|result|.
func testAffine(h *harness) {
	for _, shape := range unaryShapes {
		for _, c := range [][2]float32{{1, 0}, {0.5, 1}, {-3.25, 0.125}, {0, 7}} {
			scale, shift := c[0], c[1]
			a := h.randn(numElems(shape), 4)
			want, tol := make([]float64, len(a)), make([]float64, len(a))
			for i, v := range a {
				p := float64(v) * float64(scale)
				want[i] = p + float64(shift)
				tol[i] = u*math.Abs(p) + u*math.Abs(want[i])
			}
			name := fmt.Sprintf("affine %v ·%g %+g", shape, scale, shift)
			ta := h.input(a, shape...)
			for _, got := range h.both(name, dtype.F32, shape,
				func() *tensor.Tensor { return h.ops.Affine(ta, scale, shift) },
				func(dst *tensor.Tensor) error { return h.be.Affine(dst, ta, scale, shift) }) {
				h.near(name, got, want, tol)
			}
			h.ops.AffineInPlace(ta, scale, shift)
			if h.ok(name + " in place") {
				h.near(name+" in place", h.download(ta), want, tol)
			}
		}
	}
}

// testClamp: exact.
func testClamp(h *harness) {
	for _, shape := range unaryShapes {
		a := h.randn(numElems(shape), 3)
		for _, c := range [][2]float32{{-1, 1}, {0, 2.5}, {-10, -9}} {
			want := make([]float32, len(a))
			for i, v := range a {
				want[i] = min(max(v, c[0]), c[1])
			}
			name := fmt.Sprintf("clamp %v to %v", shape, c)
			ta := h.input(a, shape...)
			for _, got := range h.both(name, dtype.F32, shape,
				func() *tensor.Tensor { return h.ops.Clamp(ta, c[0], c[1]) },
				func(dst *tensor.Tensor) error { return h.be.Clamp(dst, ta, c[0], c[1]) }) {
				h.exact(name, got, want)
			}
			if err := call(func() error { return h.be.Clamp(ta, ta, c[0], c[1]) }); err != nil {
				h.t.Errorf("%s in place: %v", name, err)
				continue
			}
			h.exact(name+" in place", h.download(ta), want)
		}
	}
}

// unarySpec is one elementwise function: its definition, the inputs it is
// tested on, and its tolerance.
type unarySpec struct {
	op     tensor.UnaryOp
	f      func(x float64) float64
	lo, hi float64   // range of random inputs
	extra  []float32 // special inputs
	// rel and perX: tolerance rel·|f(x)| + perX·|x|. Transcendentals get
	// 1e-6 relative (PyTorch's float32 kernels are within a few ulps); the
	// GELUs and SiLU also get 4u·|x| for the cancellation in 1 + tanh or
	// 1 + erf that a float32 evaluation of the textbook formula suffers.
	// Single correctly rounded operations are exact.
	rel, perX float64
	exact     bool
}

var unarySpecs = []unarySpec{
	{op: tensor.SiLU, f: func(x float64) float64 { return x / (1 + math.Exp(-x)) }, lo: -20, hi: 20,
		extra: []float32{0, -100, 100, 1e-8, -88}, rel: 1e-6, perX: 4 * u},
	{op: tensor.GELUTanh, f: func(x float64) float64 {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}, lo: -8, hi: 8, extra: []float32{0, -20, 20, 1e-7, -1e-7}, rel: 1e-6, perX: 4 * u},
	{op: tensor.GELUErf, f: func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) },
		lo: -8, hi: 8, extra: []float32{0, -20, 20, 1e-7}, rel: 1e-6, perX: 4 * u},
	{op: tensor.Sigmoid, f: func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }, lo: -30, hi: 30,
		extra: []float32{0, -80, 80}, rel: 1e-6},
	{op: tensor.Tanh, f: math.Tanh, lo: -10, hi: 10, extra: []float32{0, 1e-8, -1e-5, 50}, rel: 1e-6},
	{op: tensor.ReLU, f: func(x float64) float64 { return math.Max(x, 0) }, lo: -5, hi: 5, extra: []float32{0}, exact: true},
	{op: tensor.Exp, f: math.Exp, lo: -80, hi: 80, extra: []float32{0, 88, 89, -87}, rel: 1e-6},
	{op: tensor.Neg, f: func(x float64) float64 { return -x }, lo: -5, hi: 5, exact: true},
	{op: tensor.Sqrt, f: math.Sqrt, lo: 0, hi: 1e4, extra: []float32{0, 1e-30, -1}, exact: true},
	{op: tensor.Square, f: func(x float64) float64 { return x * x }, lo: -1e3, hi: 1e3, extra: []float32{1e20, 1e-20}, exact: true},
}

// minNormal lets a result below float32's normal range be flushed to zero,
// as GPU kernels may.
const minNormal = 0x1p-126

func testUnary(h *harness) {
	for _, s := range unarySpecs {
		for _, shape := range unaryShapes {
			n := numElems(shape)
			x := h.uniform(n, s.lo, s.hi)
			copy(x, s.extra[:min(len(s.extra), n)])
			want, tol := make([]float64, n), make([]float64, n)
			for i, v := range x {
				want[i] = s.f(float64(v))
				tol[i] = s.rel*math.Abs(want[i]) + s.perX*math.Abs(float64(v)) + minNormal
			}
			name := fmt.Sprintf("%v %v", s.op, shape)
			tx := h.input(x, shape...)
			check := func(name string, got []float32) {
				if s.exact {
					h.exact(name, got, rounded(want))
				} else {
					h.near(name, got, want, tol)
				}
			}
			for _, got := range h.both(name, dtype.F32, shape,
				func() *tensor.Tensor { return h.ops.Unary(tx, s.op) },
				func(dst *tensor.Tensor) error { return h.be.Unary(dst, tx, s.op) }) {
				check(name, got)
			}
			h.ops.UnaryInPlace(tx, s.op)
			if h.ok(name + " in place") {
				check(name+" in place", h.download(tx))
			}
		}
	}
}
