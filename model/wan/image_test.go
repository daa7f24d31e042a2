package wan

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/checkpoint"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// hostInputs are a pass's inputs on the host: timesteps per sample (ts) or
// per token (tokTS), the text context [B, lt, text_dim] and the image
// embeddings img of shape imgShape (nil: none).
type hostInputs struct {
	ts, tokTS []float32
	ctx       []float32
	lt        int
	rows      []int // Inputs.TextRows (nil: none)
	img       []float32
	imgShape  []int
}

// ref turns them into refForwardInputs' form.
func (h hostInputs) ref(cfg Config) refInputs {
	in := refInputs{ts: h.ts, tokTS: h.tokTS, ctx: h.ctx, lt: h.lt, img: h.img}
	if h.img != nil {
		in.imgRows = h.imgShape[1]
		if p := cfg.ImageTokens(); p > 0 {
			in.imgRows = p
		}
	}
	return in
}

// forwardInputs uploads the inputs, runs ForwardInputs and downloads the
// result, freeing everything it allocated.
func (r *rig) forwardInputs(t *testing.T, m *Model, latents []float32, shape []int, h hostInputs) []float32 {
	t.Helper()
	ops := r.ex.Ops("transformer")
	x := ops.Upload(latents, shape...)
	c := ops.Upload(h.ctx, shape[0], h.lt, m.cfg.TextDim)
	in := Inputs{Timesteps: h.ts, TokenTimesteps: h.tokTS, Context: c, TextRows: h.rows}
	if h.img != nil {
		in.Image = ops.Upload(h.img, h.imgShape...)
	}
	defer tensor.Free(x, c, in.Image)
	out, err := m.ForwardInputs(r.ex, ops, x, in)
	if err != nil {
		t.Fatal(err)
	}
	got := ops.Download(out)
	out.Free()
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	if want := shape[0] * m.cfg.OutChannels * tensor.NumElems(shape[2:]); len(got) != want {
		t.Fatalf("output has %d values, want %d", len(got), want)
	}
	return got
}

// checkAgainstReference compares a pass with refForwardInputs at the
// goldens' tolerance.
func checkAgainstReference(t *testing.T, cfg Config, w map[string][]float32, got, x []float32, shape []int, h hostInputs) {
	t.Helper()
	ref := refForwardInputs(cfg, w, x, shape, h.ref(cfg))
	want := make([]float32, len(ref))
	for i, v := range ref {
		want[i] = float32(v)
	}
	worst := modeltest.Compare(t, "sample", got, want, atol, rtol)
	t.Logf("max abs error %.3g (absmax %.3g)", worst, absMax(want))
}

// imageConfig is tinyConfig with image conditioning: CLIP width 12 and 36
// input channels, as the I2V checkpoints have.
func imageConfig() Config {
	c := tinyConfig()
	c.InChannels = 36
	c.ImageDim, c.AddedKVProjDim = ptr(12), ptr(c.InnerDim())
	return c
}

// TestForwardImageMatchesReference runs image-conditioned configs against
// the float64 transcription: the text as the pipelines pass it (512 rows),
// texts shorter and longer than 512 (the processor's split then hands
// image rows to the text attention or text rows to the image attention,
// counts its cut from the end, or leaves the image attention nothing),
// FLF2V's position embedding over two images, and no norm2.
func TestForwardImageMatchesReference(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(c *Config)
		lt       int
		imgShape func(b int) []int
	}{
		{"512 text tokens", func(c *Config) {}, 512, func(b int) []int { return []int{b, 5, 12} }},
		{"510 text tokens: 2 image rows attended as text", func(c *Config) {}, 510, func(b int) []int { return []int{b, 5, 12} }},
		{"515 text tokens: 3 text rows attended as image", func(c *Config) {}, 515, func(b int) []int { return []int{b, 5, 12} }},
		// Shorter than 512 - image rows: diffusers' cut is negative and
		// counts from the end (a Wan 2.1 I2V run with max_sequence_length
		// under 255).
		{"300 text tokens: cut from the end", func(c *Config) {}, 300, func(b int) []int { return []int{b, 5, 12} }},
		{"24 text tokens: no image rows", func(c *Config) {}, 24, func(b int) []int { return []int{b, 5, 12} }},
		{"507 text tokens: no image rows", func(c *Config) {}, 507, func(b int) []int { return []int{b, 5, 12} }},
		{"FLF2V position embedding", func(c *Config) { c.PosEmbedSeqLen = ptr(8) }, 512, func(b int) []int { return []int{2 * b, 4, 12} }},
		{"no norm2", func(c *Config) { c.CrossAttnNorm = false; c.NumLayers = 1 }, 512, func(b int) []int { return []int{b, 3, 12} }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := imageConfig()
			tt.edit(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			src := synthesize(cfg, uint64(40+i))
			shape := []int{2, cfg.InChannels, 2, 4, 4}
			is := tt.imgShape(shape[0])
			h := hostInputs{
				ts:  []float32{937.5, 12},
				ctx: modeltest.Randn(uint64(50+i), shape[0]*tt.lt*cfg.TextDim), lt: tt.lt,
				img: modeltest.Randn(uint64(60+i), tensor.NumElems(is)), imgShape: is,
			}
			x := modeltest.Randn(uint64(70+i), tensor.NumElems(shape))
			r := newRig(t)
			m := r.model(t, cfg, src)
			got := r.forwardInputs(t, m, x, shape, h)
			checkAgainstReference(t, cfg, src.Tensors(), got, x, shape, h)
		})
	}
}

// TestImageAttentionMatters guards the reference test against an image
// path that does nothing: other image embeddings must change the output.
func TestImageAttentionMatters(t *testing.T) {
	cfg := imageConfig()
	src := synthesize(cfg, 5)
	shape := []int{1, cfg.InChannels, 1, 4, 4}
	x := modeltest.Randn(1, tensor.NumElems(shape))
	h := hostInputs{ts: []float32{500}, ctx: modeltest.Randn(2, 512*cfg.TextDim), lt: 512,
		img: modeltest.Randn(3, 4*12), imgShape: []int{1, 4, 12}}
	r := newRig(t)
	m := r.model(t, cfg, src)
	a := r.forwardInputs(t, m, x, shape, h)
	h.img = modeltest.Randn(4, 4*12)
	b := r.forwardInputs(t, m, x, shape, h)
	if d := maxDiff(a, b); d < 1e-3 {
		t.Errorf("other image embeddings changed the output by at most %g", d)
	}
}

// tokenCase is a pattern of per-token timesteps over a batch.
type tokenCase struct {
	name string
	// ts gives sample b's token l (of tokens, perFrame per latent frame)
	// its timestep.
	ts func(b, l, tokens, perFrame int) float32
}

var tokenCases = []tokenCase{
	{"text to video: all tokens t", func(b, l, _, _ int) float32 { return []float32{999, 401.25}[b] }},
	{"image to video: frame 0 at 0, the rest t", func(b, l, _, perFrame int) float32 {
		if l < perFrame {
			return 0
		}
		return []float32{999, 401.25}[b]
	}},
	{"every token its own", func(b, l, tokens, _ int) float32 { return float32(b*tokens+l)*7.5 + 3 }},
	{"alternating values", func(b, l, _, _ int) float32 { return []float32{250, 750}[(l/3+b)%2] }},
}

func expandCase(tc tokenCase, batch, tokens, perFrame int) []float32 {
	ts := make([]float32, batch*tokens)
	for b := range batch {
		for l := range tokens {
			ts[b*tokens+l] = tc.ts(b, l, tokens, perFrame)
		}
	}
	return ts
}

// TestTokenTimestepsMatchReference runs per-token timesteps against the
// transcription, which embeds and modulates every token on its own (as
// the reference does with expand_timesteps).
func TestTokenTimestepsMatchReference(t *testing.T) {
	for _, withImage := range []bool{false, true} {
		for i, tc := range tokenCases {
			name := tc.name
			if withImage {
				name = "image model/" + name
			}
			t.Run(name, func(t *testing.T) {
				cfg, lt := tinyConfig(), 6
				if withImage {
					cfg, lt = imageConfig(), 512
				}
				src := synthesize(cfg, uint64(80+i))
				shape := []int{2, cfg.InChannels, 3, 4, 6} // 3 frames of 2×3 tokens
				h := hostInputs{tokTS: expandCase(tc, 2, 18, 6), ctx: modeltest.Randn(uint64(90+i), 2*lt*cfg.TextDim), lt: lt}
				if withImage {
					h.imgShape = []int{2, 3, 12}
					h.img = modeltest.Randn(uint64(95+i), 2*3*12)
				}
				x := modeltest.Randn(uint64(99+i), tensor.NumElems(shape))
				r := newRig(t)
				m := r.model(t, cfg, src)
				got := r.forwardInputs(t, m, x, shape, h)
				checkAgainstReference(t, cfg, src.Tensors(), got, x, shape, h)
			})
		}
	}
}

// TestTokenTimestepsAreExact checks the grouping against the reference's
// per-token computation bit for bit, with the reference GEMM (row results
// independent of the row count): every pattern must give exactly what
// embedding and modulating each token on its own gives (Model.ungrouped),
// equal per-token timesteps exactly the per-sample result, and FFN chunks
// inside the runs must not change a bit either.
func TestTokenTimestepsAreExact(t *testing.T) {
	cfg := tinyConfig()
	src := synthesize(cfg, 11)
	shape := []int{2, cfg.InChannels, 3, 4, 6}
	x := modeltest.Randn(12, tensor.NumElems(shape))
	ctx := modeltest.Randn(13, 2*5*cfg.TextDim)
	r := newRig(t)
	m := r.model(t, cfg, src)

	perSample := r.forwardInputs(t, m, x, shape, hostInputs{ts: []float32{999, 401.25}, ctx: ctx, lt: 5})
	allT := r.forwardInputs(t, m, x, shape, hostInputs{tokTS: expandCase(tokenCases[0], 2, 18, 6), ctx: ctx, lt: 5})
	if !slices.Equal(perSample, allT) {
		t.Errorf("all tokens at t differ from one timestep per sample (max abs diff %g)", maxDiff(perSample, allT))
	}
	for _, tc := range tokenCases {
		ts := expandCase(tc, 2, 18, 6)
		m.Options.FFNChunk = 0
		whole := r.forwardInputs(t, m, x, shape, hostInputs{tokTS: ts, ctx: ctx, lt: 5})
		m.ungrouped = true
		perToken := r.forwardInputs(t, m, x, shape, hostInputs{tokTS: ts, ctx: ctx, lt: 5})
		m.ungrouped = false
		if !slices.Equal(whole, perToken) {
			t.Errorf("%s: grouped pass differs from the per-token one (max abs diff %g)", tc.name, maxDiff(whole, perToken))
		}
		for _, chunk := range []int{1, 4, 7} {
			m.Options.FFNChunk = chunk
			got := r.forwardInputs(t, m, x, shape, hostInputs{tokTS: ts, ctx: ctx, lt: 5})
			if !slices.Equal(got, whole) {
				t.Errorf("%s: FFNChunk %d differs from unchunked (max abs diff %g)", tc.name, chunk, maxDiff(got, whole))
			}
		}
		m.Options.FFNChunk = 0
	}
}

// TestTokenTimestepsPeak checks that two distinct timesteps cost no
// [tokens, 6, dim] modulation: the pass's peak must stay within a few KiB
// of the per-sample pass's, far below the 96 KiB such a tensor would take.
func TestTokenTimestepsPeak(t *testing.T) {
	cfg := tinyConfig()
	src := synthesize(cfg, 21)
	shape := []int{1, cfg.InChannels, 4, 8, 8} // 64 tokens: [64, 6, 40] floats are 60 KiB, [64, 40] 10 KiB
	x := modeltest.Randn(22, tensor.NumElems(shape))
	ctx := modeltest.Randn(23, 4*cfg.TextDim)
	peak := func(h hostInputs) int64 {
		r := newRig(t)
		m := r.model(t, cfg, src)
		r.forwardInputs(t, m, x, shape, h) // loads the weights
		r.dev.ResetPeakStats()
		base := r.dev.Stats().Allocated
		r.forwardInputs(t, m, x, shape, h)
		return r.dev.Stats().PeakAllocated - base
	}
	sample := peak(hostInputs{ts: []float32{700}, ctx: ctx, lt: 4})
	two := peak(hostInputs{tokTS: expandCase(tokenCases[1], 1, 64, 16), ctx: ctx, lt: 4})
	perToken := int64(64 * 6 * cfg.InnerDim() * 4)
	if two > sample+perToken/8 {
		t.Errorf("peak with two distinct timesteps %d bytes, %d with one per sample (a [tokens, 6, dim] modulation is %d)", two, sample, perToken)
	}
	t.Logf("peak: %d bytes per sample, %d with two distinct per-token timesteps", sample, two)
}

func TestGroupTimesteps(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	tests := []struct {
		name   string
		ts     []float32
		batch  int
		values []float32
		runs   []tokenRun
	}{
		{"one value", []float32{5, 5, 5, 5}, 2, []float32{5}, []tokenRun{{0, 0, 2, 0}, {1, 0, 2, 0}}},
		{"first frame fixed", []float32{0, 0, 9, 9, 9, 0, 0, 3, 3, 3}, 2, []float32{0, 9, 3},
			[]tokenRun{{0, 0, 2, 0}, {0, 2, 3, 1}, {1, 0, 2, 0}, {1, 2, 3, 2}}},
		{"returning value", []float32{1, 2, 1}, 1, []float32{1, 2}, []tokenRun{{0, 0, 1, 0}, {0, 1, 1, 1}, {0, 2, 1, 0}}},
		{"0 and -0 apart", []float32{0, negZero}, 1, []float32{0, negZero}, []tokenRun{{0, 0, 1, 0}, {0, 1, 1, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values, runs := groupTimesteps(tt.ts, tt.batch, len(tt.ts)/tt.batch)
			if !slices.EqualFunc(values, tt.values, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) ||
				!slices.Equal(runs, tt.runs) {
				t.Errorf("got %v %v, want %v %v", values, runs, tt.values, tt.runs)
			}
		})
	}
}

func TestExpandTimesteps(t *testing.T) {
	cfg := ConfigTI2V5B()
	got, err := cfg.ExpandTimesteps(2, 3, 4, 6, 812.5, true) // 3 frames of 2×3 tokens
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 36 {
		t.Fatalf("%d timesteps, want 36", len(got))
	}
	for i, v := range got {
		want := float32(812.5)
		if i%18 < 6 {
			want = 0
		}
		if v != want {
			t.Fatalf("timestep %d (sample %d token %d) = %g, want %g", i, i/18, i%18, v, want)
		}
	}
	all, _ := cfg.ExpandTimesteps(1, 3, 4, 6, 812.5, false)
	if slices.ContainsFunc(all, func(v float32) bool { return v != 812.5 }) {
		t.Errorf("text to video: %v", all)
	}
	cfg.PatchSize[0] = 2
	if _, err := cfg.ExpandTimesteps(1, 4, 4, 6, 1, true); err == nil || !strings.Contains(err.Error(), "temporal patch") {
		t.Errorf("temporal patch 2: %v", err)
	}
}

// TestForwardInputsRejects checks the one-line errors of bad inputs, and
// that a rejected call leaves nothing allocated and no error in ops.
func TestForwardInputsRejects(t *testing.T) {
	for _, image := range []bool{false, true} {
		cfg := tinyConfig()
		if image {
			cfg = imageConfig()
			cfg.PosEmbedSeqLen = ptr(8)
		}
		r := newRig(t)
		m := r.model(t, cfg, synthesize(cfg, 31))
		ops := r.ex.Ops("transformer")
		var uploaded []*tensor.Tensor
		up := func(shape ...int) *tensor.Tensor {
			t := ops.Upload(make([]float32, tensor.NumElems(shape)), shape...)
			uploaded = append(uploaded, t)
			return t
		}
		x := up(2, cfg.InChannels, 2, 4, 4) // 8 tokens per sample
		ctx := up(2, 512, cfg.TextDim)
		img := up(4, 4, 12)
		tests := []struct {
			name  string
			in    Inputs
			want  string
			image bool // the case applies to the image config (else to the text one)
		}{
			{"no timesteps", Inputs{Context: ctx}, "exactly one of", false},
			{"both timesteps", Inputs{Timesteps: []float32{1, 2}, TokenTimesteps: make([]float32, 16), Context: ctx}, "exactly one of", false},
			{"token count", Inputs{TokenTimesteps: make([]float32, 15), Context: ctx}, "15 per-token timesteps for 2 samples of 8 tokens", false},
			{"image for a text model", Inputs{Timesteps: []float32{1, 2}, Context: ctx, Image: img}, "without image conditioning", false},
			{"no image", Inputs{Timesteps: []float32{1, 2}, Context: ctx}, "pass the image encoder's hidden states", true},
			{"image width", Inputs{Timesteps: []float32{1, 2}, Context: ctx, Image: up(4, 4, 10)}, "want float32 [B, Limg, 12]", true},
			{"FLF2V layout", Inputs{Timesteps: []float32{1, 2}, Context: ctx, Image: up(2, 8, 12)}, "two images per sample", true},
			{"token count (image)", Inputs{TokenTimesteps: make([]float32, 17), Context: ctx, Image: img}, "per-token timesteps", true},
			{"text row counts", Inputs{Timesteps: []float32{1, 2}, Context: ctx, TextRows: []int{3}}, "1 text row counts for a batch of 2", false},
			{"text row count", Inputs{Timesteps: []float32{1, 2}, Context: ctx, TextRows: []int{3, 513}}, "text row count 513 outside", false},
		}
		for _, tt := range tests {
			if tt.image != image {
				continue
			}
			t.Run(tt.name, func(t *testing.T) {
				before := r.dev.Stats().Allocated
				out, err := m.ForwardInputs(r.ex, ops, x, tt.in)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want one containing %q", err, tt.want)
				}
				if out != nil {
					t.Error("a result came back with the error")
				}
				if after := r.dev.Stats().Allocated; after != before {
					t.Errorf("allocated %d bytes before, %d after a rejected call", before, after)
				}
			})
		}
		if err := ops.Err(); err != nil {
			t.Errorf("rejected inputs left an error in ops: %v", err)
		}
		tensor.Free(uploaded...)
	}
}

// TestTrainingRefusesImageModels: the training pass has no backward for
// the image path, so it must refuse image-to-video configs up front.
func TestTrainingRefusesImageModels(t *testing.T) {
	for _, cfg := range []Config{imageConfig(), ConfigI2V14B(), func() Config { c := tinyConfig(); c.InChannels = 36; return c }()} {
		if err := cfg.Trainable(); err == nil || !strings.Contains(err.Error(), "image-to-video") {
			t.Errorf("in %d, image_dim %s: %v", cfg.InChannels, intOrNull(cfg.ImageDim), err)
		}
	}
	for _, cfg := range []Config{tinyConfig(), Config1_3B(), ConfigTI2V5B()} {
		if err := cfg.Trainable(); err != nil {
			t.Errorf("text-to-video config refused: %v", err)
		}
	}
	cfg := imageConfig()
	r := newRig(t)
	m := r.model(t, cfg, synthesize(cfg, 1))
	ops := r.ex.Ops("transformer")
	x, c := ops.Upload(make([]float32, 36*16), 1, 36, 1, 4, 4), ops.Upload(make([]float32, 512*32), 1, 512, 32)
	defer tensor.Free(x, c)
	if _, _, err := m.ForwardTrain(r.ex, ops, x, []float32{1}, c); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("ForwardTrain on an image model: %v", err)
	}
}

// TestImageLoRA: the image Linears take adapters like every other.
func TestImageLoRA(t *testing.T) {
	cfg := imageConfig()
	src := synthesize(cfg, 8)
	shape := []int{1, cfg.InChannels, 1, 4, 4}
	x := modeltest.Randn(1, tensor.NumElems(shape))
	h := hostInputs{ts: []float32{300}, ctx: modeltest.Randn(2, 512*cfg.TextDim), lt: 512, img: modeltest.Randn(3, 3*12), imgShape: []int{1, 3, 12}}
	r := newRig(t)
	m := r.model(t, cfg, src)
	base := r.forwardInputs(t, m, x, shape, h)
	ops := r.ex.Ops("transformer")
	for _, mod := range []string{"blocks.1.attn2.add_k_proj", "condition_embedder.image_embedder.ff.net.2"} {
		_, shapes := cfg.LinearShapes()
		s, ok := shapes[mod]
		if !ok {
			t.Fatalf("LinearShapes lacks %s", mod)
		}
		a, b := ops.Upload(modeltest.Randn(4, 2*s[1]), 2, s[1]), ops.Upload(modeltest.Randn(5, s[0]*2), s[0], 2)
		if err := m.SetLoRA([]LoRA{{Module: mod, A: a, B: b, Scale: 1}}); err != nil {
			t.Fatal(err)
		}
		got := r.forwardInputs(t, m, x, shape, h)
		if d := maxDiff(got, base); d < 1e-4 {
			t.Errorf("%s: the adapter changed the output by %g", mod, d)
		}
		if err := m.SetLoRA(nil); err != nil {
			t.Fatal(err)
		}
		tensor.Free(a, b)
	}
}

// imageGolden is a transformer folder diffusers 0.40.0 saved (copied from
// the pipeline goldens): its config and weights.
func imageGolden(t *testing.T, name string) (Config, *checkpoint.Set) {
	t.Helper()
	dir := filepath.Join("testdata", name)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	weights, err := checkpoint.OpenSet(filepath.Join(dir, "diffusion_pytorch_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { weights.Close() })
	return cfg, weights
}

// TestSavedTransformersLoad loads the transformers of the Wan 2.1 I2V and
// Wan 2.2 TI2V pipeline goldens: Params must name exactly their tensors
// with their shapes, the component must register over them, and a pass
// with their weights (image embeddings, per-token timesteps as each
// pipeline passes them) must match the transcription; streamed from disk
// block by block it must give the same bits as resident.
func TestSavedTransformersLoad(t *testing.T) {
	tests := []struct {
		name     string
		image    bool
		channels int
		lt       int
	}{
		{"wan21_i2v_transformer", true, 36, 512},
		{"wan22_ti2v_transformer", false, 12, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, weights := imageGolden(t, tt.name)
			if cfg.HasImage() != tt.image || cfg.InChannels != tt.channels {
				t.Fatalf("config %+v", cfg)
			}
			modeltest.ParamsMatchCheckpoint(t, weights, cfg.Params())
			w := map[string][]float32{}
			for _, n := range weights.Names() {
				w[n], _ = modeltest.TensorOf(t, weights, n)
			}
			shape := []int{1, cfg.InChannels, 3, 4, 6} // the goldens' latent grid: 3 frames of 2×3 tokens
			x := modeltest.Randn(1, tensor.NumElems(shape))
			h := hostInputs{ctx: modeltest.Randn(2, tt.lt*cfg.TextDim), lt: tt.lt}
			if tt.image {
				h.ts = []float32{999}
				h.imgShape = []int{1, 17, *cfg.ImageDim} // the golden's image_embeds
				h.img = modeltest.Randn(3, tensor.NumElems(h.imgShape))
			} else {
				ts, err := cfg.ExpandTimesteps(1, 3, 4, 6, 999, true)
				if err != nil {
					t.Fatal(err)
				}
				h.tokTS = ts
			}
			r := newRig(t)
			m := r.model(t, cfg, residency.SourceOf(weights))
			got := r.forwardInputs(t, m, x, shape, h)
			checkAgainstReference(t, cfg, w, got, x, shape, h)

			plan := residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierDisk, Prefetch: 1}, "transformer")
			sr := &rig{}
			mr := modeltest.NewRig(t, nil, plan)
			sr.dev, sr.ex = mr.Dev, mr.Ex
			sm := sr.model(t, cfg, residency.SourceOf(weights))
			if streamed := sr.forwardInputs(t, sm, x, shape, h); !slices.Equal(streamed, got) {
				t.Errorf("streamed pass differs from resident (max abs diff %g)", maxDiff(streamed, got))
			}
		})
	}
}

// TestImageForwardOutOfMemory gives the device room for the weights and
// little else: an image pass must fail with the allocator's error and
// free everything it had allocated.
func TestImageForwardOutOfMemory(t *testing.T) {
	cfg := imageConfig()
	src := synthesize(cfg, 2)
	shape := []int{1, cfg.InChannels, 1, 4, 4}
	var weights int64
	for _, p := range cfg.Params() {
		weights += int64(4*tensor.NumElems(p.Shape)+63) &^ 63
	}
	inputs := int64(4 * (tensor.NumElems(shape) + 512*cfg.TextDim + 3*12 + 3*16))
	for _, room := range []int64{8 << 10, 64 << 10, 160 << 10} {
		dev, host := cpu.NewDevice(weights+inputs+room), cpu.NewDevice(0)
		ex, err := residency.New(residency.Config{Backend: cpu.New(dev, nil), HostBackend: cpu.New(host, nil)})
		if err != nil {
			t.Fatal(err)
		}
		m := New(cfg)
		if err := ex.Register(m.Component("transformer", src)); err != nil {
			t.Fatal(err)
		}
		ops := ex.Ops("transformer")
		x := ops.Upload(modeltest.Randn(1, tensor.NumElems(shape)), shape...)
		c := ops.Upload(modeltest.Randn(2, 512*cfg.TextDim), 1, 512, cfg.TextDim)
		img := ops.Upload(modeltest.Randn(3, 3*12), 1, 3, 12)
		if err := ops.Err(); err != nil {
			t.Fatal(err)
		}
		out, err := m.ForwardInputs(ex, ops, x, Inputs{Timesteps: []float32{3}, Context: c, Image: img})
		if !errors.Is(err, tensor.ErrOutOfMemory) {
			t.Errorf("room %d: error %v, want out of memory", room, err)
		}
		out.Free()
		tensor.Free(x, c, img)
		ex.Close()
		if a := dev.Stats().Allocated; a != 0 {
			t.Errorf("room %d: %d bytes still allocated after a failed pass", room, a)
		}
	}
}
