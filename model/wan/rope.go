package wan

import (
	"fmt"
	"math"
)

// ropeTheta is WanRotaryPosEmbed's base.
const ropeTheta = 10000.0

// ropeGrid describes WanRotaryPosEmbed for one latent shape: the token
// grid and, for every channel of a head, the angle frequency it rotates by
// and which axis (frame, row, column) supplies the position.
//
// diffusers 0.40.0 builds per-axis tables of widths t, h, w =
// D−2·2⌊D/6⌋, 2⌊D/6⌋, 2⌊D/6⌋ channels (self.t_dim, self.h_dim,
// self.w_dim; frequencies 1/θ^(2i/width) per axis, each repeated for the
// two channels of a pair), concatenates them, and in forward splits the
// concatenation at those same widths to index the parts by frame, row and
// column. (Older diffusers split at D−2⌊D/3⌋, ⌊D/3⌋, ⌊D/3⌋ instead, which
// differs whenever 2⌊D/6⌋ ≠ ⌊D/3⌋, e.g. D = 16, 20, 26; the original Wan
// code splits pairs as diffusers 0.40.0 does.) Every width is even, so a
// pair never straddles two axes.
type ropeGrid struct {
	n    [3]int    // tokens along frames, rows, columns
	axis []int     // per channel: 0, 1 or 2
	freq []float64 // per channel: angle per position step
}

// PatchGrid is the patches along frames, rows and columns of a latent of
// frames×height×width (before patching), or an error where an axis has
// none or more than the position embedding covers (rope_max_seq_len: the
// reference fails past it). The planner checks requests with it.
func (c Config) PatchGrid(frames, height, width int) ([3]int, error) {
	n := [3]int{frames / c.PatchSize[0], height / c.PatchSize[1], width / c.PatchSize[2]}
	for i, v := range n {
		if v <= 0 || v > c.RopeMaxSeqLen {
			return n, fmt.Errorf("wan rope: %d patches along %s, want 1..%d (rope_max_seq_len)",
				v, [...]string{"frames", "height", "width"}[i], c.RopeMaxSeqLen)
		}
	}
	return n, nil
}

// newRopeGrid describes the RoPE of a latent of frames×height×width
// (before patching).
func (c Config) newRopeGrid(frames, height, width int) (ropeGrid, error) {
	n, err := c.PatchGrid(frames, height, width)
	if err != nil {
		return ropeGrid{}, err
	}
	d := c.AttentionHeadDim
	hw := 2 * (d / 6)
	g := ropeGrid{n: n, axis: make([]int, d), freq: make([]float64, d)}
	col := 0
	for a, width := range []int{d - 2*hw, hw, hw} {
		for j := range width {
			// get_1d_rotary_pos_embed: 1/θ^(arange(0, dim, 2)/dim) in
			// float64, each frequency repeated for the two channels of a pair.
			g.freq[col] = 1 / math.Pow(ropeTheta, float64(j/2*2)/float64(width))
			g.axis[col] = a
			col++
		}
	}
	return g, nil
}

// tokens is the sequence length, frames × rows × columns.
func (g ropeGrid) tokens() int { return g.n[0] * g.n[1] * g.n[2] }

// table returns [tokens, len(cols)] float64 values trig(position·freq) of
// the given head channels, tokens in frame-major order (the order the
// patch embedding flattens them in).
func (g ropeGrid) table(cols []int, trig func(float64) float64) []float64 {
	// vals[k][p]: channel cols[k] at position p along its axis.
	vals := make([][]float64, len(cols))
	for k, c := range cols {
		vals[k] = make([]float64, g.n[g.axis[c]])
		for p := range vals[k] {
			// torch.outer(arange(max_seq_len), freqs): position × frequency.
			vals[k][p] = trig(float64(p) * g.freq[c])
		}
	}
	out := make([]float64, g.tokens()*len(cols))
	i := 0
	for f := range g.n[0] {
		for h := range g.n[1] {
			for w := range g.n[2] {
				pos := [3]int{f, h, w}
				for k, c := range cols {
					out[i+k] = vals[k][pos[g.axis[c]]]
				}
				i += len(cols)
			}
		}
	}
	return out
}

// RopeFreqs returns the tables WanRotaryPosEmbed produces for a latent of
// frames×height×width (before patching): cos and sin, each [L, head_dim]
// row-major in float64, L = the token count, with the reference's
// per-pair repetition (the golden rope_freqs_cos/sin are these as
// [1, L, 1, head_dim]).
func (c Config) RopeFreqs(frames, height, width int) (cos, sin []float64, err error) {
	g, err := c.newRopeGrid(frames, height, width)
	if err != nil {
		return nil, nil, err
	}
	cols := make([]int, c.AttentionHeadDim)
	for i := range cols {
		cols[i] = i
	}
	return g.table(cols, math.Cos), g.table(cols, math.Sin), nil
}

// ropeHalves returns the [L, head_dim/2] tables Ops.Rope takes. The
// reference's apply_rotary_emb rotates pair j by cos from channel 2j and
// sin from channel 2j+1 of the full tables.
func (g ropeGrid) ropeHalves() (cos, sin []float64) {
	half := len(g.freq) / 2
	even, odd := make([]int, half), make([]int, half)
	for j := range half {
		even[j], odd[j] = 2*j, 2*j+1
	}
	return g.table(even, math.Cos), g.table(odd, math.Sin)
}
