package planner

import (
	"fmt"

	"ferry/residency"
)

// The VAE decode follows model/wanvae (decode.go, layers.go, tile.go)
// allocation by allocation: the decoder runs one latent frame at a time
// (a "chunk"), every causal 3×3×3 conv keeping the last two frames of its
// input in a cache slot; norms run over the channels in the activation's
// own layout (only the mid block's attention works on a channels-last
// copy); the first chunk's single-frame convs apply only the kernel's last
// tap (a copy of that weight slice is allocated). Tiled decodes
// (diffusers' tiled_decode) decode each tile into a video of its own and
// blend and crop it into the row being assembled.

// vt is a live activation [B, c, t, h, w] in the VAE script.
type vt struct {
	id         int
	c, t, h, w int
}

// vslot is one feat_cache entry.
type vslot struct {
	frames   *vt
	set, rep bool
}

// vaeRec records one chunk's events, call by call.
type vaeRec struct {
	r     *recorder
	b     int
	panel int // output channels the convolutions compute at once
	slots []*vslot
	idx   int
	first bool // recording the first chunk
	// unpatch: the decoder's frames are unpatched chunk by chunk (an
	// untiled decode; a tiled one unpatches assembled rows).
	unpatch bool
	blk     map[string]int
	pre     []event // events before the chunk's first Run
	calls   []call
	cur     *call
}

func (v *vaeRec) alloc(c, t, h, w int) *vt {
	return &vt{id: v.r.alloc(f32(v.b, c, t, h, w)), c: c, t: t, h: h, w: w}
}

func (v *vaeRec) allocBytes(n int64) *vt { return &vt{id: v.r.alloc(n)} }

func (v *vaeRec) free(xs ...*vt) {
	for _, x := range xs {
		if x != nil {
			v.r.free(x.id)
		}
	}
}

func (v *vaeRec) next() *vslot {
	if v.idx == len(v.slots) {
		v.slots = append(v.slots, &vslot{})
	}
	s := v.slots[v.idx]
	v.idx++
	return s
}

// step starts the executor call of block name.
func (v *vaeRec) step(name string) {
	v.flush()
	v.calls = append(v.calls, call{block: v.blk[VAE+"."+name]})
	v.cur = &v.calls[len(v.calls)-1]
}

// flush moves the recorded events into the current call (before the
// first call: into the chunk's pre events).
func (v *vaeRec) flush() {
	if v.cur == nil {
		v.pre = append(v.pre, v.r.take()...)
		return
	}
	v.cur.ev = append(v.cur.ev, v.r.take()...)
}

func (v *vaeRec) addWork(w work) {
	if v.cur != nil {
		v.cur.work = v.cur.work.add(w)
	}
}

func (v *vaeRec) elementwise(x *vt, passes float64) {
	v.addWork(work{mem: passes * float64(f32(v.b, x.c, x.t, x.h, x.w))})
}

// normSiLU: RMSNorm over the channels, then SiLU in place (x read, y
// written, then read and written again).
func (v *vaeRec) normSiLU(x *vt) *vt {
	y := v.alloc(x.c, x.t, x.h, x.w)
	v.elementwise(x, 4)
	return y
}

func (v *vaeRec) lastFrames(x *vt, n int) *vt {
	return v.alloc(x.c, min(n, x.t), x.h, x.w)
}

// conv records a convolution's output and flops.
func (v *vaeRec) conv(in *vt, cout, kt, kh, pad int) *vt {
	t, h, w := in.t-kt+1, in.h+2*pad-kh+1, in.w+2*pad-kh+1
	y := v.alloc(cout, t, h, w)
	var wk work
	// The flops of whole panels of output channels: the GEMM computes
	// them whether or not every channel of the last panel exists.
	padded := roundUp(cout, v.panel)
	wk.conv = convFlops(2*float64(v.b*t*h*w)*float64(padded*in.c*kt*kh*kh), in.c*kt*kh*kh)
	v.addWork(wk)
	return y
}

// convFrames is WanCausalConv3d's forward; it consumes x.
func (v *vaeRec) convFrames(x, prev *vt, cout, kt, kh, padT, padHW int) *vt {
	front := 2 * padT
	if prev == nil && x.t == 1 && front == kt-1 {
		// convLastTap: the weight's last temporal tap, copied.
		tap := v.allocBytes(f32(cout, x.c, 1, kh, kh))
		y := v.conv(x, cout, 1, kh, padHW)
		v.free(tap, x)
		return y
	}
	in := x
	if prev != nil && front > 0 {
		in = v.alloc(x.c, prev.t+x.t, x.h, x.w)
		front -= prev.t
	}
	if front > 0 {
		padded := v.alloc(in.c, in.t+front, in.h, in.w)
		v.free(in)
		in = padded
	}
	if in != x {
		v.free(x)
	}
	y := v.conv(in, cout, kt, kh, padHW)
	v.free(in)
	return y
}

func (v *vaeRec) keepFrames(x, prev *vt, zeroFront bool) *vt {
	keep := v.lastFrames(x, 2)
	if keep.t >= 2 || (prev == nil && !zeroFront) {
		return keep
	}
	var front *vt
	if zeroFront {
		front = v.alloc(x.c, 1, x.h, x.w)
	} else {
		front = v.lastFrames(prev, 1)
	}
	both := v.alloc(x.c, 1+keep.t, x.h, x.w)
	v.free(front, keep)
	return both
}

func (v *vaeRec) causalConv(x *vt, cout int) *vt {
	s := v.next()
	keep := v.keepFrames(x, s.frames, false)
	y := v.convFrames(x, s.frames, cout, 3, 3, 1, 1)
	v.free(s.frames)
	s.frames, s.set = keep, true
	return y
}

func (v *vaeRec) resCore(x *vt, cout int) *vt {
	a := v.causalConv(v.normSiLU(x), cout)
	b := v.normSiLU(a)
	v.free(a)
	return v.causalConv(b, cout)
}

func (v *vaeRec) resBlock(x *vt, cout int) *vt {
	y := v.resCore(x, cout)
	if x.c != cout {
		h := v.conv(x, cout, 1, 1, 0)
		v.free(x, h)
	} else {
		v.free(x)
	}
	v.elementwise(y, 3)
	return y
}

func (v *vaeRec) attention(x *vt) *vt {
	xl := v.alloc(x.c, x.t, x.h, x.w)
	n := v.alloc(x.c, x.t, x.h, x.w)
	v.free(xl)
	qkv := v.alloc(3*x.c, x.t, x.h, x.w)
	v.free(n)
	q, k, val := v.alloc(x.c, x.t, x.h, x.w), v.alloc(x.c, x.t, x.h, x.w), v.alloc(x.c, x.t, x.h, x.w)
	v.free(qkv)
	o := v.alloc(x.c, x.t, x.h, x.w)
	v.free(q, k, val)
	y := v.alloc(x.c, x.t, x.h, x.w)
	v.free(o)
	out := v.alloc(x.c, x.t, x.h, x.w)
	v.free(y, x)
	tok := float64(x.h * x.w)
	v.addWork(work{
		gemm: 2 * float64(v.b*x.t) * tok * float64(4*x.c*x.c),
		attn: attnFlops(4*float64(v.b*x.t)*tok*tok*float64(x.c), x.c), // one head
		mem:  12 * float64(f32(v.b, x.c, x.t, x.h, x.w)),
	})
	return out
}

func (v *vaeRec) timeUpsample(x *vt) *vt {
	s := v.next()
	if !s.set {
		s.set, s.rep = true, true
		return x
	}
	keep := v.keepFrames(x, s.frames, s.rep)
	prev := s.frames
	if s.rep {
		prev = nil
	}
	y := v.convFrames(x, prev, 2*x.c, 3, 1, 1, 0)
	v.free(s.frames)
	s.frames, s.rep = keep, false
	out := v.alloc(x.c, 2*y.t, y.h, y.w)
	v.free(y)
	v.elementwise(out, 2)
	return out
}

// upsample is the decoder's Resample; Wan 2.1 halves the channels, Wan
// 2.2 (keep) keeps them.
func (v *vaeRec) upsample(x *vt, temporal, keep bool) *vt {
	if temporal {
		x = v.timeUpsample(x)
	}
	u := v.alloc(x.c, x.t, 2*x.h, 2*x.w)
	v.free(x)
	cout := x.c / 2
	if keep {
		cout = x.c
	}
	y := v.conv(u, cout, 1, 3, 1)
	v.free(u)
	v.elementwise(u, 2)
	return y
}

// dupUp is model/wanvae's DupUp3D of the level's input s to out channels,
// 2×2 positions and on temporal levels 2 frames: the channels repeated
// (a joined copy), unfolded by a permuted copy, and on the first chunk
// of a temporal level narrowed past the frame the upsampler drops.
func (v *vaeRec) dupUp(s *vt, out int, temporal bool) *vt {
	ft := 1
	if temporal {
		ft = 2
	}
	rep := v.alloc(out*ft*4, s.t, s.h, s.w)
	h := v.alloc(out, s.t*ft, 2*s.h, 2*s.w)
	v.free(rep)
	if v.first && ft > 1 {
		rest := v.alloc(out, s.t*ft-(ft-1), 2*s.h, 2*s.w)
		v.free(h)
		h = rest
	}
	return h
}

// decodeFrame records one chunk: latent frame [z, 1, h, w] in, frames of
// the tile's video out (returned, to be copied and freed by the caller).
func (v *vaeRec) decodeFrame(c VAEConfig, h, w int) *vt {
	v.idx = 0
	levels := len(c.DimMult)
	base := c.decoderBase()
	dims := []int{base * c.DimMult[levels-1]}
	for i := levels - 1; i >= 0; i-- {
		dims = append(dims, base*c.DimMult[i])
	}
	x := v.alloc(c.ZDim, 1, h, w) // the narrowed latent frame
	v.step("decoder.in")
	y := v.conv(x, c.ZDim, 1, 1, 0)
	v.free(x)
	x = v.causalConv(y, dims[0])
	v.step("decoder.mid")
	x = v.resBlock(x, dims[0])
	x = v.attention(x)
	x = v.resBlock(x, dims[0])
	for i := 0; i < levels; i++ {
		out := dims[i+1]
		var short *vt // Wan 2.2: the level's input, for its DupUp3D shortcut
		for j := 0; j <= c.NumResBlocks; j++ {
			v.step(fmt.Sprintf("decoder.up.%d.res.%d", i, j))
			if j == 0 && c.IsResidual && i < levels-1 {
				short = v.alloc(x.c, x.t, x.h, x.w)
				v.elementwise(x, 2)
			}
			x = v.resBlock(x, out)
		}
		if i < levels-1 {
			v.step(fmt.Sprintf("decoder.up.%d.upsample", i))
			temporal := c.TemperalDownsample[len(c.TemperalDownsample)-1-i]
			x = v.upsample(x, temporal, c.IsResidual)
			if short != nil {
				h := v.dupUp(short, out, temporal)
				v.free(short)
				v.elementwise(h, 3)
				v.free(h)
			}
		}
	}
	v.step("decoder.out")
	a := v.normSiLU(x)
	v.free(x)
	// Wan 2.2 folds patch×patch pixels into the output channels, and
	// unpatchifies them into a permuted copy.
	p := c.patch()
	x = v.causalConv(a, 3*p*p)
	if p > 1 && v.unpatch {
		y := v.alloc(3, x.t, x.h*p, x.w*p)
		v.free(x)
		x = y
	}
	v.flush()
	return x
}

// vaeTile is the script of one tile's (or the whole latent's) decode,
// made chunk by chunk (next) so that the simulation can stop recording
// once the chunks reach their steady state.
type vaeTile struct {
	v    *vaeRec
	p    *Profile
	h, w int
	done int // chunks recorded
}

// vaeChunks starts the decode script of a latent tile [z, frames, h, w]:
// its cache slots live from the first chunk to the last, which frees them.
func vaeChunks(p *Profile, b, h, w, panel int, id *ids) *vaeTile {
	return &vaeTile{v: newVAERec(p, b, panel, id), p: p, h: h, w: w}
}

// newVAERec starts recording the VAE's chunks of batch b on p's VAE
// blocks (panel: the convolutions' output channels at once).
func newVAERec(p *Profile, b, panel int, id *ids) *vaeRec {
	v := &vaeRec{r: &recorder{ids: id}, b: b, panel: max(panel, 1), blk: map[string]int{}}
	for i, bl := range p.Component(VAE).Blocks {
		v.blk[bl.Name] = i
	}
	return v
}

// next records the next chunk's pass; the last one frees the cache slots.
func (t *vaeTile) next(last bool) pass {
	v := t.v
	v.calls, v.cur, v.pre = nil, nil, nil
	v.first = t.done == 0
	t.done++
	out := v.decodeFrame(t.p.Coder, t.h, t.w)
	ps := pass{pre: v.pre, calls: v.calls}
	v.free(out) // copied into the tile's video
	if last {
		for _, s := range v.slots {
			v.free(s.frames)
		}
	}
	ps.post = v.r.take()
	return ps
}

// vaeTileSpec is one tile of a tiled decode, in latent units.
type vaeTileSpec struct {
	row, col int
	y0, x0   int
	h, w     int
}

// vaeGrid is tiled_decode's geometry: tiles in latent units, blend and
// crop extents in pixels; one whole-latent tile when not tiling.
type vaeGrid struct {
	tiled       bool
	tiles       []vaeTileSpec
	blend, crop int
	latH, latW  int
}

func newVAEGrid(req Request, run residency.RunOptions, c VAEConfig) vaeGrid {
	s := c.SpatialScale()
	lh, lw := req.Height/s, req.Width/s
	g := vaeGrid{latH: lh, latW: lw}
	tile, stride := run.VAETile, run.VAEStride
	if stride <= 0 {
		stride = tile * 3 / 4 // wanvae.SquareTiling's default
	}
	if tile <= 0 || (lh <= tile/s && lw <= tile/s) || stride/s <= 0 {
		g.tiles = []vaeTileSpec{{h: lh, w: lw}}
		return g
	}
	g.tiled, g.blend, g.crop = true, tile-stride, stride
	ts, ls := tile/s, stride/s
	for r, y0 := 0, 0; y0 < lh; r, y0 = r+1, y0+ls {
		for col, x0 := 0, 0; x0 < lw; col, x0 = col+1, x0+ls {
			g.tiles = append(g.tiles, vaeTileSpec{row: r, col: col, y0: y0, x0: x0, h: min(ts, lh-y0), w: min(ts, lw-x0)})
		}
	}
	return g
}
