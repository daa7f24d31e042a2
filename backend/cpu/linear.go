package cpu

import (
	"fmt"
	"sync"

	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/tensor"
)

// bigGEMM is the work (in flops) above which one product is handed to the
// gemm.Impl alone, trusting it to use every core; smaller products are
// spread over the pool one per worker instead.
const bigGEMM = 1 << 22

// Linear sets dst[..., N] = x[..., K] · w[N, K]ᵀ + bias[N]. w may be F32,
// BF16, F16, F8_E4M3 or F8_E5M2. With 16- and 8-bit weights the result is
// that of the weights widened exactly and multiplied in float32, except
// BF16 weights under compute dtype BF16 (see SetComputeDType): x is then
// rounded to bf16 too and the bf16 GEMM runs. A weight packed by PackRows
// is read packed (the same sums as dense).
func (be *Backend) Linear(dst, x, w, bias *tensor.Tensor) error {
	if w == nil || x == nil || dst == nil {
		return fmt.Errorf("cpu: linear with nil tensor")
	}
	d, err := f32("dst", dst)
	if err != nil {
		return err
	}
	xs, err := f32("input", x)
	if err != nil {
		return err
	}
	if err := checkLinear(dst, x, w, bias); err != nil {
		return err
	}
	n, k := w.Dim(0), w.Dim(1)
	m := x.Len() / max(k, 1)
	if k == 0 {
		m = dst.Len() / max(n, 1)
	}
	bs, err := optF32("bias", bias)
	if err != nil {
		return err
	}
	var ws []float32
	var wr []byte // a dense 16- or 8-bit weight's raw bytes
	var packed linearPacked
	switch {
	case w.Layout() != "":
		if packed, err = be.packedLinear(w, xs, bs, m); err != nil {
			return err
		}
	case narrowFloat(w.DType()):
		if wr, err = hostData("weight", w); err != nil {
			return err
		}
	default:
		if ws, err = f32("weight", w); err != nil {
			return err
		}
	}
	if m == 0 || n == 0 {
		return nil
	}
	if packed != nil {
		if err := packed(d); err != nil {
			return fmt.Errorf("cpu: linear %v · %vᵀ: %w", x, w, err)
		}
		return nil
	}
	beta := float32(0)
	if bs != nil {
		be.fillRows(d, bs, m)
		beta = 1
	}
	if k == 0 {
		if bs == nil {
			fillT(be.pool, d, 0)
		}
		return nil
	}
	switch {
	case wr == nil:
		be.gemm.Sgemm(false, true, m, n, k, 1, xs, k, ws, k, beta, d, n)
	case be.compute == dtype.BF16 && w.DType() == dtype.BF16:
		if err := be.bf16.GemmBF16(m, n, k, xs, k, w.U16(), k, beta, d, n); err != nil {
			return fmt.Errorf("cpu: linear %v · %vᵀ: %w", x, w, err)
		}
	default:
		be.linearWidened(d, xs, wr, w.DType(), m, n, k, w.Scale(), beta)
	}
	return nil
}

// narrowFloat reports whether dt is a 16- or 8-bit float type Linear
// multiplies as stored.
func narrowFloat(dt dtype.DType) bool {
	switch dt {
	case dtype.BF16, dtype.F16, dtype.F8E4M3, dtype.F8E5M2:
		return true
	}
	return false
}

// widenRows is the number of weight rows (output columns) widened to
// float32 at a time by linearWidened: about 4 MiB of float32 scratch, so a
// chunk stays in the last-level cache while the GEMM reads it.
func widenRows(k int) int { return max(32, (1<<20)/max(k, 1)/32*32) }

var widenPool sync.Pool

// linearWidened computes d = xs·wᵀ + beta·d in float32 for a dense weight
// of a narrow float type dt (raw bytes wr; shapes PackRows does not pack):
// a chunk of weight rows at a time is widened exactly into scratch, with
// the GEMM's vectorised expanding packers, and multiplied by the fp32 GEMM
// into its columns of d, the products times scale (the weight's recorded
// scale, tensor.WeightScaler).
func (be *Backend) linearWidened(d, xs []float32, wr []byte, dt dtype.DType, m, n, k int, scale, beta float32) {
	rows := min(n, widenRows(k))
	sp, _ := widenPool.Get().(*[]float32)
	if sp == nil || cap(*sp) < rows*k {
		s := make([]float32, rows*k)
		sp = &s
	}
	defer widenPool.Put(sp)
	size := dt.Size()
	for j0 := 0; j0 < n; j0 += rows {
		nb := min(rows, n-j0)
		scratch := (*sp)[:nb*k]
		src := wr[j0*k*size : (j0+nb)*k*size]
		be.pool.For(len(scratch)/16+1, grainStream/16, func(lo, hi int) {
			lo, hi = min(16*lo, len(scratch)), min(16*hi, len(scratch))
			_ = gemm.Widen(scratch[lo:hi], src[lo*size:hi*size], dt, 1) // dt is narrow: no error
		})
		be.gemm.Sgemm(false, true, m, nb, k, scale, xs, k, scratch, k, beta, d[j0:], n)
	}
}

func checkLinear(dst, x, w, bias *tensor.Tensor) error {
	xs := x.Shape()
	if w.Rank() != 2 || x.Rank() < 1 || xs[len(xs)-1] != w.Dim(1) {
		return fmt.Errorf("cpu: input %v does not match weight %v ([out, in])", x, w)
	}
	want := append(append([]int(nil), xs[:len(xs)-1]...), w.Dim(0))
	if !tensor.SameShape(dst.Shape(), want) {
		return fmt.Errorf("cpu: dst %v, want %v", dst, want)
	}
	if bias != nil && bias.Len() != w.Dim(0) {
		return fmt.Errorf("cpu: bias %v does not match weight %v", bias, w)
	}
	return nil
}

// fillRows copies row into each of the rows of d.
func (be *Backend) fillRows(d, row []float32, rows int) {
	n := len(row)
	be.pool.For(rows, max(1, grainStream/max(n, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			copy(d[r*n:(r+1)*n], row)
		}
	})
}

// MatMul sets dst[B, M, N] = a[B, M, K] · b[B, K, N] (b[B, N, K]ᵀ when
// transB); b may hold a single matrix shared by the batch.
func (be *Backend) MatMul(dst, a, b *tensor.Tensor, transB bool) error {
	d, err := f32("dst", dst)
	if err != nil {
		return err
	}
	as, err := f32("a", a)
	if err != nil {
		return err
	}
	bs, err := f32("b", b)
	if err != nil {
		return err
	}
	g, err := planMatMul(dst, a, b, transB)
	if err != nil || len(d) == 0 {
		return err
	}
	if g.k == 0 {
		fillT(be.pool, d, 0)
		return nil
	}
	ldb := g.n
	if transB {
		ldb = g.k
	}
	if g.sharedB {
		// One matrix for the whole batch: the batches of a are consecutive
		// rows, so it is a single product with batch·M rows.
		be.gemm.Sgemm(false, transB, g.batch*g.m, g.n, g.k, 1, as, g.k, bs, ldb, 0, d, g.n)
		return nil
	}
	one := func(impl gemm.Impl, i int) {
		impl.Sgemm(false, transB, g.m, g.n, g.k, 1, as[i*g.m*g.k:], g.k, bs[i*g.k*g.n:], ldb, 0, d[i*g.m*g.n:], g.n)
	}
	if flops := 2 * g.m * g.n * g.k; flops >= bigGEMM {
		for i := range g.batch {
			one(be.gemm, i)
		}
		return nil
	}
	be.pool.For(g.batch, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			one(be.tiles, i)
		}
	})
	return nil
}

type matmulShape struct {
	batch, m, n, k int
	sharedB        bool
}

func planMatMul(dst, a, b *tensor.Tensor, transB bool) (matmulShape, error) {
	if a.Rank() < 2 || b.Rank() < 2 || dst.Rank() < 2 {
		return matmulShape{}, fmt.Errorf("cpu: matmul %v · %v needs rank >= 2", a, b)
	}
	g := matmulShape{m: a.Dim(-2), k: a.Dim(-1)}
	kb, n := b.Dim(-2), b.Dim(-1)
	if transB {
		kb, n = n, kb
	}
	g.n = n
	g.batch = tensor.NumElems(a.Shape()[:a.Rank()-2])
	batchB := tensor.NumElems(b.Shape()[:b.Rank()-2])
	if kb != g.k || (batchB != 1 && batchB != g.batch) {
		return g, fmt.Errorf("cpu: matmul %v · %v (transB=%v) do not match", a, b, transB)
	}
	g.sharedB = batchB == 1
	want := append(append([]int(nil), a.Shape()[:a.Rank()-2]...), g.m, g.n)
	if !tensor.SameShape(dst.Shape(), want) {
		return g, fmt.Errorf("cpu: matmul dst %v, want %v", dst, want)
	}
	return g, nil
}
