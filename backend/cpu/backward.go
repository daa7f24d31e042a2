package cpu

import (
	"fmt"

	"ferry/dtype"
	"ferry/tensor"
)

// Backward kernels (training). Each writes the gradient of its forward
// op's input (dx, =) and accumulates the gradients of weights (dw, db, +=);
// a nil destination is skipped. This file holds LinearBackward, the hot
// path of a training step (two thirds of its FLOPs: the products dy·w and
// dyᵀ·x are each as large as the forward's x·wᵀ); the norms, the
// elementwise ops and SumTo are in backward_norm.go and
// backward_elementwise.go.

// linearGrads is one LinearBackward call after its checks: the operands'
// elements (nil where not given or not read) and the product's sizes.
type linearGrads struct {
	dx, dw, db, dy, x, w []float32
	wb                   []uint16 // a bf16 w (only dx reads w)
	m, n, k              int
}

// LinearBackward, for y = x·wᵀ + b with x [..., K] and w [N, K], sets
// dx = dy·w and accumulates dw += dyᵀ·x and db += Σ dy over every row.
// Every operand is float32 and dense, except that w may be BF16 (it is
// widened exactly, as Linear does with compute dtype F32): a frozen bf16
// base weight under a LoRA adapter needs only dx. Packed weights are
// refused: only Linear reads them.
func (be *Backend) LinearBackward(dx, dw, db, dy, x, w *tensor.Tensor) error {
	if w != nil && w.Scale() != 1 {
		return fmt.Errorf("cpu: linear backward with weight %v: a scaled fp8 weight (train on the bf16 or fp16 weights)", w)
	}
	g, err := planLinearBackward(dx, dw, db, dy, x, w)
	if err != nil {
		return err
	}
	if g.dx != nil && len(g.dx) > 0 {
		be.linearInputGrad(&g)
	}
	if g.dw != nil && g.m > 0 && g.n > 0 && g.k > 0 {
		// dw[n×k] += dy[m×n]ᵀ · x[m×k]: the GEMM with transA, beta 1.
		be.gemm.Sgemm(true, false, g.n, g.k, g.m, 1, g.dy, g.n, g.x, g.k, 1, g.dw, g.k)
	}
	if g.db != nil && g.m > 0 {
		be.columnSums(g.db, g.dy, g.m, g.n)
	}
	return nil
}

// linearInputGrad sets dx[m×k] = dy[m×n] · w[n×k].
func (be *Backend) linearInputGrad(g *linearGrads) {
	if g.n == 0 {
		fillT(be.pool, g.dx, 0)
		return
	}
	if g.wb == nil {
		be.gemm.Sgemm(false, false, g.m, g.k, g.n, 1, g.dy, g.n, g.w, g.k, 0, g.dx, g.k)
		return
	}
	// A bf16 weight: a chunk of its rows at a time is widened into
	// scratch, and dx accumulates that chunk's share of the sum over n.
	rows := min(g.n, widenRows(g.k))
	sp, _ := widenPool.Get().(*[]float32)
	if sp == nil || cap(*sp) < rows*g.k {
		s := make([]float32, rows*g.k)
		sp = &s
	}
	defer widenPool.Put(sp)
	for j0 := 0; j0 < g.n; j0 += rows {
		nb := min(rows, g.n-j0)
		scratch := (*sp)[:nb*g.k]
		src := g.wb[j0*g.k : (j0+nb)*g.k]
		be.pool.For(len(scratch), grainStream, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				scratch[i] = dtype.BF16ToF32(src[i])
			}
		})
		beta := float32(1)
		if j0 == 0 {
			beta = 0
		}
		be.gemm.Sgemm(false, false, g.m, g.k, nb, 1, g.dy[j0:], g.n, scratch, g.k, beta, g.dx, g.k)
	}
}

// planLinearBackward checks LinearBackward's operands: shapes first (so
// that a mismatch names the shapes), then dtypes and storage.
func planLinearBackward(dx, dw, db, dy, x, w *tensor.Tensor) (linearGrads, error) {
	var g linearGrads
	if dy == nil || x == nil || w == nil {
		return g, fmt.Errorf("cpu: linear backward with nil dy, x or w")
	}
	if w.Rank() != 2 || x.Rank() < 1 || dy.Rank() < 1 || x.Dim(-1) != w.Dim(1) || dy.Dim(-1) != w.Dim(0) {
		return g, fmt.Errorf("cpu: linear backward: dy %v, x %v do not match weight %v ([out, in])", dy, x, w)
	}
	g.n, g.k = w.Dim(0), w.Dim(1)
	g.m = rowsOf(x)
	if rowsOf(dy) != g.m {
		return g, fmt.Errorf("cpu: linear backward: dy %v and x %v have different row counts", dy, x)
	}
	if dx != nil && !tensor.SameShape(dx.Shape(), x.Shape()) {
		return g, fmt.Errorf("cpu: linear backward: dx %v, want the shape of x %v", dx, x)
	}
	if dw != nil && !tensor.SameShape(dw.Shape(), w.Shape()) {
		return g, fmt.Errorf("cpu: linear backward: dw %v, want the shape of w %v", dw, w)
	}
	if db != nil && db.Len() != g.n {
		return g, fmt.Errorf("cpu: linear backward: db %v for weight %v", db, w)
	}
	var err error
	if g.dy, err = f32("dy", dy); err != nil {
		return g, err
	}
	if g.x, err = f32("x", x); err != nil {
		return g, err
	}
	if g.dx, err = optF32("dx", dx); err != nil {
		return g, err
	}
	if g.dw, err = optF32("dw", dw); err != nil {
		return g, err
	}
	if g.db, err = optF32("db", db); err != nil {
		return g, err
	}
	return g, g.weight(w)
}

// weight takes w's elements: float32, or raw bf16 to be widened.
func (g *linearGrads) weight(w *tensor.Tensor) error {
	if w.Layout() != "" {
		return fmt.Errorf("cpu: linear backward: weight %v is packed (%s): pass the dense weight", w, w.Layout())
	}
	if w.DType() == dtype.BF16 {
		if _, err := hostData("weight", w); err != nil {
			return err
		}
		g.wb = w.U16()
		return nil
	}
	ws, err := f32("weight", w)
	if err != nil {
		return fmt.Errorf("%w (or BF16)", err)
	}
	g.w = ws
	return nil
}

// rowsOf is the number of rows of t's last dimension (0 when it is empty).
func rowsOf(t *tensor.Tensor) int {
	if t.Dim(-1) == 0 {
		return tensor.NumElems(t.Shape()[:t.Rank()-1])
	}
	return t.Len() / t.Dim(-1)
}

// sumCols is the width of the column blocks columnSums sums at a time: the
// float64 accumulators of one block live on the stack.
const sumCols = 256

// columnSums adds the column sums of dy [m, n] into db, accumulated in
// float64 and rounded once into db. Workers take disjoint columns, so
// there is nothing to merge.
func (be *Backend) columnSums(db, dy []float32, m, n int) {
	be.pool.For(n, max(1, grainStream/max(m, 1)), func(lo, hi int) {
		var acc [sumCols]float64
		for c0 := lo; c0 < hi; c0 += sumCols {
			a := acc[:min(sumCols, hi-c0)]
			clear(a)
			for r := range m {
				row := dy[r*n+c0 : r*n+c0+len(a)]
				for j, v := range row {
					a[j] += float64(v)
				}
			}
			out := db[c0 : c0+len(a)]
			for j, s := range a {
				out[j] = float32(float64(out[j]) + s)
			}
		}
	})
}
