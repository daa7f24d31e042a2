package wan

import (
	"fmt"
	"math"

	"ferry/tensor"
)

// Folding the text's zero padding.
//
// The pipelines pad each prompt's embeddings with zero rows to
// max_sequence_length (512) and the reference's cross-attention attends
// to every row. A zero row projects to one and the same key and value
// whatever its position, so n of them weigh in a softmax as a single such
// key whose score is raised by ln n: n·exp(s)·v = exp(s + ln n)·v, and
// the denominator likewise. A pass told where the padding starts
// (Inputs.TextRows) projects the prompt rows and one padding row, and
// attends them with that bias: the same attention up to rounding, without
// the text projection, key and value products and score columns of the
// padding (for a prompt of tens of tokens, about 7% of a 1.3B step at
// 256x256x17, less at larger sizes).

// FoldedTextRows is how many text rows a pass projects and attends when
// the longest prompt of its batch fills longest of its lt rows: the
// prompt's rows and one for the padding, or all lt when nothing is left
// to fold.
func FoldedTextRows(longest, lt int) int {
	if longest+1 >= lt {
		return lt
	}
	return max(longest, 0) + 1
}

// FoldsText says whether a model folds the text padding: always without
// image conditioning; with it only when the reference's split of
// [image; text] gives the two parts back (ImageTextSplit), since
// otherwise image rows move into the text and the padding is no longer
// the text's tail.
func (c Config) FoldsText(imageRows, textRows int) bool {
	if !c.HasImage() {
		return true
	}
	cut, _ := ImageTextSplit(imageRows, textRows)
	return cut == imageRows
}

// textKeep checks Inputs.TextRows and returns the context rows the pass
// projects (all of them unless the padding folds).
func (m *Model) textKeep(in Inputs) (int, error) {
	lt := in.Context.Dim(1)
	if in.TextRows == nil {
		return lt, nil
	}
	if len(in.TextRows) != in.Context.Dim(0) {
		return 0, fmt.Errorf("wan: %d text row counts for a batch of %d", len(in.TextRows), in.Context.Dim(0))
	}
	longest := 0
	for _, n := range in.TextRows {
		if n < 0 || n > lt {
			return 0, fmt.Errorf("wan: text row count %d outside the context's %d rows", n, lt)
		}
		longest = max(longest, n)
	}
	if m.cfg.HasImage() && !m.cfg.FoldsText(imageTokenRows(in.Image, m.cfg), lt) {
		return lt, nil
	}
	return FoldedTextRows(longest, lt), nil
}

// imageTokenRows is the image tokens per sample the embed block makes of
// image (checked by checkImage): FLF2V joins each sample's two images.
func imageTokenRows(image *tensor.Tensor, c Config) int {
	if p := c.ImageTokens(); p > 0 {
		return p
	}
	return image.Dim(1)
}

// foldBias is the attention bias [B, 1, 1, keep] of a folded text of lt
// rows: 0 on each sample's prompt rows, and on the rows after them, which
// stand for its lt−rows[b] padding rows, ln of how many each stands for.
func foldBias(rows []int, lt, keep int) []float32 {
	out := make([]float32, len(rows)*keep)
	for b, n := range rows {
		w := float32(math.Log(float64(lt-n) / float64(keep-n)))
		for j := n; j < keep; j++ {
			out[b*keep+j] = w
		}
	}
	return out
}

// projectText is PixArtAlphaTextProjection, linear_2(gelu_tanh(linear_1(
// context))), over the first keep rows of each sample; with fewer than all
// it also sets p.textBias, which the cross-attentions add to their scores.
func (m *Model) projectText(ops *tensor.Ops, p *pass, in Inputs) {
	w, ctx, lt := &m.embed, in.Context, in.Context.Dim(1)
	if p.textKeep < lt {
		ctx = ops.Narrow(ctx, 1, 0, p.textKeep)
	}
	t := project(ops, ctx, w.Text1)
	if ctx != in.Context {
		ctx.Free()
	}
	ops.UnaryInPlace(t, tensor.GELUTanh)
	p.text = project(ops, t, w.Text2)
	t.Free()
	if p.textKeep < lt {
		p.textBias = ops.Upload(foldBias(in.TextRows, lt, p.textKeep), len(in.TextRows), 1, 1, p.textKeep)
	}
}
