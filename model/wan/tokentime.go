package wan

import (
	"fmt"
	"math"
	"slices"

	"ferry/tensor"
)

// Per-token timesteps (Wan 2.2 TI2V's expand_timesteps).
//
// The reference embeds every token's timestep and projects it to a
// [B, L, 6, dim] modulation, then modulates each token with its own row.
// A token's row depends only on its timestep's value, and the pipelines
// give few values: all tokens t (text to video) or frame 0's tokens 0 and
// the rest t (image to video). So the embed block computes the time
// embedding and its projection once per distinct value (rows of
// [G, dim] and [G, 6, dim]), and the blocks apply each row to the runs of
// tokens that use it. Every token then goes through exactly the float
// operations the reference applies to it: the same sinusoid, the same
// GEMM rows, the same table add, LayerNorm, ·(1+scale)+shift and gate.

// tokenRun is a stretch of one sample's tokens that share a timestep:
// tokens [start, start+n) of sample use row group of the per-value
// modulation.
type tokenRun struct{ sample, start, n, group int }

// groupTimesteps finds the distinct values of ts [batch, tokens] (in order
// of first appearance; values are told apart by their bits, so 0 and −0
// stay apart as they would embed differently) and the maximal runs of
// consecutive tokens of a sample with the same value.
func groupTimesteps(ts []float32, batch, tokens int) (values []float32, runs []tokenRun) {
	index := map[uint32]int{}
	for b := range batch {
		row := ts[b*tokens : (b+1)*tokens]
		for start := 0; start < tokens; {
			bits := math.Float32bits(row[start])
			n := 1
			for start+n < tokens && math.Float32bits(row[start+n]) == bits {
				n++
			}
			g, ok := index[bits]
			if !ok {
				g = len(values)
				index[bits] = g
				values = append(values, row[start])
			}
			runs = append(runs, tokenRun{sample: b, start: start, n: n, group: g})
			start += n
		}
	}
	return values, runs
}

// ungroupedTimesteps makes every token its own group: the reference's
// per-token embedding and modulation (see Model.ungrouped).
func ungroupedTimesteps(ts []float32, batch, tokens int) (values []float32, runs []tokenRun) {
	for b := range batch {
		for l := range tokens {
			runs = append(runs, tokenRun{sample: b, start: l, n: 1, group: b*tokens + l})
		}
	}
	return slices.Clone(ts), runs
}

// ExpandTimesteps builds what a Wan 2.2 TI2V pipeline passes with
// expand_timesteps for a latent of latentFrames×latentHeight×latentWidth
// (before patching): every token of every sample gets t, except with
// firstFrameFixed (image to video) the tokens of latent frame 0, which get
// 0 (the reference multiplies t by a mask that is 0 on frame 0). The result
// is [batch, L] row-major, for Inputs.TokenTimesteps.
func (c Config) ExpandTimesteps(batch, latentFrames, latentHeight, latentWidth int, t float32, firstFrameFixed bool) ([]float32, error) {
	g, err := c.newRopeGrid(latentFrames, latentHeight, latentWidth)
	if err != nil {
		return nil, err
	}
	if firstFrameFixed && c.PatchSize[0] != 1 {
		// The reference's mask is per latent frame; with a temporal patch a
		// token would span frame 0 and frame 1.
		return nil, fmt.Errorf("wan: a fixed first frame needs a temporal patch of 1, the config has %d", c.PatchSize[0])
	}
	tokens, frame0 := g.tokens(), g.n[1]*g.n[2]
	out := make([]float32, batch*tokens)
	for b := range batch {
		for l := range tokens {
			v := t
			if firstFrameFixed && l < frame0 {
				v = 0 * t // mask·t as the reference computes it
			}
			out[b*tokens+l] = v
		}
	}
	return out, nil
}

// forEachRun calls fn with each run's tokens of x [B, L, dim] (a view
// [1, n, dim]) and its group.
func forEachRun(ops *tensor.Ops, p *pass, x *tensor.Tensor, fn func(rows *tensor.Tensor, group int)) {
	dim := x.Dim(2)
	all := view(ops, x, p.batch*p.tokens, dim)
	for _, r := range p.runs {
		if ops.Err() != nil {
			return
		}
		part, err := all.Rows(r.sample*p.tokens+r.start, r.n)
		if err != nil {
			ops.Fail(err)
			return
		}
		fn(view(ops, part, 1, r.n, dim), r.group)
	}
}

// modulateTokens is modulate with per-sample ([B, 1, dim]) or per-group
// ([G, 1, dim], p.runs) shift and 1+scale: LayerNorm without affine over
// the whole of h, then each run ·(1+scale)+shift with its group's rows.
func modulateTokens(ops *tensor.Ops, p *pass, h, shift, onePlusScale *tensor.Tensor, eps float32) *tensor.Tensor {
	if p.runs == nil {
		return modulate(ops, h, shift, onePlusScale, eps)
	}
	x := ops.LayerNorm(h, nil, nil, eps)
	forEachRun(ops, p, x, func(rows *tensor.Tensor, g int) {
		ops.MulInPlace(rows, sampleOf(ops, onePlusScale, g))
		ops.AddInPlace(rows, sampleOf(ops, shift, g))
	})
	return x
}

// gateTokens multiplies a [B, L, dim] by the per-sample or per-group gate.
func gateTokens(ops *tensor.Ops, p *pass, a, gate *tensor.Tensor) {
	if p.runs == nil {
		ops.MulInPlace(a, gate)
		return
	}
	forEachRun(ops, p, a, func(rows *tensor.Tensor, g int) {
		ops.MulInPlace(rows, sampleOf(ops, gate, g))
	})
}
