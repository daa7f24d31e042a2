package wan

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// TestFFNChunkIsExact runs the golden case with the feed-forward over token
// chunks of several sizes (smaller than, dividing and not dividing the 36
// tokens per sample) and compares with the unchunked pass. Every token goes
// through the same row-wise operations either way, so with the reference
// GEMM, whose result for a row does not depend on how many rows it is
// given, the results must agree bit for bit. A fast GEMM may pick other
// kernels for other row counts (and so sum in another order): with it the
// test asks for agreement within 1e-6 and logs whether it was exact.
func TestFFNChunkIsExact(t *testing.T) {
	g := loadGolden(t, "wan_transformer")
	x, xs := modeltest.TensorOf(t, g.inputs, "hidden_states")
	ts, _ := modeltest.TensorOf(t, g.inputs, "timestep")
	ctx, cs := modeltest.TensorOf(t, g.inputs, "encoder_hidden_states")
	for _, impl := range []gemm.Impl{gemm.Naive{}, gemm.Best()} {
		r := newRigGEMM(t, impl)
		m := r.model(t, g.cfg, residency.SourceOf(g.weights))
		whole := r.forward(t, m, x, xs, ts, ctx, cs)
		before := r.dev.Stats().Allocated
		for _, chunk := range []int{1, 5, 12, 35, 36, 1000} {
			m.Options.FFNChunk = chunk
			got := r.forward(t, m, x, xs, ts, ctx, cs)
			diff := maxDiff(got, whole)
			exact := slices.Equal(got, whole)
			if _, naive := impl.(gemm.Naive); (naive && !exact) || diff > 1e-6 {
				t.Errorf("%s, FFNChunk %d: result differs from the unchunked pass (max abs diff %g)", impl.Name(), chunk, diff)
			} else if !naive {
				t.Logf("%s, FFNChunk %d: bit-identical %v, max abs diff %.3g", impl.Name(), chunk, exact, diff)
			}
			if after := r.dev.Stats().Allocated; after != before {
				t.Errorf("%s, FFNChunk %d: device allocated %d bytes before Forward, %d after", impl.Name(), chunk, before, after)
			}
		}
		m.Options.FFNChunk = 0
	}
}

// TestFFNChunkBoundsPeak checks that chunking does what it is for: the
// pass's peak shrinks once the [tokens, ffn_dim] intermediate dominates.
func TestFFNChunkBoundsPeak(t *testing.T) {
	cfg := tinyConfig()
	cfg.FFNDim = 4096 // make the feed-forward intermediate the largest tensor
	src := synthesize(cfg, 7)
	shape := []int{1, cfg.InChannels, 2, 8, 8} // 32 tokens
	x := modeltest.Randn(1, tensor.NumElems(shape))
	ctx := modeltest.Randn(2, 5*cfg.TextDim)
	peak := func(chunk int) int64 {
		r := newRig(t)
		m := r.model(t, cfg, src)
		r.forward(t, m, x, shape, []float32{500}, ctx, []int{1, 5, cfg.TextDim}) // loads the weights
		m.Options.FFNChunk = chunk
		r.dev.ResetPeakStats()
		base := r.dev.Stats().Allocated
		r.forward(t, m, x, shape, []float32{500}, ctx, []int{1, 5, cfg.TextDim})
		return r.dev.Stats().PeakAllocated - base
	}
	whole, chunked := peak(0), peak(4)
	// Unchunked the intermediate is 32×4096 floats (512 KiB); in chunks of
	// 4 tokens, 64 KiB.
	if chunked >= whole-256<<10 {
		t.Errorf("peak above resident weights: %d bytes unchunked, %d with FFNChunk 4", whole, chunked)
	}
}

// TestForwardWithoutCrossAttnNorm runs a synthetic checkpoint made from
// Params for a config without norm2 (nn.Identity in the reference).
func TestForwardWithoutCrossAttnNorm(t *testing.T) {
	cfg := tinyConfig()
	cfg.CrossAttnNorm = false
	cfg.PatchSize = [3]int{2, 2, 1}
	cfg.OutChannels = 4
	src := synthesize(cfg, 3)
	if _, ok := src.Get("blocks.0.norm2.weight"); ok {
		t.Fatal("Params lists norm2 without cross_attn_norm")
	}
	shape := []int{2, cfg.InChannels, 4, 2, 3}
	x := modeltest.Randn(4, tensor.NumElems(shape))
	ctx := modeltest.Randn(5, 2*3*cfg.TextDim)
	r := newRig(t)
	m := r.model(t, cfg, src)
	got := r.forward(t, m, x, shape, []float32{10, 900}, ctx, []int{2, 3, cfg.TextDim})
	for i, v := range got {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("output[%d] = %g", i, v)
		}
	}
}

func TestForwardRejectsBadInputs(t *testing.T) {
	g := loadGolden(t, "wan_transformer")
	r := newRig(t)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	ops := r.ex.Ops("transformer")
	var uploaded []*tensor.Tensor
	up := func(shape ...int) *tensor.Tensor {
		t := ops.Upload(make([]float32, tensor.NumElems(shape)), shape...)
		uploaded = append(uploaded, t)
		return t
	}
	defer func() { tensor.Free(uploaded...) }()
	good, ctx := up(2, 16, 3, 6, 8), up(2, 12, 32)
	tests := []struct {
		name    string
		latents *tensor.Tensor
		ts      []float32
		ctx     *tensor.Tensor
		want    string
	}{
		{"rank", up(2, 16, 6, 8), []float32{1, 2}, ctx, "want float32 [B, 16, F, H, W]"},
		{"channels", up(2, 8, 3, 6, 8), []float32{1, 2}, ctx, "want float32 [B, 16, F, H, W]"},
		{"odd height", up(2, 16, 3, 5, 8), []float32{1, 2}, ctx, "not a multiple of the patch size"},
		{"timesteps", good, []float32{1}, ctx, "1 timesteps for a batch of 2"},
		{"context batch", good, []float32{1, 2}, up(1, 12, 32), "want float32 [2, Ltext, 32]"},
		{"context width", good, []float32{1, 2}, up(2, 12, 16), "want float32 [2, Ltext, 32]"},
		{"nil context", good, []float32{1, 2}, nil, "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.dev.Stats().Allocated
			out, err := m.Forward(r.ex, ops, tt.latents, tt.ts, tt.ctx)
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
	if _, err := New(g.cfg).Forward(r.ex, ops, good, []float32{1, 2}, ctx); err == nil || !strings.Contains(err.Error(), "Component") {
		t.Errorf("Forward before Component: %v", err)
	}
}

// TestForwardOutOfMemory gives the device room for the weights and little
// else: Forward must fail with the allocator's error and free everything
// it had allocated.
func TestForwardOutOfMemory(t *testing.T) {
	g := loadGolden(t, "wan_transformer")
	x, xs := modeltest.TensorOf(t, g.inputs, "hidden_states")
	ts, _ := modeltest.TensorOf(t, g.inputs, "timestep")
	ctx, cs := modeltest.TensorOf(t, g.inputs, "encoder_hidden_states")

	var weights int64
	for _, p := range g.cfg.Params() {
		weights += int64(4*tensor.NumElems(p.Shape)+63) &^ 63
	}
	for _, room := range []int64{8 << 10, 40 << 10} {
		dev, host := cpu.NewDevice(weights+int64(4*(len(x)+len(ctx)))+room), cpu.NewDevice(0)
		ex, err := residency.New(residency.Config{Backend: cpu.New(dev, nil), HostBackend: cpu.New(host, nil)})
		if err != nil {
			t.Fatal(err)
		}
		m := New(g.cfg)
		if err := ex.Register(m.Component("transformer", residency.SourceOf(g.weights))); err != nil {
			t.Fatal(err)
		}
		ops := ex.Ops("transformer")
		xt, ct := ops.Upload(x, xs...), ops.Upload(ctx, cs...)
		if err := ops.Err(); err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(ex, ops, xt, ts, ct)
		if !errors.Is(err, tensor.ErrOutOfMemory) {
			t.Errorf("room %d: error %v, want out of memory", room, err)
		}
		out.Free()
		tensor.Free(xt, ct)
		ex.Close()
		if a := dev.Stats().Allocated; a != 0 {
			t.Errorf("room %d: %d bytes still allocated after a failed pass", room, a)
		}
	}
}

func TestTimestepEmbedding(t *testing.T) {
	// dim 6: frequencies exp(-ln(1e4)·i/3) = 1, 10^(-4/3), 10^(-8/3).
	got := timestepEmbedding([]float32{0, 2}, 6)
	f := []float64{1, math.Pow(10, -4.0/3), math.Pow(10, -8.0/3)}
	want := []float32{1, 1, 1, 0, 0, 0}
	for _, v := range f {
		want = append(want, float32(math.Cos(2*v)))
	}
	for _, v := range f {
		want = append(want, float32(math.Sin(2*v)))
	}
	modeltest.Compare(t, "embedding", got, want, 1e-6, 1e-6)
	// An odd width gets a zero column at the end.
	if odd := timestepEmbedding([]float32{3}, 5); len(odd) != 5 || odd[4] != 0 {
		t.Errorf("odd width: %v", odd)
	}
}

func TestRopeSplit(t *testing.T) {
	// Channels per axis: diffusers 0.40.0 splits at the construction
	// widths D−2·2⌊D/6⌋, 2⌊D/6⌋, 2⌊D/6⌋ (older versions split at
	// D−2⌊D/3⌋, ⌊D/3⌋, ⌊D/3⌋, which differs when D ≡ 4 mod 6).
	tests := []struct {
		headDim int
		split   [3]int
	}{
		{128, [3]int{44, 42, 42}},
		{20, [3]int{8, 6, 6}},
		{26, [3]int{10, 8, 8}},
		{10, [3]int{6, 2, 2}},  // older split: 4/3/3
		{16, [3]int{8, 4, 4}},  // older split: 6/5/5
		{22, [3]int{10, 6, 6}}, // older split: 8/7/7
		{28, [3]int{12, 8, 8}}, // older split: 10/9/9
	}
	for _, tt := range tests {
		c := defaults()
		c.AttentionHeadDim = tt.headDim
		g, err := c.newRopeGrid(2, 4, 4)
		if err != nil {
			t.Fatal(err)
		}
		var n [3]int
		for _, a := range g.axis {
			n[a]++
		}
		if n != tt.split {
			t.Errorf("head dim %d: split %v, want %v", tt.headDim, n, tt.split)
		}
	}
}

// TestRopeFreqsFollowDiffusers040 derives WanRotaryPosEmbed's tables the
// way diffusers 0.40.0 computes them, independently of ropeGrid: one
// get_1d_rotary_pos_embed table per axis (rows = positions, frequencies
// repeated per pair), concatenated, split at the same widths, and each
// token reading its frame's, row's and column's part. It covers head
// sizes where the older split disagrees.
func TestRopeFreqsFollowDiffusers040(t *testing.T) {
	const frames, height, width = 3, 6, 8 // latent sizes; patch (1, 2, 2)
	for _, d := range []int{10, 16, 20, 22, 24, 26, 28, 128} {
		c := defaults()
		c.AttentionHeadDim = d
		cos, sin, err := c.RopeFreqs(frames, height, width)
		if err != nil {
			t.Fatal(err)
		}
		hw := 2 * (d / 6)
		widths := [3]int{d - 2*hw, hw, hw}
		// axisTable[a][p] is the [width_a] row of get_1d_rotary_pos_embed
		// for position p: angle p / θ^(2i/width_a) for pair i.
		axisAngles := func(a, p int) []float64 {
			row := make([]float64, widths[a])
			for ch := range row {
				i := ch / 2
				row[ch] = float64(p) / math.Pow(ropeTheta, float64(2*i)/float64(widths[a]))
			}
			return row
		}
		grid := [3]int{frames, height / 2, width / 2}
		tok := 0
		for f := range grid[0] {
			for h := range grid[1] {
				for w := range grid[2] {
					var want []float64
					for a, pos := range [3]int{f, h, w} {
						want = append(want, axisAngles(a, pos)...)
					}
					for ch, ang := range want {
						gc, gs := cos[tok*d+ch], sin[tok*d+ch]
						if math.Abs(gc-math.Cos(ang)) > 1e-15 || math.Abs(gs-math.Sin(ang)) > 1e-15 {
							t.Fatalf("head dim %d, token (%d,%d,%d), channel %d: cos %v sin %v, want %v %v",
								d, f, h, w, ch, gc, gs, math.Cos(ang), math.Sin(ang))
						}
					}
					tok++
				}
			}
		}
	}
}

// TestRopeHalvesFollowReference checks the [L, D/2] tables against the full
// ones the way apply_rotary_emb reads them (cos of even, sin of odd
// channels), including head sizes where older diffusers split otherwise.
func TestRopeHalvesFollowReference(t *testing.T) {
	for _, d := range []int{20, 10, 16} {
		c := defaults()
		c.AttentionHeadDim = d
		g, err := c.newRopeGrid(3, 6, 8)
		if err != nil {
			t.Fatal(err)
		}
		cos, sin, _ := c.RopeFreqs(3, 6, 8)
		hc, hs := g.ropeHalves()
		for l := range g.tokens() {
			for j := range d / 2 {
				if hc[l*d/2+j] != cos[l*d+2*j] || hs[l*d/2+j] != sin[l*d+2*j+1] {
					t.Fatalf("head dim %d: token %d pair %d differs", d, l, j)
				}
			}
		}
	}
}

func TestRopeRejectsLongAxes(t *testing.T) {
	c := Config1_3B()
	if _, _, err := c.RopeFreqs(1025, 2, 2); err == nil || !strings.Contains(err.Error(), "rope_max_seq_len") {
		t.Errorf("1025 frames: %v", err)
	}
	if _, _, err := c.RopeFreqs(1, 1, 2); err == nil {
		t.Error("height 1 (no patch) accepted")
	}
}

func maxDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}
