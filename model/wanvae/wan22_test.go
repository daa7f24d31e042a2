package wanvae

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"ferry/model/modeltest"
	"ferry/residency"
)

// The wan22_vae golden case's tolerance (manifest.json: atol 1e-4, no
// relative term).
const atol22 = 1e-4

// loadGolden22 is the wan22_vae golden case: a tiny Wan 2.2 layout VAE
// (see testdata/README.md).
func loadGolden22(t testing.TB) *golden {
	t.Helper()
	gm := modeltest.LoadGolden(t, filepath.Join("testdata", "wan22"), "diffusion_pytorch_model.safetensors")
	cfg, err := ParseConfig(gm.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &golden{cfg: cfg, weights: gm.Weights, inputs: gm.Inputs, outputs: gm.Outputs}
}

func TestWan22GoldenConfig(t *testing.T) {
	cfg := loadGolden22(t).cfg
	if !cfg.IsResidual || cfg.patch() != 2 || cfg.ZDim != 12 || cfg.VideoChannels() != 3 {
		t.Errorf("golden config parsed as %+v", cfg)
	}
	if cfg.SpatialScale() != 16 || cfg.TemporalScale() != 4 || cfg.DecodedFrames(3) != 9 {
		t.Errorf("scales %d, %d, frames %d; want 16, 4, 9", cfg.SpatialScale(), cfg.TemporalScale(), cfg.DecodedFrames(3))
	}
}

func TestWan22ParamsMatchGoldenCheckpoint(t *testing.T) {
	g := loadGolden22(t)
	modeltest.ParamsMatchCheckpoint(t, g.weights, g.cfg.Params())
}

func TestWan22DecodeMatchesGolden(t *testing.T) {
	g := loadGolden22(t)
	for _, impl := range impls() {
		t.Run(impl.Name(), func(t *testing.T) {
			z, zs := modeltest.TensorOf(t, g.inputs, "latent")
			want, ws := modeltest.TensorOf(t, g.outputs, "decoded")
			r := newRig(t, impl, nil)
			m := r.model(t, g.cfg, residency.SourceOf(g.weights))
			got, gs := r.decode(t, m, z, zs)
			if !slices.Equal(gs, ws) {
				t.Fatalf("decoded %v, want %v", gs, ws)
			}
			worst := modeltest.Compare(t, "decoded", got, want, atol22, 0)
			t.Logf("decoded: max abs error %.3g (golden absmax %.3g)", worst, absMax(want))

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

func TestWan22EncodeMatchesGolden(t *testing.T) {
	g := loadGolden22(t)
	for _, impl := range impls() {
		t.Run(impl.Name(), func(t *testing.T) {
			video, vs := modeltest.TensorOf(t, g.inputs, "video")
			want, ws := modeltest.TensorOf(t, g.outputs, "encoded_mean")
			r := newRig(t, impl, nil)
			m := r.model(t, g.cfg, residency.SourceOf(g.weights))
			mean, _, _, shape := r.encode(t, m, video, vs)
			if !slices.Equal(shape, ws) {
				t.Fatalf("encoded %v, want %v", shape, ws)
			}
			worst := modeltest.Compare(t, "encoded_mean", mean, want, atol22, 0)
			t.Logf("encoded_mean: max abs error %.3g (golden absmax %.3g)", worst, absMax(want))

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

// wan22Tiling needs 4 rows × 3 columns of tiles on the golden sizes
// (latents 4 × 6, video 64 × 96) and blends over more than one unit.
var wan22Tiling = Tiling{MinHeight: 48, MinWidth: 64, StrideHeight: 16, StrideWidth: 32}

// hostTile is a tile's output on the host, [C, T, H, W].
type hostTile struct {
	d       []float32
	c, t    int
	h, w    int
	unitPix int // rows and columns per blending unit
}

func (tl hostTile) at(c, t, y, x int) *float32 { return &tl.d[((c*tl.t+t)*tl.h+y)*tl.w+x] }

// blendTilesReference is diffusers' tiled_decode / tiled_encode assembly
// written plainly over tiles given in output pixels: blend_v and blend_h
// in place in row-major order with extents of blendH × blendW units (a
// unit is unitPix rows or columns, the patch size of a patched decode),
// crops of cropH × cropW units, the joined rows cut to outH × outW.
func blendTilesReference(rows [][]hostTile, blendH, blendW, cropH, cropW, outH, outW int) []float32 {
	u := rows[0][0].unitPix
	c, t := rows[0][0].c, rows[0][0].t
	out := make([]float32, c*t*outH*outW)
	oy := 0
	for i, row := range rows {
		ox, rowH := 0, 0
		for j, b := range row {
			if i > 0 {
				a := rows[i-1][j]
				e := min(a.h/u, b.h/u, blendH)
				for y := range e * u {
					f := float64(y/u) / float64(e)
					for ci := range c {
						for ti := range t {
							for x := range b.w {
								*b.at(ci, ti, y, x) = *a.at(ci, ti, a.h-e*u+y, x)*float32(1-f) + *b.at(ci, ti, y, x)*float32(f)
							}
						}
					}
				}
			}
			if j > 0 {
				a := row[j-1]
				e := min(a.w/u, b.w/u, blendW)
				for x := range e * u {
					f := float64(x/u) / float64(e)
					for ci := range c {
						for ti := range t {
							for y := range b.h {
								*b.at(ci, ti, y, x) = *a.at(ci, ti, y, a.w-e*u+x)*float32(1-f) + *b.at(ci, ti, y, x)*float32(f)
							}
						}
					}
				}
			}
			ch, cw := min(cropH*u, b.h), min(cropW*u, b.w)
			for ci := range c {
				for ti := range t {
					for y := range ch {
						for x := range cw {
							if oy+y < outH && ox+x < outW {
								out[((ci*t+ti)*outH+oy+y)*outW+ox+x] = *b.at(ci, ti, y, x)
							}
						}
					}
				}
			}
			ox += cw
			rowH = ch
		}
		oy += rowH
	}
	return out
}

// crop5 cuts [0, C, T, y0:y0+h, x0:x0+w] out of a host tensor of shape s.
func crop5(d []float32, s []int, y0, x0, h, w int) []float32 {
	c, t, H, W := s[1], s[2], s[3], s[4]
	out := make([]float32, 0, c*t*h*w)
	for ci := range c {
		for ti := range t {
			for y := y0; y < y0+h; y++ {
				base := ((ci*t+ti)*H + y) * W
				out = append(out, d[base+x0:base+x0+w]...)
			}
		}
	}
	return out
}

// TestWan22TiledDecodeMatchesTiles checks the tiled decode of the Wan 2.2
// layout against its definition: every tile decoded on its own by the
// untiled Decode (which matches the golden), blended in patched units and
// cropped as diffusers' tiled_decode does, on a size that needs 12 tiles.
func TestWan22TiledDecodeMatchesTiles(t *testing.T) {
	g := loadGolden22(t)
	z, zs := modeltest.TensorOf(t, g.inputs, "latent")
	r := newRig(t, nil, nil)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	untiled, _ := r.decode(t, m, z, zs)

	const scale, p = 16, 2
	tl := wan22Tiling
	var rows [][]hostTile
	for _, y0 := range starts(zs[3], tl.StrideHeight/scale) {
		var row []hostTile
		for _, x0 := range starts(zs[4], tl.StrideWidth/scale) {
			h, w := min(tl.MinHeight/scale, zs[3]-y0), min(tl.MinWidth/scale, zs[4]-x0)
			d, s := r.decode(t, m, crop5(z, zs, y0, x0, h, w), []int{1, zs[1], zs[2], h, w})
			for _, v := range d {
				if v <= -1 || v >= 1 {
					t.Fatalf("tile value %g is clamped: the reference (which blends clamped tiles) does not apply", v)
				}
			}
			row = append(row, hostTile{d: d, c: s[1], t: s[2], h: s[3], w: s[4], unitPix: p})
		}
		rows = append(rows, row)
	}
	outH, outW := scale*zs[3], scale*zs[4]
	want := blendTilesReference(rows, tl.MinHeight/p-tl.StrideHeight/p, tl.MinWidth/p-tl.StrideWidth/p,
		tl.StrideHeight/p, tl.StrideWidth/p, outH, outW)

	m.Options.Tiling = &tl
	calls := 0
	m.Options.OnFrame = func(done, total int) { calls++ }
	got, gs := r.decode(t, m, z, zs)
	if !slices.Equal(gs, []int{1, 3, 9, outH, outW}) {
		t.Fatalf("tiled decode gave %v", gs)
	}
	if calls != 12*zs[2] {
		t.Errorf("OnFrame called %d times, want %d (12 tiles × %d frames)", calls, 12*zs[2], zs[2])
	}
	worst := modeltest.Compare(t, "tiled decode", got, want, 1e-6, 0)
	t.Logf("tiled decode vs blended tiles: max abs error %.3g", worst)
	if d := maxDiff(got, untiled); d < 1e-3 {
		t.Errorf("tiled decode is within %g of the untiled one: tiles were not used", d)
	}
}

// TestWan22TiledEncodeMatchesTiles is the same for the tiled encode:
// every tile of pixels encoded on its own by the untiled Encode, the
// moments blended in latents and cropped as diffusers' tiled_encode does
// (after its fix for patched inputs, which tiles the patched video).
func TestWan22TiledEncodeMatchesTiles(t *testing.T) {
	g := loadGolden22(t)
	video, vs := modeltest.TensorOf(t, g.inputs, "video")
	r := newRig(t, nil, nil)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	untiled, _, _, _ := r.encode(t, m, video, vs)

	// The sizes count patches of 2x2 pixels (diffusers 0.40's tiled
	// encode runs over the patched video): tiles of 2·MinHeight pixels
	// every 2·StrideHeight, each keeping StrideHeight/8 latents.
	const scale, pt = 16, 2
	tl := wan22Tiling
	var means, logvars [][]hostTile
	for _, y0 := range starts(vs[3], pt*tl.StrideHeight) {
		var mrow, lrow []hostTile
		for _, x0 := range starts(vs[4], pt*tl.StrideWidth) {
			h, w := min(pt*tl.MinHeight, vs[3]-y0), min(pt*tl.MinWidth, vs[4]-x0)
			mean, lv, _, s := r.encode(t, m, crop5(video, vs, y0, x0, h, w), []int{1, vs[1], vs[2], h, w})
			for _, v := range lv {
				if v <= -30 || v >= 20 {
					t.Fatalf("tile log-variance %g is clamped: the reference does not apply", v)
				}
			}
			mrow = append(mrow, hostTile{d: mean, c: s[1], t: s[2], h: s[3], w: s[4], unitPix: 1})
			lrow = append(lrow, hostTile{d: lv, c: s[1], t: s[2], h: s[3], w: s[4], unitPix: 1})
		}
		means, logvars = append(means, mrow), append(logvars, lrow)
	}
	const enc = scale / pt
	bh, bw := tl.MinHeight/enc-tl.StrideHeight/enc, tl.MinWidth/enc-tl.StrideWidth/enc
	outH, outW := vs[3]/scale, vs[4]/scale
	wantMean := blendTilesReference(means, bh, bw, tl.StrideHeight/enc, tl.StrideWidth/enc, outH, outW)
	wantLogvar := blendTilesReference(logvars, bh, bw, tl.StrideHeight/enc, tl.StrideWidth/enc, outH, outW)

	m.Options.Tiling = &tl
	mean, logvar, _, shape := r.encode(t, m, video, vs)
	if !slices.Equal(shape, []int{1, g.cfg.ZDim, 3, outH, outW}) {
		t.Fatalf("tiled encode gave %v", shape)
	}
	modeltest.Compare(t, "tiled mean", mean, wantMean, 1e-6, 0)
	modeltest.Compare(t, "tiled logvar", logvar, wantLogvar, 1e-6, 0)
	if d := maxDiff(mean, untiled); d < 1e-3 {
		t.Errorf("tiled encode is within %g of the untiled one: tiles were not used", d)
	}
}

// TestWan22RealParams checks Params for Wan2.2-TI2V-5B's VAE against
// shapes worked out by hand from the reference's constructors (encoder
// dims 160·[1, 1, 2, 4, 4], decoder dims 256·[4, 4, 4, 2, 1], 12 patched
// channels in and out, z_dim 48, upsamplers that keep their channels).
func TestWan22RealParams(t *testing.T) {
	cfg := ConfigWan22()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for _, p := range cfg.Params() {
		if _, dup := got[p.Name]; dup {
			t.Errorf("%s listed twice", p.Name)
		}
		got[p.Name] = p.Shape
	}
	want := []struct {
		name  string
		shape []int
	}{
		{"encoder.conv_in.weight", []int{160, 12, 3, 3, 3}},
		{"encoder.down_blocks.0.resnets.1.conv2.weight", []int{160, 160, 3, 3, 3}},
		{"encoder.down_blocks.0.downsampler.resample.1.weight", []int{160, 160, 3, 3}},
		{"encoder.down_blocks.1.resnets.0.conv_shortcut.weight", []int{320, 160, 1, 1, 1}},
		{"encoder.down_blocks.1.downsampler.time_conv.weight", []int{320, 320, 3, 1, 1}},
		{"encoder.down_blocks.2.resnets.0.norm1.gamma", []int{320, 1, 1, 1}},
		{"encoder.down_blocks.2.downsampler.time_conv.bias", []int{640}},
		{"encoder.down_blocks.3.resnets.1.conv1.weight", []int{640, 640, 3, 3, 3}},
		{"encoder.mid_block.attentions.0.to_qkv.weight", []int{1920, 640, 1, 1}},
		{"encoder.conv_out.weight", []int{96, 640, 3, 3, 3}},
		{"quant_conv.weight", []int{96, 96, 1, 1, 1}},
		{"post_quant_conv.weight", []int{48, 48, 1, 1, 1}},
		{"decoder.conv_in.weight", []int{1024, 48, 3, 3, 3}},
		{"decoder.mid_block.resnets.1.conv2.weight", []int{1024, 1024, 3, 3, 3}},
		{"decoder.up_blocks.0.resnets.2.conv2.weight", []int{1024, 1024, 3, 3, 3}},
		{"decoder.up_blocks.0.upsampler.time_conv.weight", []int{2048, 1024, 3, 1, 1}},
		{"decoder.up_blocks.1.upsampler.resample.1.weight", []int{1024, 1024, 3, 3}},
		{"decoder.up_blocks.2.resnets.0.conv_shortcut.weight", []int{512, 1024, 1, 1, 1}},
		{"decoder.up_blocks.2.upsampler.resample.1.weight", []int{512, 512, 3, 3}},
		{"decoder.up_blocks.3.resnets.0.conv1.weight", []int{256, 512, 3, 3, 3}},
		{"decoder.norm_out.gamma", []int{256, 1, 1, 1}},
		{"decoder.conv_out.weight", []int{12, 256, 3, 3, 3}},
	}
	for _, w := range want {
		if s, ok := got[w.name]; !ok || !slices.Equal(s, w.shape) {
			t.Errorf("%s: Params give %v (listed %v), want %v", w.name, s, ok, w.shape)
		}
	}
	for _, absent := range []string{
		"encoder.down_blocks.3.downsampler.resample.1.weight", // the last level does not downsample
		"decoder.up_blocks.2.upsampler.time_conv.weight",      // temperal_downsample[0] is false
		"decoder.up_blocks.3.upsampler.resample.1.weight",
		"decoder.up_blocks.0.upsamplers.0.resample.1.weight", // the Wan 2.1 name
		"encoder.down_blocks.0.downsampler.time_conv.weight",
	} {
		if _, ok := got[absent]; ok {
			t.Errorf("Params list %s, which the layout does not have", absent)
		}
	}
	// Per level: 2 (encoder) or 3 (decoder) resnets of 6 tensors, +2 for
	// a shortcut conv where the channels change (encoder levels 1 and 2,
	// decoder levels 2 and 3); 2 tensors per spatial resampler, 4 with a
	// time_conv (encoder 2d, 3d, 3d; decoder 3d, 3d, 2d); 17 per mid block
	// (two resnets, the attention's norm, qkv and projection); 7 for
	// conv_in, norm_out, conv_out and quant_conv / post_quant_conv.
	enc := 4*2*6 + 2*2 + (2 + 4 + 4) + 17 + 7
	dec := 4*3*6 + 2*2 + (4 + 4 + 2) + 17 + 7
	if n := len(cfg.Params()); n != enc+dec {
		t.Errorf("Params list %d tensors, want %d", n, enc+dec)
	}
}

// TestWan22StreamedMatchesResident runs encode and decode of the Wan 2.2
// layout with every block streamed (prefetch 1): both must be
// bit-identical to the resident run, with blocks loaded per chunk.
func TestWan22StreamedMatchesResident(t *testing.T) {
	g := loadGolden22(t)
	z, zs := modeltest.TensorOf(t, g.inputs, "latent")
	video, vs := modeltest.TensorOf(t, g.inputs, "video")
	resident := newRig(t, nil, nil)
	mr := resident.model(t, g.cfg, residency.SourceOf(g.weights))
	wantVideo, _ := resident.decode(t, mr, z, zs)
	wantMean, _, _, _ := resident.encode(t, mr, video, vs)

	plan := residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, "vae")
	streamed := newRig(t, nil, plan)
	ms := streamed.model(t, g.cfg, residency.SourceOf(g.weights))
	gotVideo, _ := streamed.decode(t, ms, z, zs)
	gotMean, _, _, _ := streamed.encode(t, ms, video, vs)
	if !slices.Equal(gotVideo, wantVideo) {
		t.Errorf("streamed decode differs from resident (max diff %g)", maxDiff(gotVideo, wantVideo))
	}
	if !slices.Equal(gotMean, wantMean) {
		t.Errorf("streamed encode differs from resident (max diff %g)", maxDiff(gotMean, wantMean))
	}
	if s := streamed.ex.Stats(); s.Loads <= resident.ex.Stats().Loads {
		t.Errorf("%d block loads streamed, %d resident: blocks were not streamed", s.Loads, resident.ex.Stats().Loads)
	}
}

// TestWan22RejectsBadInput checks the inputs only the Wan 2.2 layout
// refuses: colour channels (not patched ones), sizes the residual
// encoder cannot halve, tiles that are not whole latents.
func TestWan22RejectsBadInput(t *testing.T) {
	g := loadGolden22(t)
	r := newRig(t, nil, nil)
	m := r.model(t, g.cfg, residency.SourceOf(g.weights))
	ops := r.ex.Ops("vae")
	tests := []struct {
		name   string
		shape  []int
		tiling *Tiling
		want   string
	}{
		{"patched channels", []int{1, 12, 1, 32, 32}, nil, "want float32 [B, 3, T, H, W]"},
		{"height not a multiple of 16", []int{1, 3, 1, 24, 32}, nil, "multiples of 16"},
		{"tile not a multiple of 16", []int{1, 3, 1, 64, 64}, &Tiling{MinHeight: 40, MinWidth: 40, StrideHeight: 32, StrideWidth: 32}, "multiples of 16 pixels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.Options.Tiling = tt.tiling
			x := ops.Zeros(tt.shape...)
			defer x.Free()
			before := r.dev.Stats().Allocated
			mean, logvar, err := m.Encode(r.ex, ops, x)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode = %v, want an error containing %q", err, tt.want)
			}
			if mean != nil || logvar != nil {
				t.Error("Encode returned tensors with its error")
			}
			if after := r.dev.Stats().Allocated; after != before {
				t.Errorf("a refused Encode left %d bytes allocated (had %d)", after, before)
			}
		})
	}
	m.Options.Tiling = &Tiling{MinHeight: 24, MinWidth: 24, StrideHeight: 16, StrideWidth: 16}
	z := ops.Zeros(1, 12, 1, 3, 3)
	defer z.Free()
	if _, err := m.Decode(r.ex, ops, z); err == nil || !strings.Contains(err.Error(), "multiples of 16 pixels") {
		t.Errorf("tiled Decode with 24-pixel tiles = %v, want a refusal", err)
	}
}

// TestPatchifyRoundTrip checks patchify's channel order on a hand-made
// case (channel c·4 + dx·2 + dy holds pixel (2y+dy, 2x+dx) of colour c)
// and that unpatchify inverts it.
func TestPatchifyRoundTrip(t *testing.T) {
	const c, f, h, w = 2, 2, 4, 6
	shape := []int{1, c, f, h, w}
	d := modeltest.Randn(5, c*f*h*w)
	r := newRig(t, nil, nil)
	ops := r.ex.Ops("none")
	p := patchify(ops, ops.Upload(d, shape...), 2)
	got := ops.Download(p)
	if !slices.Equal(p.Shape(), []int{1, 4 * c, f, h / 2, w / 2}) {
		t.Fatalf("patched shape %v", p.Shape())
	}
	for ci := range c {
		for dx := range 2 {
			for dy := range 2 {
				for ti := range f {
					for y := range h / 2 {
						for x := range w / 2 {
							pc := ci*4 + dx*2 + dy
							g := got[((pc*f+ti)*(h/2)+y)*(w/2)+x]
							want := d[((ci*f+ti)*h+2*y+dy)*w+2*x+dx]
							if g != want {
								t.Fatalf("patched[%d, %d, %d, %d] = %g, want pixel (%d, %d) of colour %d = %g", pc, ti, y, x, g, 2*y+dy, 2*x+dx, ci, want)
							}
						}
					}
				}
			}
		}
	}
	u := unpatchify(ops, p, 2)
	back := ops.Download(u)
	u.Free()
	if err := ops.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, d) || !slices.Equal(u.Shape(), shape) {
		t.Error("unpatchify(patchify(x)) differs from x")
	}
}

// ti2v5bConfig is Wan-AI/Wan2.2-TI2V-5B-Diffusers' vae/config.json.
const ti2v5bConfig = `{
  "_class_name": "AutoencoderKLWan", "_diffusers_version": "0.35.0.dev0",
  "attn_scales": [], "base_dim": 160, "clip_output": false, "decoder_base_dim": 256,
  "dim_mult": [1, 2, 4, 4], "dropout": 0.0, "in_channels": 12, "is_residual": true,
  "latents_mean": [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.157, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207,
    -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567,
    -0.0729, 0.0899, -0.2799, -0.123, -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083,
    -0.052, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667],
  "latents_std": [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.499, 0.4818, 0.5013, 0.8158,
    1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804,
    0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866,
    0.4093, 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.06,
    0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744],
  "num_res_blocks": 2, "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16,
  "scale_factor_temporal": 4, "temperal_downsample": [false, true, true], "z_dim": 48
}`

func TestParseTI2V5BConfigIsWan22(t *testing.T) {
	cfg, err := ParseConfig([]byte(ti2v5bConfig))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, ConfigWan22()) {
		t.Errorf("ParseConfig(TI2V-5B) = %+v\nwant ConfigWan22 = %+v", cfg, ConfigWan22())
	}
	if cfg.SpatialScale() != 16 || cfg.TemporalScale() != 4 || cfg.VideoChannels() != 3 || cfg.DecodedFrames(31) != 121 {
		t.Errorf("scales %d, %d, channels %d, frames %d; want 16, 4, 3, 121",
			cfg.SpatialScale(), cfg.TemporalScale(), cfg.VideoChannels(), cfg.DecodedFrames(31))
	}
}

// FuzzParseConfig feeds ParseConfig arbitrary JSON: it must never panic,
// and what it accepts must validate again and, for sizes a test can list,
// give a parameter list whose shapes are all positive.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(ti2v5bConfig))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"is_residual": true, "patch_size": 2, "in_channels": 12, "out_channels": 12}`))
	f.Add([]byte(`{"patch_size": 3, "in_channels": 27, "out_channels": 27, "dim_mult": [1, 1], "temperal_downsample": [true]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := ParseConfig(raw)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config Validate refuses: %v", err)
		}
		if len(cfg.DimMult) > 8 || cfg.NumResBlocks > 8 {
			return
		}
		for _, p := range cfg.Params() {
			for _, d := range p.Shape {
				if d <= 0 {
					t.Fatalf("%s has shape %v", p.Name, p.Shape)
				}
			}
		}
	})
}
