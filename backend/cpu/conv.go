package cpu

import (
	"fmt"
	"sync"

	"ferry/backend/cpu/gemm"
	"ferry/tensor"
)

// Convolution is im2col in tiles plus GEMM (or, on the packed path, the
// patches gathered straight into the GEMM's panels: conv_panels.go). For
// one image, the output [O, P] (P output positions) is W[O, K] · col[K, P]
// where K = C·kernel volume and col's column p holds the input patch under
// output position p. col is never built whole: a work item is a tile of
// consecutive output positions, for which a worker builds col a chunk of K
// rows at a time and multiplies each chunk into the tile's columns of the
// output (ldc = P, accumulating). Chunking K rather than shrinking the tile
// keeps the GEMM wide (n = tile) for the 384-channel 3×3×3 convolutions,
// where K is 10368; scratch stays at convScratchBytes per worker whatever
// the sizes. A
// 1×1(×1) kernel with stride 1 and no padding needs no col at all: the input
// already is [C, P].
//
// These are variables only so that tests can shrink them to exercise the
// tiling on small problems.
var (
	convScratchBytes = 2 << 20
	convTile         = 512 // output positions per work item
	convMinTile      = 16
)

// convProblem is a 2-d convolution as a 3-d one with a time extent of 1.
type convProblem struct {
	x, w, bias, out []float32
	n, c, o         int
	in, ker, outDim [3]int // T, H, W of input, kernel, output
	stride, pad     [3]int
	k, pos          int // rows of col (C·kernel volume), output positions per image
	tile            int // output positions per work item
	kChunk          int // rows of col built and multiplied at a time
	pointwise       bool
}

// Scratch pools: col tiles per worker, packed weights per call (separate,
// so that neither hands the other a buffer of the wrong size).
var convScratchPool, convWeightPool sync.Pool

// Conv sets dst = conv(x, w) + bias with symmetric zero padding, for x
// [N, C, (T,) H, W] and w [O, C, (kt,) kh, kw].
func (be *Backend) Conv(dst, x, w, bias *tensor.Tensor, stride, pad []int) error {
	p, err := planConv(dst, x, w, bias, stride, pad)
	if err != nil || len(p.out) == 0 {
		return err
	}
	p.chooseTiles(be.pool.Workers())
	if pk, ok := be.tiles.(gemm.Packer); ok && p.k > 0 {
		return be.convPacked(&p, pk)
	}
	tiles := (p.pos + p.tile - 1) / p.tile
	be.pool.For(p.n*tiles, 1, func(lo, hi int) {
		var col *[]float32
		if !p.pointwise {
			col = getConvScratch(p.kChunk * p.tile)
			defer convScratchPool.Put(col)
		}
		for it := lo; it < hi; it++ {
			img, p0 := it/tiles, it%tiles*p.tile
			be.convTile(&p, col, img, p0, min(p.tile, p.pos-p0))
		}
	})
	return nil
}

// convPacked computes the convolution transposed, out[P, O] = col[K, P]ᵀ ·
// W[O, K]ᵀ per tile, so that the weights are the GEMM's B operand, packed
// once per call, rather than an A operand repacked for every tile. Where
// the GEMM lets its caller fill A (gemm.TilePacker) and the stride along
// the width is 1, each tile's patches are gathered straight into A panels
// (gatheredTile); otherwise col is built a K chunk at a time (one packed
// operand per chunk) and copied into panels (packedTile). A tile's
// [positions, O] result is stored transposed into the [O, P] output with
// the bias.
func (be *Backend) convPacked(p *convProblem, pk gemm.Packer) error {
	tp, _ := pk.(gemm.TilePacker)
	if tp != nil && !p.gathers(tp.RowPanel()) {
		tp = nil
	}
	if tp != nil {
		p.kChunk = p.k // no col to bound: one packed operand
	}
	chunks := (p.k + p.kChunk - 1) / p.kChunk
	per := pk.PackedLen(p.o, p.kChunk)
	wbuf := getScratch(&convWeightPool, chunks*per)
	defer convWeightPool.Put(wbuf)
	packs := make([]*gemm.Packed, chunks)
	var perr error
	be.pool.For(chunks, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			r0 := c * p.kChunk
			pw, err := pk.PackB((*wbuf)[c*per:(c+1)*per], true, p.o, min(p.kChunk, p.k-r0), p.w[r0:], p.k)
			if err != nil {
				perr = err // only on inconsistent sizes, the same for every chunk
			}
			packs[c] = pw
		}
	})
	if perr != nil {
		return fmt.Errorf("cpu: conv: pack weights: %w", perr)
	}
	tiles := (p.pos + p.tile - 1) / p.tile
	if tp != nil {
		be.pool.For(p.n*tiles, 1, func(lo, hi int) {
			res := getConvScratch(p.tile * p.o)
			defer convScratchPool.Put(res)
			tt := tileTapsPool.Get().(*tileTaps)
			defer tileTapsPool.Put(tt)
			for it := lo; it < hi; it++ {
				img, p0 := it/tiles, it%tiles*p.tile
				np := min(p.tile, p.pos-p0)
				tt.describe(p, p0, np, tp.RowPanel())
				p.gatheredTile(tp, packs[0], *res, tt, img, p0, np)
			}
		})
		return nil
	}
	be.pool.For(p.n*tiles, 1, func(lo, hi int) {
		col := getConvScratch(p.kChunk*p.tile + p.tile*p.o)
		defer convScratchPool.Put(col)
		for it := lo; it < hi; it++ {
			img, p0 := it/tiles, it%tiles*p.tile
			p.packedTile(pk, packs, *col, img, p0, min(p.tile, p.pos-p0))
		}
	})
	return nil
}

// gatheredTile is packedTile with the input patches gathered straight into
// the GEMM's row panels (conv_panels.go), one cache block at a time as the
// GEMM asks for them: no col, and no copy of it into panels.
func (p *convProblem) gatheredTile(tp gemm.TilePacker, pw *gemm.Packed, res []float32, tt *tileTaps, img, p0, np int) {
	mr := tp.RowPanel()
	res = res[:np*p.o]
	// The pack was made for this problem's sizes: no error.
	_ = tp.SgemmFilledA(np, p.k, 1, func(dst []float32, i0, rows, r0, steps int) {
		p.gatherA(dst, tt, img, i0, rows, r0, steps, mr)
	}, pw, 0, res, p.o)
	p.storeTile(res, img, p0, np)
}

// packedTile computes output positions [p0, p0+np) of image img from the
// packed weight chunks; scratch holds a col chunk and the [np, O] result.
func (p *convProblem) packedTile(pk gemm.Packer, packs []*gemm.Packed, scratch []float32, img, p0, np int) {
	res := scratch[p.kChunk*p.tile:][:np*p.o]
	for c, pw := range packs {
		r0 := c * p.kChunk
		rows := pw.K()
		beta := float32(1)
		if c == 0 {
			beta = 0
		}
		// A = colᵀ: col [rows, np] stored row-major is A transposed.
		a, lda := scratch[:rows*np], np
		if p.pointwise {
			a, lda = p.x[img*p.c*p.pos+r0*p.pos+p0:], p.pos
		} else {
			p.im2col(a, img, p0, np, r0)
		}
		// Sizes come from the plan the packs were made for: no error.
		_ = pk.SgemmPacked(true, np, 1, a, lda, pw, beta, res, p.o)
	}
	p.storeTile(res, img, p0, np)
}

// storeTile writes a tile's [np, O] result transposed into the [O, P]
// output of image img at position p0, adding the bias.
func (p *convProblem) storeTile(res []float32, img, p0, np int) {
	out := p.out[img*p.o*p.pos+p0:]
	for oc := range p.o {
		row := out[oc*p.pos : oc*p.pos+np]
		v := float32(0)
		if p.bias != nil {
			v = p.bias[oc]
		}
		for i := range row {
			row[i] = res[i*p.o+oc] + v
		}
	}
}

func getConvScratch(n int) *[]float32 { return getScratch(&convScratchPool, n) }

// getScratch returns a buffer of at least n floats from pool.
func getScratch(pool *sync.Pool, n int) *[]float32 {
	s, _ := pool.Get().(*[]float32)
	if s == nil || cap(*s) < n {
		b := make([]float32, n)
		return &b
	}
	return s
}

func planConv(dst, x, w, bias *tensor.Tensor, stride, pad []int) (convProblem, error) {
	var p convProblem
	var err error
	if p.out, err = f32("dst", dst); err != nil {
		return p, err
	}
	if p.x, err = f32("input", x); err != nil {
		return p, err
	}
	if p.w, err = f32("weight", w); err != nil {
		return p, err
	}
	if p.bias, err = optF32("bias", bias); err != nil {
		return p, err
	}
	sd := x.Rank() - 2
	if sd < 2 || sd > 3 || w.Rank() != x.Rank() || w.Dim(1) != x.Dim(1) || len(stride) != sd || len(pad) != sd {
		return p, fmt.Errorf("cpu: conv input %v, weight %v, stride %v, pad %v do not match", x, w, stride, pad)
	}
	p.n, p.c, p.o = x.Dim(0), x.Dim(1), w.Dim(0)
	if p.bias != nil && len(p.bias) != p.o {
		return p, fmt.Errorf("cpu: conv bias %v does not match weight %v", bias, w)
	}
	want := []int{p.n, p.o}
	for i := range 3 {
		p.in[i], p.ker[i], p.outDim[i], p.stride[i] = 1, 1, 1, 1
	}
	for i := range sd {
		j := i + 3 - sd
		p.in[j], p.ker[j], p.stride[j], p.pad[j] = x.Dim(2+i), w.Dim(2+i), stride[i], pad[i]
		if stride[i] <= 0 || pad[i] < 0 {
			return p, fmt.Errorf("cpu: conv stride %v, pad %v", stride, pad)
		}
		p.outDim[j] = (p.in[j]+2*pad[i]-p.ker[j])/stride[i] + 1
		if p.in[j]+2*pad[i] < p.ker[j] {
			return p, fmt.Errorf("cpu: conv kernel %v larger than padded input %v", w, x)
		}
		want = append(want, p.outDim[j])
	}
	if !tensor.SameShape(dst.Shape(), want) {
		return p, fmt.Errorf("cpu: conv dst %v, want %v", dst, want)
	}
	p.k = p.c * p.ker[0] * p.ker[1] * p.ker[2]
	p.pos = p.outDim[0] * p.outDim[1] * p.outDim[2]
	p.pointwise = p.k == p.c && p.stride == [3]int{1, 1, 1} && p.pad == [3]int{}
	return p, nil
}

// chooseTiles sets the tile (at most convTile positions, smaller when that
// leaves too few work items to keep every worker busy) and the K chunk that
// fits the scratch budget.
func (p *convProblem) chooseTiles(workers int) {
	p.tile = min(p.pos, convTile)
	if items := p.n * ((p.pos + p.tile - 1) / p.tile); items < 2*workers {
		per := (2*workers + p.n - 1) / p.n // tiles wanted per image
		p.tile = min(p.pos, max(convMinTile, ((p.pos+per-1)/per+convMinTile-1)/convMinTile*convMinTile))
	}
	p.tile = max(p.tile, 1)
	p.kChunk = min(p.k, max(1, convScratchBytes/4/p.tile))
}

// convTile computes output positions [p0, p0+np) of image img for every
// output channel.
func (be *Backend) convTile(p *convProblem, col *[]float32, img, p0, np int) {
	out := p.out[img*p.o*p.pos+p0:]
	for oc := range p.o {
		row := out[oc*p.pos : oc*p.pos+np]
		v := float32(0)
		if p.bias != nil {
			v = p.bias[oc]
		}
		for i := range row {
			row[i] = v
		}
	}
	if p.k == 0 {
		return
	}
	if p.pointwise {
		be.tiles.Sgemm(false, false, p.o, np, p.k, 1, p.w, p.k, p.x[img*p.c*p.pos+p0:], p.pos, 1, out, p.pos)
		return
	}
	for r0 := 0; r0 < p.k; r0 += p.kChunk {
		rows := min(p.kChunk, p.k-r0)
		b := (*col)[:rows*np]
		p.im2col(b, img, p0, np, r0)
		be.tiles.Sgemm(false, false, p.o, np, rows, 1, p.w[r0:], p.k, b, np, 1, out, p.pos)
	}
}

// im2col fills col [rows, np] with rows r0... of the input patches of
// output positions [p0, p0+np) of image img; taps that fall in the padding
// are zero.
func (p *convProblem) im2col(col []float32, img, p0, np, r0 int) {
	plane := p.in[0] * p.in[1] * p.in[2]
	kvol := p.ker[0] * p.ker[1] * p.ker[2]
	x := p.x[img*p.c*plane : (img+1)*p.c*plane]
	for i := range len(col) / np {
		r := r0 + i
		ch, tap := r/kvol, r%kvol
		dt, dh, dw := tap/(p.ker[1]*p.ker[2]), tap/p.ker[2]%p.ker[1], tap%p.ker[2]
		p.im2colRow(col[i*np:(i+1)*np], x[ch*plane:(ch+1)*plane], p0, dt, dh, dw)
	}
}

// im2colRow fills one row of col (one channel and kernel tap) by walking
// the tile's output rows: each is a run of output columns reading one input
// row at a stride.
func (p *convProblem) im2colRow(row, x []float32, p0, dt, dh, dw int) {
	ow := p0 % p.outDim[2]
	oh := p0 / p.outDim[2] % p.outDim[1]
	ot := p0 / p.outDim[2] / p.outDim[1]
	for j := 0; j < len(row); {
		seg := row[j:min(j+p.outDim[2]-ow, len(row))]
		it := ot*p.stride[0] + dt - p.pad[0]
		ih := oh*p.stride[1] + dh - p.pad[1]
		if it < 0 || it >= p.in[0] || ih < 0 || ih >= p.in[1] {
			clear(seg)
		} else {
			src := x[(it*p.in[1]+ih)*p.in[2] : (it*p.in[1]+ih+1)*p.in[2]]
			gatherRow(seg, src, ow*p.stride[2]+dw-p.pad[2], p.stride[2])
		}
		j += len(seg)
		ow = 0
		if oh++; oh == p.outDim[1] {
			oh, ot = 0, ot+1
		}
	}
}

// gatherRow sets seg[q] = src[start + q·step], zero where that index falls
// outside src.
func gatherRow(seg, src []float32, start, step int) {
	if step == 1 {
		lo := min(max(-start, 0), len(seg))
		hi := max(min(len(src)-start, len(seg)), lo)
		clear(seg[:lo])
		if hi > lo {
			copy(seg[lo:hi], src[start+lo:start+hi])
		}
		clear(seg[hi:])
		return
	}
	for q := range seg {
		if i := start + q*step; i >= 0 && i < len(src) {
			seg[q] = src[i]
		} else {
			seg[q] = 0
		}
	}
}
