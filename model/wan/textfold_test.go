package wan

import (
	"math"
	"testing"

	"ferry/model/modeltest"
	"ferry/tensor"
)

// paddedContext is b contexts of lt rows whose rows from rows[i] on are
// zeros, as the pipelines pad a prompt's embeddings.
func paddedContext(seed uint64, rows []int, lt, width int) []float32 {
	ctx := modeltest.Randn(seed, len(rows)*lt*width)
	for b, n := range rows {
		clear(ctx[(b*lt+n)*width : (b+1)*lt*width])
	}
	return ctx
}

// TestFoldedTextMatchesReference runs passes told where the text padding
// starts against the float64 transcription over the whole padded text,
// and against the same pass attending every row: text and image models,
// prompts of different lengths in one batch, no padding in the longest,
// empty embeddings, and image models whose text does not split back
// (nothing folds there).
func TestFoldedTextMatchesReference(t *testing.T) {
	tests := []struct {
		name     string
		image    bool
		edit     func(c *Config)
		lt       int
		rows     []int
		imgRows  int // 0: no image; 2 images per sample with FLF2V
		wantKeep int
	}{
		{"prompts of 3 and 7 rows", false, nil, 512, []int{3, 7}, 0, 8},
		{"one prompt fills the text", false, nil, 512, []int{512, 4}, 0, 512},
		{"one row of padding", false, nil, 512, []int{511, 2}, 0, 512},
		{"two rows of padding", false, nil, 512, []int{510, 0}, 0, 511},
		{"no prompt rows", false, nil, 512, []int{0, 0}, 0, 1},
		{"short context", false, nil, 24, []int{5, 9}, 0, 10},
		{"image, 512 text rows", true, nil, 512, []int{4, 9}, 5, 10},
		{"image, 300 text rows: the split moves rows, no fold", true, nil, 300, []int{4, 9}, 5, 300},
		{"FLF2V", true, func(c *Config) { c.PosEmbedSeqLen = ptr(8) }, 512, []int{6, 2}, 4, 7},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tinyConfig()
			if tt.image {
				cfg = imageConfig()
			}
			if tt.edit != nil {
				tt.edit(&cfg)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			src := synthesize(cfg, uint64(80+i))
			shape := []int{len(tt.rows), cfg.InChannels, 2, 4, 4}
			h := hostInputs{ts: []float32{937.5, 12}, ctx: paddedContext(uint64(90+i), tt.rows, tt.lt, cfg.TextDim), lt: tt.lt}
			if tt.image {
				n := shape[0]
				if cfg.ImageTokens() > 0 {
					n *= 2
				}
				h.imgShape = []int{n, tt.imgRows, 12}
				h.img = modeltest.Randn(uint64(100+i), tensor.NumElems(h.imgShape))
			}
			x := modeltest.Randn(uint64(110+i), tensor.NumElems(shape))
			r := newRig(t)
			m := r.model(t, cfg, src)

			if keep := keepOf(t, r, m, shape, h, tt.rows); keep != tt.wantKeep {
				t.Errorf("the pass projects %d text rows, want %d", keep, tt.wantKeep)
			}
			full := r.forwardInputs(t, m, x, shape, h)
			h.rows = tt.rows
			folded := r.forwardInputs(t, m, x, shape, h)
			checkAgainstReference(t, cfg, src.Tensors(), folded, x, shape, h)
			// Only the softmax's sums change order: far below the goldens'
			// tolerance.
			if d, lim := maxDiff(folded, full), 1e-5*math.Max(1, absMax(full)); d > lim {
				t.Errorf("folded and full passes differ by %.3g (more than %.3g)", d, lim)
			}
		})
	}
}

// keepOf is the text rows a pass over h with TextRows rows projects.
func keepOf(t *testing.T, r *rig, m *Model, shape []int, h hostInputs, rows []int) int {
	t.Helper()
	ops := r.ex.Ops("transformer")
	in := Inputs{Context: ops.Upload(h.ctx, shape[0], h.lt, m.cfg.TextDim), TextRows: rows}
	if h.img != nil {
		in.Image = ops.Upload(h.img, h.imgShape...)
	}
	defer tensor.Free(in.Context, in.Image)
	keep, err := m.textKeep(in)
	if err != nil {
		t.Fatal(err)
	}
	return keep
}

// TestFoldBias: each padding row stands for its share of the sample's
// padding, and the shares add up to all of it.
func TestFoldBias(t *testing.T) {
	rows, lt, keep := []int{3, 7, 0}, 512, 8
	bias := foldBias(rows, lt, keep)
	for b, n := range rows {
		total := 0.0
		for j := range keep {
			w := bias[b*keep+j]
			if j < n {
				if w != 0 {
					t.Errorf("sample %d: prompt row %d has bias %g, want 0", b, j, w)
				}
				continue
			}
			total += math.Exp(float64(w))
		}
		if math.Abs(total-float64(lt-n)) > 1e-4*float64(lt) {
			t.Errorf("sample %d: padding rows weigh %g, want %d", b, total, lt-n)
		}
	}
}
