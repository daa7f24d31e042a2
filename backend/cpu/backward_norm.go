package cpu

import (
	"fmt"
	"math"
	"sync"

	"ferry/tensor"
)

// The norms' backward recomputes each row's statistics from x (in float64,
// as the forwards do) rather than keeping them from the forward: a pass over
// the row costs less than storing and reloading them across a training
// step. Weight gradients are sums over rows: each block of rows sums its
// share into its own float64 scratch row, and the blocks are then added in
// order, so there are no races and the result does not depend on which
// worker ran which block.

// normGrads is one norm backward call after its checks.
type normGrads struct {
	dx, dy, x, w []float32
	dw, db       []float32 // accumulated; nil when not wanted
	n, rows      int
	eps          float64
}

// LayerNormBackward, for y = (x-μ)·rstd·w + b over the last dimension,
// sets dx and accumulates dw += Σ dy·x̂ and db += Σ dy over the rows. w
// nil is a LayerNorm without affine (dw is then the gradient of a weight
// of ones); dx, dw and db may each be nil.
func (be *Backend) LayerNormBackward(dx, dw, db, dy, x, w *tensor.Tensor, eps float32) error {
	g, err := planNormBackward("layernorm", dx, dw, db, dy, x, w, eps)
	if err != nil || g.rows == 0 {
		return err
	}
	be.normBackward(&g, layerNormBackRow)
	return nil
}

// RMSNormBackward, for y = x·r·w with r = 1/sqrt(mean(x²)+eps) over the
// last dimension, sets dx and accumulates dw += Σ dy·x·r over the rows
// (dx and dw may be nil; w nil is a weight of ones).
func (be *Backend) RMSNormBackward(dx, dw, dy, x, w *tensor.Tensor, eps float32) error {
	g, err := planNormBackward("rmsnorm", dx, dw, nil, dy, x, w, eps)
	if err != nil || g.rows == 0 {
		return err
	}
	be.normBackward(&g, rmsNormBackRow)
	return nil
}

func planNormBackward(name string, dx, dw, db, dy, x, w *tensor.Tensor, eps float32) (normGrads, error) {
	var g normGrads
	if dy == nil || x == nil {
		return g, fmt.Errorf("cpu: %s backward with nil dy or x", name)
	}
	if !tensor.SameShape(dy.Shape(), x.Shape()) || (dx != nil && !tensor.SameShape(dx.Shape(), x.Shape())) {
		return g, fmt.Errorf("cpu: %s backward: dy %v and dx %v must have the shape of x %v", name, dy, dx, x)
	}
	g.n, g.eps = lastDim(x), float64(eps)
	for _, p := range []*tensor.Tensor{w, dw, db} {
		if p != nil && p.Len() != g.n {
			return g, fmt.Errorf("cpu: %s backward: parameter %v does not match %d features of %v", name, p, g.n, x)
		}
	}
	var err error
	for _, o := range []struct {
		name string
		dst  *[]float32
		t    *tensor.Tensor
	}{{"dy", &g.dy, dy}, {"x", &g.x, x}, {"dx", &g.dx, dx}, {"weight", &g.w, w}, {"dw", &g.dw, dw}, {"db", &g.db, db}} {
		if *o.dst, err = optF32(o.name, o.t); err != nil {
			return g, err
		}
	}
	if g.n > 0 {
		g.rows = len(g.x) / g.n
	}
	return g, nil
}

// normBackRow computes one row's dx (when dx is not nil) and adds its
// terms of the weight gradients into pw and pb (float64, when not nil).
type normBackRow func(dx, dy, x, w []float32, pw, pb []float64, eps float64)

// normBlocks is how many blocks of rows normBackward splits rows into: a
// few per worker, fewer when the rows are few or short.
func (be *Backend) normBlocks(rows, n int) int {
	return max(1, min(rows, 4*be.pool.Workers(), rows*n/grainStream))
}

var normScratch sync.Pool

// normBackward runs row over every row in blocks and adds the blocks'
// weight gradients into g.dw and g.db.
func (be *Backend) normBackward(g *normGrads, row normBackRow) {
	n := g.n
	blocks := be.normBlocks(g.rows, n)
	parts := 0
	if g.dw != nil {
		parts++
	}
	if g.db != nil {
		parts++
	}
	var scratch []float64
	if parts > 0 {
		sp, _ := normScratch.Get().(*[]float64)
		if sp == nil || cap(*sp) < blocks*parts*n {
			s := make([]float64, blocks*parts*n)
			sp = &s
		}
		defer normScratch.Put(sp)
		scratch = (*sp)[:blocks*parts*n]
		clear(scratch)
	}
	be.pool.Run(blocks, func(b int) {
		var pw, pb []float64
		off := b * parts * n
		if g.dw != nil {
			pw, off = scratch[off:off+n], off+n
		}
		if g.db != nil {
			pb = scratch[off : off+n]
		}
		for r := b * g.rows / blocks; r < (b+1)*g.rows/blocks; r++ {
			var dx []float32
			if g.dx != nil {
				dx = g.dx[r*n : (r+1)*n]
			}
			row(dx, g.dy[r*n:(r+1)*n], g.x[r*n:(r+1)*n], g.w, pw, pb, g.eps)
		}
	})
	if g.dw != nil {
		be.addBlocks(g.dw, scratch, blocks, parts, 0)
	}
	if g.db != nil {
		be.addBlocks(g.db, scratch, blocks, parts, parts-1)
	}
}

// addBlocks adds part p of every block's scratch (blocks of parts rows of
// len(dst)) into dst, in block order, rounding once.
func (be *Backend) addBlocks(dst []float32, scratch []float64, blocks, parts, p int) {
	n := len(dst)
	be.pool.For(n, max(1, grainStream/blocks), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			s := float64(dst[j])
			for b := range blocks {
				s += scratch[(b*parts+p)*n+j]
			}
			dst[j] = float32(s)
		}
	})
}

// weightAt is w[i], or 1 without a weight.
func weightAt(w []float32, i int) float64 {
	if w == nil {
		return 1
	}
	return float64(w[i])
}

// layerNormBackRow: with g = dy·w and x̂ = (x-μ)·rstd,
// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)); dw gets dy·x̂, db gets dy.
func layerNormBackRow(dx, dy, x, w []float32, pw, pb []float64, eps float64) {
	mean, variance := meanVar(x)
	rstd := 1 / math.Sqrt(variance+eps)
	dy = dy[:len(x)]
	var sg, sgx float64
	for i, v := range x {
		xh := (float64(v) - mean) * rstd
		d := float64(dy[i])
		g := d * weightAt(w, i)
		sg += g
		sgx += g * xh
		if pw != nil {
			pw[i] += d * xh
		}
		if pb != nil {
			pb[i] += d
		}
	}
	if dx == nil {
		return
	}
	inv := 1 / float64(len(x))
	mg, mgx := sg*inv, sgx*inv
	dx = dx[:len(x)]
	for i, v := range x {
		xh := (float64(v) - mean) * rstd
		g := float64(dy[i]) * weightAt(w, i)
		dx[i] = float32(rstd * (g - mg - xh*mgx))
	}
}

// rmsNormBackRow: with g = dy·w and x̂ = x·r, dx = r·(g - x̂·mean(g·x̂));
// dw gets dy·x̂.
func rmsNormBackRow(dx, dy, x, w []float32, pw, _ []float64, eps float64) {
	var q float64
	for _, v := range x {
		q += float64(v) * float64(v)
	}
	r := 1 / math.Sqrt(q/float64(len(x))+eps)
	dy = dy[:len(x)]
	var sgx float64
	for i, v := range x {
		xh := float64(v) * r
		d := float64(dy[i])
		sgx += d * weightAt(w, i) * xh
		if pw != nil {
			pw[i] += d * xh
		}
	}
	if dx == nil {
		return
	}
	mgx := sgx / float64(len(x))
	dx = dx[:len(x)]
	for i, v := range x {
		xh := float64(v) * r
		dx[i] = float32(r * (float64(dy[i])*weightAt(w, i) - xh*mgx))
	}
}
