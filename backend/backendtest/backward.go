package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"

	"ferry/dtype"
	"ferry/tensor"
)

// The backward kernels are checked against central finite differences of
// their FORWARD op, evaluated in float64 by the references of
// backward_reference.go: with a random upstream gradient g and
// L = Σ g·forward(inputs), each analytic gradient must match
// (L(p+h) - L(p-h))/2h element by element. Weight gradients are
// accumulated into destinations filled beforehand, so += is checked too.
//
// Tolerances: each is the error bound of a float32 evaluation of the
// gradient's formula (stated next to the case), plus twice fdGrad's bound
// on the finite difference itself, which stays near 1e-9 relative: a
// correct float32 kernel passes, a wrong index, sign or term fails.

// testBackward checks every backward kernel but attention's.
func testBackward(h *harness) {
	backLinear(h)
	backLayerNorm(h)
	backRMSNorm(h)
	backUnary(h)
	backRope(h)
	backSumTo(h)
	backModulation(h)
	backPermute(h)
	backBadShapes(h)
}

// prefilled is a guarded destination holding data: a weight gradient
// that the kernel must add into.
func (h *harness) prefilled(data []float32, shape ...int) *guarded {
	h.t.Helper()
	g := h.guarded(dtype.F32, shape...)
	if err := call(func() error { return h.be.Upload(g.dst, f32Bytes(data), dtype.F32) }); err != nil {
		h.t.Fatalf("fill %v: %v", shape, err)
	}
	return g
}

// gradCheck is one gradient a case compares: where the kernel wrote it
// and what it must be.
type gradCheck struct {
	what      string
	g         *guarded
	want, tol []float64
}

// checkGrads compares each gradient and checks its guards.
func (h *harness) checkGrads(name string, checks ...gradCheck) {
	h.t.Helper()
	for _, c := range checks {
		if c.g == nil {
			continue
		}
		h.near(name+" "+c.what, h.download(c.g.dst), c.want, c.tol)
		h.intact(name+" "+c.what, c.g)
	}
}

// withFD is want = grad + pre (the destination's prior contents, nil for
// none) and its tolerance: tol, twice the finite difference's own bound,
// and, for an accumulated gradient, u·|want| for rounding the sum.
func withFD(grad, bound []float64, pre []float32, tol []float64) (want, tols []float64) {
	want, tols = make([]float64, len(grad)), make([]float64, len(grad))
	for i := range grad {
		want[i] = grad[i]
		tols[i] = tol[i] + 2*bound[i]
		if pre != nil {
			want[i] += float64(pre[i])
			tols[i] += u * math.Abs(want[i])
		}
	}
	return want, tols
}

// concat64 widens and joins slices (the parameters finite differences
// perturb) and returns where each starts.
func concat64(parts ...[]float32) ([]float64, []int) {
	var p []float64
	var at []int
	for _, s := range parts {
		at = append(at, len(p))
		p = append(p, widen(s)...)
	}
	return p, append(at, len(p))
}

// optGuard is a prefilled gradient destination when want is set, else
// nil (a gradient the kernel must skip).
func (h *harness) optGuard(want bool, pre []float32, shape ...int) *guarded {
	if !want {
		return nil
	}
	return h.prefilled(pre, shape...)
}

// dstOf is g's tensor, or nil.
func dstOf(g *guarded) *tensor.Tensor {
	if g == nil {
		return nil
	}
	return g.dst
}

type linearBackCase struct {
	lead       []int // leading dims of x and dy
	k, n       int
	dx, dw, db bool
	bf16       bool // w stored as BF16 (only dx reads it)
	// analytic: too large for finite differences (each would run the
	// whole forward); checked against the float64 products dy·w, dyᵀ·x
	// and Σ dy instead. These shapes take the GEMMs' blocked paths, with
	// edges that no tile divides; the small cases' finite differences
	// settle that these are the right products.
	analytic bool
}

// backLinear: y = x·wᵀ + b. Tolerances are those of float32 dot products
// (dotTol): dx[i,p] sums n products dy·w, dw[j,p] m products dy·x onto
// its prior value, db[j] m values of dy onto its prior value.
func backLinear(h *harness) {
	cases := []linearBackCase{
		{lead: []int{3}, k: 5, n: 4, dx: true, dw: true, db: true},
		{lead: []int{2, 3}, k: 7, n: 6, dx: true, dw: true},
		{lead: []int{1}, k: 1, n: 1, dx: true, dw: true, db: true},
		{lead: []int{4, 1}, k: 9, n: 1, dx: true, db: true},
		{lead: []int{5}, k: 33, n: 17, dx: true, dw: true, db: true},
		{lead: []int{2, 2}, k: 6, n: 3, dw: true, db: true},
		{lead: []int{3, 2}, k: 8, n: 5, dx: true, bf16: true},
		{lead: []int{2, 37}, k: 70, n: 45, dx: true, dw: true, db: true, analytic: true},
		{lead: []int{1, 100}, k: 33, n: 600, dx: true, dw: true, db: true, analytic: true},
		{lead: []int{3, 5}, k: 300, n: 36, dx: true, bf16: true, analytic: true},
	}
	for _, c := range cases {
		backLinearCase(h, c)
	}
}

func backLinearCase(h *harness, c linearBackCase) {
	m := numElems(c.lead)
	xs := append(append([]int(nil), c.lead...), c.k)
	ys := append(append([]int(nil), c.lead...), c.n)
	x, w, dy := h.randn(m*c.k, 1), h.randn(c.n*c.k, 1), h.randn(m*c.n, 1)
	b, preW, preB := h.randn(c.n, 1), h.randn(c.n*c.k, 1), h.randn(c.n, 1)
	var tw *tensor.Tensor
	if c.bf16 {
		for i := range w {
			w[i] = roundBF16(w[i])
		}
		tw = h.inputBytes(bf16Bytes(w), dtype.BF16, c.n, c.k)
	} else {
		tw = h.input(w, c.n, c.k)
	}
	tx, tdy := h.input(x, xs...), h.input(dy, ys...)

	p, at := concat64(x, w, b)
	var grad, bound []float64
	if c.analytic {
		grad, bound = linearGrad64(x, w, dy, m, c.n, c.k), make([]float64, len(p))
	} else {
		grad, bound = fdGrad(p, widen(dy), func() []float64 {
			return linear64(p[at[0]:at[1]], p[at[1]:at[2]], p[at[2]:at[3]], m, c.n, c.k)
		})
	}
	tdx, tdw, tdb := make([]float64, m*c.k), make([]float64, c.n*c.k), make([]float64, c.n)
	for i := range m {
		for j := range c.n {
			d := math.Abs(float64(dy[i*c.n+j]))
			for q := range c.k {
				tdx[i*c.k+q] += d * math.Abs(float64(w[j*c.k+q]))
				tdw[j*c.k+q] += d * math.Abs(float64(x[i*c.k+q]))
			}
			tdb[j] += d
		}
	}
	for i := range tdx {
		tdx[i] = dotTol(c.n, tdx[i], 0)
	}
	for i := range tdw {
		tdw[i] = dotTol(m, tdw[i], float64(preW[i]))
	}
	for i := range tdb {
		tdb[i] = dotTol(m, tdb[i], float64(preB[i]))
	}
	wantDX, tolDX := withFD(grad[at[0]:at[1]], bound[at[0]:at[1]], nil, tdx)
	wantDW, tolDW := withFD(grad[at[1]:at[2]], bound[at[1]:at[2]], preW, tdw)
	wantDB, tolDB := withFD(grad[at[2]:at[3]], bound[at[2]:at[3]], preB, tdb)

	name := fmt.Sprintf("linear backward x %v w [%d %d] dx %v dw %v db %v bf16 %v analytic %v", xs, c.n, c.k, c.dx, c.dw, c.db, c.bf16, c.analytic)
	// Through Ops, then directly; each with its own prefilled gradients.
	for _, direct := range []bool{false, true} {
		dw, db := h.optGuard(c.dw, preW, c.n, c.k), h.optGuard(c.db, preB, c.n)
		var dxg *guarded
		if direct {
			if c.dx {
				dxg = h.guarded(dtype.F32, xs...)
			}
			if err := call(func() error { return h.be.LinearBackward(dstOf(dxg), dstOf(dw), dstOf(db), tdy, tx, tw) }); err != nil {
				h.t.Errorf("%s direct: %v", name, err)
				continue
			}
		} else {
			r := h.own(h.ops.LinearBackward(tdy, tx, tw, dstOf(dw), dstOf(db), c.dx))
			if !h.ok(name + " via Ops") {
				continue
			}
			if c.dx {
				h.near(name+" dx via Ops", h.download(r), wantDX, tolDX)
			} else if r != nil {
				h.t.Errorf("%s via Ops: dx %v returned when not wanted", name, r)
			}
		}
		h.checkGrads(fmt.Sprintf("%s (direct %v)", name, direct),
			gradCheck{"dx", dxg, wantDX, tolDX}, gradCheck{"dw", dw, wantDW, tolDW}, gradCheck{"db", db, wantDB, tolDB})
	}
}

// linearGrad64 is the gradient of Σ dy·(x·wᵀ + b) in float64, laid out
// as concat64(x, w, b): dy·w, dyᵀ·x, Σ dy.
func linearGrad64(x, w, dy []float32, m, n, k int) []float64 {
	g := make([]float64, m*k+n*k+n)
	dx, dw, db := g[:m*k], g[m*k:m*k+n*k], g[m*k+n*k:]
	for i := range m {
		for j := range n {
			d := float64(dy[i*n+j])
			for q := range k {
				dx[i*k+q] += d * float64(w[j*k+q])
				dw[j*k+q] += d * float64(x[i*k+q])
			}
			db[j] += d
		}
	}
	return g
}

// bf16Bytes encodes values that are exact in bfloat16.
func bf16Bytes(data []float32) []byte {
	raw := make([]byte, 2*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint16(raw[2*i:], uint16(math.Float32bits(v)>>16))
	}
	return raw
}

type normBackCase struct {
	shape   []int
	eps     float32
	weights bool    // the forward has a weight (else no affine)
	dw, db  bool    // weight gradients wanted (dw without weights: a weight of ones)
	noDX    bool    // the direct call skips dx
	offset  float64 // added to the inputs: a large mean stresses the statistics
	// analytic: large enough that the CPU backend sums the weight
	// gradients in several blocks of rows; checked against the closed
	// forms (layerNormGrad64, rmsNormGrad64) that TestNormGradients checks
	// against finite differences.
	analytic bool
}

// normInputs draws x (shifted by the offset), dy and the parameters.
func normInputs(h *harness, c normBackCase) (x, dy []float32) {
	x, dy = h.randn(numElems(c.shape), 1), h.randn(numElems(c.shape), 1)
	if c.offset != 0 {
		for i := range x {
			x[i] = float32(c.offset + 0.1*float64(x[i]))
		}
	}
	return x, dy
}

// ones is n ones: the weight a norm without one behaves as.
func ones(n int) []float32 {
	o := make([]float32, n)
	for i := range o {
		o[i] = 1
	}
	return o
}

// backLayerNorm: with and without affine, weight gradients on and off,
// a single feature (dx is then 0), a large mean.
func backLayerNorm(h *harness) {
	cases := []normBackCase{
		{shape: []int{1, 8}, eps: 0.5, weights: true, dw: true, db: true},
		{shape: []int{3, 7}, eps: 1e-6, db: true},
		{shape: []int{2, 3, 33}, eps: 1e-5, weights: true, dw: true},
		{shape: []int{4, 1}, eps: 1e-5, weights: true, dw: true, db: true},
		{shape: []int{6, 20}, eps: 1e-6, weights: true, dw: true, db: true, offset: 100},
		{shape: []int{5, 1, 16}, eps: 1e-6},
		{shape: []int{3, 10}, eps: 1e-6, weights: true, dw: true, db: true, noDX: true},
		{shape: []int{2, 67, 1000}, eps: 1e-6, weights: true, dw: true, db: true, analytic: true},
	}
	for _, c := range cases {
		n := c.shape[len(c.shape)-1]
		x, dy := normInputs(h, c)
		w, b := ones(n), h.randn(n, 1)
		var tw *tensor.Tensor
		if c.weights {
			w = h.randn(n, 1)
			tw = h.input(w, n)
		}
		preW, preB := h.randn(n, 1), h.randn(n, 1)
		p, at := concat64(x, w, b)
		grad, bound := layerNormGrads(c, p, at, x, w, dy)
		tdx, tdw, tdb := layerNormBackTol(x, w, dy, n, float64(c.eps), preW, preB)
		wantDX, tolDX := withFD(grad[at[0]:at[1]], bound[at[0]:at[1]], nil, tdx)
		wantDW, tolDW := withFD(grad[at[1]:at[2]], bound[at[1]:at[2]], preW, tdw)
		wantDB, tolDB := withFD(grad[at[2]:at[3]], bound[at[2]:at[3]], preB, tdb)

		name := fmt.Sprintf("layernorm backward %v eps %g w %v dw %v db %v offset %g analytic %v", c.shape, c.eps, c.weights, c.dw, c.db, c.offset, c.analytic)
		tx, tdy := h.input(x, c.shape...), h.input(dy, c.shape...)
		dw, db := h.optGuard(c.dw, preW, n), h.optGuard(c.db, preB, n)
		r := h.own(h.ops.LayerNormBackward(tdy, tx, tw, dstOf(dw), dstOf(db), c.eps))
		if h.ok(name + " via Ops") {
			h.near(name+" dx via Ops", h.download(r), wantDX, tolDX)
			h.checkGrads(name+" via Ops", gradCheck{"dw", dw, wantDW, tolDW}, gradCheck{"db", db, wantDB, tolDB})
		}
		dw, db = h.optGuard(c.dw, preW, n), h.optGuard(c.db, preB, n)
		var dxg *guarded
		if !c.noDX {
			dxg = h.guarded(dtype.F32, c.shape...)
		}
		if err := call(func() error {
			return h.be.LayerNormBackward(dstOf(dxg), dstOf(dw), dstOf(db), tdy, tx, tw, c.eps)
		}); err != nil {
			h.t.Errorf("%s direct: %v", name, err)
			continue
		}
		h.checkGrads(name+" direct", gradCheck{"dx", dxg, wantDX, tolDX}, gradCheck{"dw", dw, wantDW, tolDW}, gradCheck{"db", db, wantDB, tolDB})
	}
}

// layerNormGrads is the gradient of Σ dy·LayerNorm(x; w, b) over
// p = concat64(x, w, b), by finite differences or, for an analytic case,
// in closed form (w is ones when the case has no weight: the same).
func layerNormGrads(c normBackCase, p []float64, at []int, x, w, dy []float32) (grad, bound []float64) {
	n := c.shape[len(c.shape)-1]
	if c.analytic {
		return layerNormGrad64(x, w, dy, n, float64(c.eps)), make([]float64, len(p))
	}
	return fdGrad(p, widen(dy), func() []float64 {
		return layerNorm64(p[at[0]:at[1]], p[at[1]:at[2]], p[at[2]:at[3]], n, float64(c.eps))
	})
}

// layerNormBackTol bounds a float32 evaluation of LayerNorm's gradients.
// Per row, with g = dy·w, x̂ = (x-μ)·rstd and A = (|x-μ| + |μ| + σ)·rstd
// (x̂'s float32 error is within (n+8)·u·A, as refLayerNorm argues):
//
//	dx = rstd·(g - mean(g) - x̂·mean(g·x̂)) is within
//	(n+8)·u·rstd·(|g| + mean|g| + 2A·mean|g·x̂| + A·mean(|g|·A)) + (n+8)·u·|dx|
//	(the means' sums, x̂'s error through both x̂ and mean(g·x̂), and rstd's);
//	dw = pre + Σ dy·x̂ within (rows+4)·u·Σ|dy·x̂| + (n+8)·u·Σ|dy|·A + 2u·|pre|;
//	db = pre + Σ dy within dotTol(rows, Σ|dy|, pre).
func layerNormBackTol(x, w, dy []float32, n int, eps float64, preW, preB []float32) (tdx, tdw, tdb []float64) {
	rows := len(x) / n
	tdx, tdw, tdb = make([]float64, len(x)), make([]float64, n), make([]float64, n)
	xh, a := make([]float64, n), make([]float64, n)
	nu := float64(n+8) * u
	for r := range rows {
		row := x[r*n : (r+1)*n]
		mean, variance := rowStats(row)
		rstd, sd := 1/math.Sqrt(variance+eps), math.Sqrt(variance)
		var mg, mgx, mga, sg, sgx float64
		for j, v := range row {
			xh[j] = (float64(v) - mean) * rstd
			a[j] = (math.Abs(float64(v)-mean) + math.Abs(mean) + sd) * rstd
			g := math.Abs(float64(dy[r*n+j]) * float64(w[j]))
			mg += g / float64(n)
			mgx += g * math.Abs(xh[j]) / float64(n)
			mga += g * a[j] / float64(n)
			sg += float64(dy[r*n+j]) * float64(w[j])
			sgx += float64(dy[r*n+j]) * float64(w[j]) * xh[j]
		}
		for j := range row {
			d := float64(dy[r*n+j])
			g := d * float64(w[j])
			dx := rstd * (g - sg/float64(n) - xh[j]*sgx/float64(n))
			tdx[r*n+j] = nu*rstd*(math.Abs(g)+mg+2*a[j]*mgx+a[j]*mga) + nu*math.Abs(dx)
			tdw[j] += float64(rows+4)*u*math.Abs(d*xh[j]) + nu*math.Abs(d)*a[j]
			tdb[j] += math.Abs(d)
		}
	}
	for j := range n {
		tdw[j] += 2 * u * math.Abs(float64(preW[j]))
		tdb[j] = dotTol(rows, tdb[j], float64(preB[j]))
	}
	return tdx, tdw, tdb
}

// backRMSNorm: with and without a weight (and dw of a weight of ones),
// a single feature, a large mean.
func backRMSNorm(h *harness) {
	cases := []normBackCase{
		{shape: []int{1, 8}, eps: 0.5, weights: true, dw: true},
		{shape: []int{3, 7}, eps: 1e-6},
		{shape: []int{2, 5, 16}, eps: 1e-6, weights: true, dw: true},
		{shape: []int{4, 1}, eps: 1e-5, weights: true, dw: true},
		{shape: []int{2, 3}, eps: 1e-6, weights: true, dw: true, offset: 50},
		{shape: []int{3, 1, 9}, eps: 1e-6, dw: true},
		{shape: []int{3, 12}, eps: 1e-6, weights: true, dw: true, noDX: true},
		{shape: []int{131, 1001}, eps: 1e-6, weights: true, dw: true, analytic: true},
	}
	for _, c := range cases {
		n := c.shape[len(c.shape)-1]
		x, dy := normInputs(h, c)
		w := ones(n)
		var tw *tensor.Tensor
		if c.weights {
			w = h.randn(n, 1)
			tw = h.input(w, n)
		}
		preW := h.randn(n, 1)
		p, at := concat64(x, w)
		var grad, bound []float64
		if c.analytic {
			grad, bound = rmsNormGrad64(x, w, dy, n, float64(c.eps)), make([]float64, len(p))
		} else {
			grad, bound = fdGrad(p, widen(dy), func() []float64 {
				return rmsNorm64(p[at[0]:at[1]], p[at[1]:at[2]], n, float64(c.eps))
			})
		}
		tdx, tdw := rmsNormBackTol(x, w, dy, n, float64(c.eps), preW)
		wantDX, tolDX := withFD(grad[at[0]:at[1]], bound[at[0]:at[1]], nil, tdx)
		wantDW, tolDW := withFD(grad[at[1]:at[2]], bound[at[1]:at[2]], preW, tdw)

		name := fmt.Sprintf("rmsnorm backward %v eps %g w %v dw %v offset %g analytic %v", c.shape, c.eps, c.weights, c.dw, c.offset, c.analytic)
		tx, tdy := h.input(x, c.shape...), h.input(dy, c.shape...)
		dw := h.optGuard(c.dw, preW, n)
		r := h.own(h.ops.RMSNormBackward(tdy, tx, tw, dstOf(dw), c.eps))
		if h.ok(name + " via Ops") {
			h.near(name+" dx via Ops", h.download(r), wantDX, tolDX)
			h.checkGrads(name+" via Ops", gradCheck{"dw", dw, wantDW, tolDW})
		}
		dw = h.optGuard(c.dw, preW, n)
		var dxg *guarded
		if !c.noDX {
			dxg = h.guarded(dtype.F32, c.shape...)
		}
		if err := call(func() error { return h.be.RMSNormBackward(dstOf(dxg), dstOf(dw), tdy, tx, tw, c.eps) }); err != nil {
			h.t.Errorf("%s direct: %v", name, err)
			continue
		}
		h.checkGrads(name+" direct", gradCheck{"dx", dxg, wantDX, tolDX}, gradCheck{"dw", dw, wantDW, tolDW})
	}
}

// rmsNormBackTol bounds a float32 evaluation of RMSNorm's gradients. Per
// row, with r = 1/sqrt(mean(x²)+eps) (within (n+8)·u relative, as
// refRMSNorm argues), x̂ = x·r and g = dy·w:
//
//	dx = r·(g - x̂·mean(g·x̂)) is within (2n+16)·u·r·(|g| + 2|x̂|·mean|g·x̂|)
//	+ (n+8)·u·|dx| (x̂'s error enters twice, mean's sum once, r's once);
//	dw = pre + Σ dy·x̂ within (rows+n+12)·u·Σ|dy·x̂| + 2u·|pre|.
func rmsNormBackTol(x, w, dy []float32, n int, eps float64, preW []float32) (tdx, tdw []float64) {
	rows := len(x) / n
	tdx, tdw = make([]float64, len(x)), make([]float64, n)
	for r := range rows {
		row := x[r*n : (r+1)*n]
		var ms float64
		for _, v := range row {
			ms += float64(v) * float64(v)
		}
		scale := 1 / math.Sqrt(ms/float64(n)+eps)
		var mgx, sgx float64
		for j, v := range row {
			g := float64(dy[r*n+j]) * float64(w[j])
			mgx += math.Abs(g*float64(v)*scale) / float64(n)
			sgx += g * float64(v) * scale / float64(n)
		}
		for j, v := range row {
			d := float64(dy[r*n+j])
			g, xh := d*float64(w[j]), float64(v)*scale
			dx := scale * (g - xh*sgx)
			tdx[r*n+j] = float64(2*n+16)*u*scale*(math.Abs(g)+2*math.Abs(xh)*mgx) + float64(n+8)*u*math.Abs(dx)
			tdw[j] += float64(rows+n+12) * u * math.Abs(d*xh)
		}
	}
	for j := range n {
		tdw[j] += 2 * u * math.Abs(float64(preW[j]))
	}
	return tdx, tdw
}
