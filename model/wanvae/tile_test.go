package wanvae

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"ferry/dtype"
	"ferry/tensor"
)

// fakeTile is a tile's output, as a host array [C, T, H, W], made up from
// the tile's position so that every tile differs.
func fakeTile(c, t, h, w, y0, x0 int) []float32 {
	d := make([]float32, c*t*h*w)
	for i := range d {
		d[i] = float32((i*7+y0*131+x0*17)%97) / 13
	}
	return d
}

// referenceTiles is diffusers' tiled_decode assembly written plainly: all
// tiles kept, blend_v and blend_h in place in row-major order, each tile
// cropped, rows joined, the result cropped.
func referenceTiles(g tileGrid, scale, c, t, outH, outW int) []float32 {
	type tile struct {
		d    []float32
		h, w int
	}
	at := func(tl tile, ci, ti, y, x int) *float32 { return &tl.d[((ci*t+ti)*tl.h+y)*tl.w+x] }
	var rows [][]tile
	for _, y0 := range starts(g.inH, g.strideH) {
		var row []tile
		for _, x0 := range starts(g.inW, g.strideW) {
			h, w := scale*min(g.tileH, g.inH-y0), scale*min(g.tileW, g.inW-x0)
			row = append(row, tile{fakeTile(c, t, h, w, y0, x0), h, w})
		}
		rows = append(rows, row)
	}
	full := make([][]float32, 0) // joined rows, each [C, T, rowH, rowW]
	var heights, widths []int
	for i, row := range rows {
		var crops []tile
		for j, b := range row {
			if i > 0 {
				a := rows[i-1][j]
				e := min(a.h, b.h, g.blendH)
				for y := range e {
					for ci := range c {
						for ti := range t {
							for x := range b.w {
								f := float64(y) / float64(e)
								*at(b, ci, ti, y, x) = *at(a, ci, ti, a.h-e+y, x)*float32(1-f) + *at(b, ci, ti, y, x)*float32(f)
							}
						}
					}
				}
			}
			if j > 0 {
				a := row[j-1]
				e := min(a.w, b.w, g.blendW)
				for x := range e {
					for ci := range c {
						for ti := range t {
							for y := range b.h {
								f := float64(x) / float64(e)
								*at(b, ci, ti, y, x) = *at(a, ci, ti, y, a.w-e+x)*float32(1-f) + *at(b, ci, ti, y, x)*float32(f)
							}
						}
					}
				}
			}
			ch, cw := min(g.cropH, b.h), min(g.cropW, b.w)
			crop := tile{make([]float32, c*t*ch*cw), ch, cw}
			for ci := range c {
				for ti := range t {
					for y := range ch {
						for x := range cw {
							*at(crop, ci, ti, y, x) = *at(b, ci, ti, y, x)
						}
					}
				}
			}
			crops = append(crops, crop)
		}
		rowW := 0
		for _, cr := range crops {
			rowW += cr.w
		}
		joined := make([]float32, c*t*crops[0].h*rowW)
		off := 0
		for _, cr := range crops {
			for ci := range c {
				for ti := range t {
					for y := range cr.h {
						for x := range cr.w {
							joined[((ci*t+ti)*cr.h+y)*rowW+off+x] = *at(cr, ci, ti, y, x)
						}
					}
				}
			}
			off += cr.w
		}
		full = append(full, joined)
		heights, widths = append(heights, crops[0].h), append(widths, rowW)
	}
	out := make([]float32, c*t*outH*outW)
	oy := 0
	for r, joined := range full {
		for y := range heights[r] {
			if oy+y >= outH {
				break
			}
			for ci := range c {
				for ti := range t {
					for x := range outW {
						out[((ci*t+ti)*outH+oy+y)*outW+x] = joined[((ci*t+ti)*heights[r]+y)*widths[r]+x]
					}
				}
			}
		}
		oy += heights[r]
	}
	return out
}

// TestTileAssemblyMatchesReference checks blending, cropping and assembly
// against the plain transcription above, including strides that are not
// multiples of the scale and edge tiles narrower than the blend.
func TestTileAssemblyMatchesReference(t *testing.T) {
	const c, frames, scale = 2, 2, 8
	tests := []struct {
		inH, inW int
		tiling   Tiling
	}{
		{6, 7, Tiling{32, 32, 16, 24}}, // the golden tiling
		{6, 5, Tiling{32, 24, 20, 16}}, // strides not a multiple of 8
		{5, 9, Tiling{24, 40, 16, 16}}, // rectangular tiles
		{4, 4, Tiling{16, 16, 16, 16}}, // no overlap: no blending
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%dx%d_%v", tt.inH, tt.inW, tt.tiling), func(t *testing.T) {
			tl := tt.tiling
			g := tileGrid{
				inH: tt.inH, inW: tt.inW,
				tileH: tl.MinHeight / scale, tileW: tl.MinWidth / scale,
				strideH: tl.StrideHeight / scale, strideW: tl.StrideWidth / scale,
				blendH: tl.MinHeight - tl.StrideHeight, blendW: tl.MinWidth - tl.StrideWidth,
				cropH: tl.StrideHeight, cropW: tl.StrideWidth,
			}
			outH, outW := scale*tt.inH, scale*tt.inW
			want := referenceTiles(g, scale, c, frames, outH, outW)

			r := newRig(t, nil, nil)
			ops := r.ex.Ops("none")
			out := ops.Empty(dtype.F32, 1, c, frames, outH, outW)
			calls := 0
			err := g.assemble(ops, out, func(y0, x0, h, w int) (*tensor.Tensor, error) {
				calls++
				return ops.Upload(fakeTile(c, frames, scale*h, scale*w, y0, x0), 1, c, frames, scale*h, scale*w), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := ops.Download(out)
			out.Free()
			if calls != g.count() {
				t.Errorf("%d tiles computed, want %d", calls, g.count())
			}
			if !slices.Equal(got, want) {
				t.Errorf("assembled tiles differ from the reference (max diff %g)", maxDiff(got, want))
			}
			if a := r.dev.Stats().Allocated; a != 0 {
				t.Errorf("assembly left %d bytes allocated", a)
			}
		})
	}
}

// TestTiledEncodeOtherTemporalScales: diffusers chunks the video by four
// frames whatever temperal_downsample says, so a VAE that halves time
// once (or never) makes two (or four) latent frames a chunk. The tiled
// encode makes as many as the untiled one (EncodedFrames), and one tile
// over the whole video is the untiled encode exactly.
func TestTiledEncodeOtherTemporalScales(t *testing.T) {
	for _, down := range [][]bool{{false, false, true}, {false, false, false}, {false, true, true}} {
		t.Run(fmt.Sprint(down), func(t *testing.T) {
			cfg := loadGolden(t).cfg
			cfg.TemperalDownsample = down
			r := newRig(t, nil, nil)
			m := r.model(t, cfg, synthesize(cfg, 3))
			const f, h, w = 9, 32, 48
			video := make([]float32, 3*f*h*w)
			for i := range video {
				video[i] = float32(math.Sin(float64(i) * 0.37))
			}
			shape := []int{1, 3, f, h, w}
			mean, _, _, got := r.encode(t, m, video, shape)
			if got[2] != cfg.EncodedFrames(f) {
				t.Fatalf("untiled encode made %d latent frames, EncodedFrames says %d", got[2], cfg.EncodedFrames(f))
			}
			for _, tl := range []Tiling{{h, w, h, w}, {16, 24, 8, 16}} {
				ops := r.ex.Ops("vae")
				x := ops.Upload(video, shape...)
				mt, lt, err := m.EncodeTiled(r.ex, ops, x, tl)
				x.Free()
				if err != nil {
					t.Fatalf("tiling %v: %v", tl, err)
				}
				tiled := ops.Download(mt)
				tensor.Free(mt, lt)
				if mt.Dim(2) != got[2] {
					t.Errorf("tiling %v: %d latent frames, untiled %d", tl, mt.Dim(2), got[2])
				}
				if tl.MinHeight == h && !slices.Equal(tiled, mean) {
					t.Errorf("one tile over the whole video differs from the untiled encode (max diff %g)", maxDiff(tiled, mean))
				}
			}
		})
	}
}
