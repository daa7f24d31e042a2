package wanvae

import (
	"slices"
	"testing"

	"ferry/backend/cpu/gemm"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// goldenTiling is the manifest's enable_tiling call.
var goldenTiling = Tiling{MinHeight: 32, MinWidth: 32, StrideHeight: 16, StrideWidth: 24}

// impls are the GEMMs the golden tests run with: the reference (float64
// accumulation) and the one ferry runs with (OpenBLAS or the Go kernels).
func impls() []gemm.Impl { return []gemm.Impl{gemm.Naive{}, gemm.Best()} }

func TestParamsMatchGoldenCheckpoint(t *testing.T) {
	g := loadGolden(t)
	modeltest.ParamsMatchCheckpoint(t, g.weights, g.cfg.Params())
}

// TestParamsMatchBlocks checks that every declared block binds exactly the
// weights Params assigns to it (the executor resolves names from the w
// tags, the planner sizes blocks from Params), for the golden
// architectures and the real ones of both layouts.
func TestParamsMatchBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"golden", loadGolden(t).cfg}, {"wan2.1", ConfigWan21()},
		{"golden-wan2.2", loadGolden22(t).cfg}, {"wan2.2", ConfigWan22()},
	} {
		t.Run(tc.name, func(t *testing.T) { checkParamsMatchBlocks(t, tc.cfg) })
	}
}

func checkParamsMatchBlocks(t *testing.T, cfg Config) {
	src := shapeSource(cfg)
	r := newRig(t, nil, nil)
	m := New(cfg)
	comp := m.Component("vae", src)
	if err := r.ex.Register(comp); err != nil { // fails on any tag Params lacks
		t.Fatal(err)
	}
	bytes, count := map[string]int64{}, map[string]int{}
	for _, p := range cfg.Params() {
		bytes["vae."+p.Block] += int64(4 * tensor.NumElems(p.Shape))
		count["vae."+p.Block]++
	}
	for _, b := range comp.Blocks {
		// Block.Bytes pads each tensor to 64 bytes.
		if b.Bytes() < bytes[b.Name] || b.Bytes() > bytes[b.Name]+64*int64(count[b.Name]) {
			t.Errorf("block %s binds %d bytes, Params say %d", b.Name, b.Bytes(), bytes[b.Name])
		}
		delete(bytes, b.Name)
	}
	if len(bytes) != 0 {
		t.Errorf("Params name blocks the component does not declare: %v", bytes)
	}
}

func TestDecodeMatchesGolden(t *testing.T) {
	g := loadGolden(t)
	for _, impl := range impls() {
		for _, tc := range []struct{ in, out string }{{"z", "decode"}, {"z_big", "decode_big_untiled"}} {
			t.Run(impl.Name()+"/"+tc.out, func(t *testing.T) {
				z, zs := modeltest.TensorOf(t, g.inputs, tc.in)
				want, ws := modeltest.TensorOf(t, g.outputs, tc.out)
				r := newRig(t, impl, nil)
				m := r.model(t, g.cfg, residency.SourceOf(g.weights))
				frames := 0
				m.Options.OnFrame = func(done, total int) {
					frames++
					if done != frames || total != zs[2] {
						t.Errorf("OnFrame(%d, %d), want (%d, %d)", done, total, frames, zs[2])
					}
				}
				got, gs := r.decode(t, m, z, zs)
				if !slices.Equal(gs, ws) {
					t.Fatalf("decoded %v, want %v", gs, ws)
				}
				if frames != zs[2] {
					t.Errorf("OnFrame called %d times, want %d", frames, zs[2])
				}
				worst := modeltest.Compare(t, tc.out, got, want, atol, rtol)
				t.Logf("%s: max abs error %.3g (golden absmax %.3g)", tc.out, worst, absMax(want))

				// The weights are resident now; a second pass must leave
				// the device as it found it and repeat itself exactly.
				m.Options.OnFrame = nil
				before := r.dev.Stats().Allocated
				again, _ := r.decode(t, m, z, zs)
				if after := r.dev.Stats().Allocated; after != before {
					t.Errorf("device allocated %d bytes before Decode, %d after", before, after)
				}
				if !slices.Equal(got, again) {
					t.Error("a second Decode gave a different result")
				}
			})
		}
	}
}

func TestEncodeMatchesGolden(t *testing.T) {
	g := loadGolden(t)
	for _, impl := range impls() {
		t.Run(impl.Name(), func(t *testing.T) {
			video, vs := modeltest.TensorOf(t, g.inputs, "video")
			r := newRig(t, impl, nil)
			m := r.model(t, g.cfg, residency.SourceOf(g.weights))
			chunks := 0
			m.Options.OnFrame = func(done, total int) {
				chunks++
				if done != chunks || total != 3 {
					t.Errorf("OnFrame(%d, %d), want (%d, 3)", done, total, chunks)
				}
			}
			mean, logvar, std, shape := r.encode(t, m, video, vs)
			if chunks != 3 { // frames 0, 1-4, 5-8
				t.Errorf("OnFrame called %d times, want 3", chunks)
			}
			for _, tc := range []struct {
				name string
				got  []float32
			}{{"encode_mean", mean}, {"encode_logvar", logvar}, {"encode_std", std}} {
				want, ws := modeltest.TensorOf(t, g.outputs, tc.name)
				if !slices.Equal(shape, ws) {
					t.Fatalf("%s: shape %v, want %v", tc.name, shape, ws)
				}
				worst := modeltest.Compare(t, tc.name, tc.got, want, atol, rtol)
				t.Logf("%s: max abs error %.3g (golden absmax %.3g)", tc.name, worst, absMax(want))
			}
			// The weights are resident now: a second Encode must leave the
			// device as it found it and repeat itself exactly.
			m.Options.OnFrame = nil
			before := r.dev.Stats().Allocated
			again, _, _, _ := r.encode(t, m, video, vs)
			if after := r.dev.Stats().Allocated; after != before {
				t.Errorf("device allocated %d bytes before Encode, %d after", before, after)
			}
			if !slices.Equal(mean, again) {
				t.Error("a second Encode gave a different mean")
			}
		})
	}
}

func TestTiledDecodeMatchesGolden(t *testing.T) {
	g := loadGolden(t)
	z, zs := modeltest.TensorOf(t, g.inputs, "z_big")
	want, ws := modeltest.TensorOf(t, g.outputs, "tiled_decode")
	untiled, _ := modeltest.TensorOf(t, g.outputs, "decode_big_untiled")
	for _, impl := range impls() {
		t.Run(impl.Name(), func(t *testing.T) {
			r := newRig(t, impl, nil)
			m := r.model(t, g.cfg, residency.SourceOf(g.weights))
			tiling := goldenTiling
			m.Options.Tiling = &tiling
			calls := 0
			m.Options.OnFrame = func(done, total int) { calls++ }
			got, gs := r.decode(t, m, z, zs)
			if !slices.Equal(gs, ws) {
				t.Fatalf("decoded %v, want %v", gs, ws)
			}
			// 3 rows × 3 columns of tiles, 3 latent frames each.
			if calls != 27 {
				t.Errorf("OnFrame called %d times, want 27", calls)
			}
			worst := modeltest.Compare(t, "tiled_decode", got, want, atol, rtol)
			t.Logf("tiled_decode: max abs error %.3g (golden absmax %.3g)", worst, absMax(want))
			// Tiling must change the result (else blending went unchecked).
			if d := maxDiff(got, untiled); d < 1e-3 {
				t.Errorf("tiled decode is within %g of the untiled one: tiles were not used", d)
			}
		})
	}
}

func TestTiledEncodeMatchesGolden(t *testing.T) {
	g := loadGolden(t)
	video, vs := modeltest.TensorOf(t, g.inputs, "video_big")
	for _, impl := range impls() {
		t.Run(impl.Name(), func(t *testing.T) {
			r := newRig(t, impl, nil)
			m := r.model(t, g.cfg, residency.SourceOf(g.weights))
			tiling := goldenTiling
			m.Options.Tiling = &tiling
			mean, logvar, _, shape := r.encode(t, m, video, vs)
			for _, tc := range []struct {
				name string
				got  []float32
			}{{"tiled_encode_mean", mean}, {"tiled_encode_logvar", logvar}} {
				want, ws := modeltest.TensorOf(t, g.outputs, tc.name)
				if !slices.Equal(shape, ws) {
					t.Fatalf("%s: shape %v, want %v", tc.name, shape, ws)
				}
				worst := modeltest.Compare(t, tc.name, tc.got, want, atol, rtol)
				t.Logf("%s: max abs error %.3g (golden absmax %.3g)", tc.name, worst, absMax(want))
			}
		})
	}
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, float64(a[i]-b[i]), float64(b[i]-a[i]))
	}
	return d
}

// TestDecodeBatch decodes two different latents as one batch: each half
// must match its own decode.
func TestDecodeBatch(t *testing.T) {
	g := loadGolden(t)
	z, zs := modeltest.TensorOf(t, g.inputs, "z")
	other := modeltest.Randn(3, len(z))
	r := newRig(t, nil, nil)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	first, _ := r.decode(t, m, z, zs)
	second, _ := r.decode(t, m, other, zs)
	batch := append(append([]float32(nil), z...), other...)
	bs := append([]int{2}, zs[1:]...)
	both, shape := r.decode(t, m, batch, bs)
	if shape[0] != 2 {
		t.Fatalf("batch decoded to %v", shape)
	}
	modeltest.Compare(t, "batch[0]", both[:len(first)], first, 1e-6, 1e-6)
	modeltest.Compare(t, "batch[1]", both[len(first):], second, 1e-6, 1e-6)
}
