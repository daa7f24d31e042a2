package cpu

import (
	"fmt"
	"unsafe"

	"ferry/tensor"
)

// permutePlan is a permutation reduced to its essentials: the output's
// dimensions (outermost first) with the input stride of each, after size-1
// dimensions are dropped and dimensions that stay adjacent are merged. The
// 4-d [B, L, H, D] -> [B, H, L, D] swap becomes four dims whose last has
// input stride 1 (rows of D copied whole); a 2-d transpose becomes two dims
// with input strides [1, rows] (a blocked transpose).
type permutePlan struct {
	dims []int // output dims, merged
	in   []int // input element stride of each
}

func planPermute(dst, a *tensor.Tensor, perm []int) (permutePlan, error) {
	r := a.Rank()
	if len(perm) != r || dst.Rank() != r {
		return permutePlan{}, fmt.Errorf("cpu: permute %v of %v into %v", perm, a, dst)
	}
	seen := make([]bool, r)
	as := strides(a.Shape())
	var p permutePlan
	for i, ax := range perm {
		if ax < 0 || ax >= r || seen[ax] {
			return permutePlan{}, fmt.Errorf("cpu: %v is not a permutation", perm)
		}
		seen[ax] = true
		n := a.Dim(ax)
		if dst.Dim(i) != n {
			return permutePlan{}, fmt.Errorf("cpu: permute %v of %v does not give %v", perm, a, dst)
		}
		if n == 1 {
			continue
		}
		if last := len(p.dims) - 1; last >= 0 && p.in[last] == as[ax]*n {
			p.dims[last] *= n
			p.in[last] = as[ax]
			continue
		}
		p.dims = append(p.dims, n)
		p.in = append(p.in, as[ax])
	}
	return p, nil
}

// Permute sets dst = a with axes reordered: dst.shape[i] = a.shape[perm[i]].
func (be *Backend) Permute(dst, a *tensor.Tensor, perm []int) error {
	d, x, es, err := layoutArgs(dst, a)
	if err != nil {
		return err
	}
	p, err := planPermute(dst, a, perm)
	if err != nil || len(d) == 0 {
		return err
	}
	n := len(p.dims)
	if n <= 1 { // nothing moves
		be.copyBytes(d, x)
		return nil
	}
	if p.in[n-1] == 1 {
		be.permuteRuns(d, x, es, p)
		return nil
	}
	switch es {
	case 1:
		permuteTranspose(be, elems[uint8](d), elems[uint8](x), p)
	case 2:
		permuteTranspose(be, elems[uint16](d), elems[uint16](x), p)
	case 4:
		permuteTranspose(be, elems[uint32](d), elems[uint32](x), p)
	default:
		permuteTranspose(be, elems[uint64](d), elems[uint64](x), p)
	}
	return nil
}

// permuteRuns handles permutations that keep the innermost dim in place:
// every output row of the last dim is one contiguous input run.
func (be *Backend) permuteRuns(d, x []byte, es int, p permutePlan) {
	n := len(p.dims)
	run := p.dims[n-1] * es
	rows := len(d) / run
	outer := p.dims[:n-1]
	be.pool.For(rows, max(1, (1<<18)/run), func(lo, hi int) {
		idx := make([]int, n-1)
		unravel(lo, outer, idx)
		src := 0
		for k, c := range idx {
			src += c * p.in[k]
		}
		for row := lo; row < hi; row++ {
			s := src * es
			copy(d[row*run:(row+1)*run], x[s:s+run])
			for k := n - 2; k >= 0; k-- { // advance the odometer
				idx[k]++
				src += p.in[k]
				if idx[k] < outer[k] {
					break
				}
				src -= idx[k] * p.in[k]
				idx[k] = 0
			}
		}
	})
}

// transposeBlock is the side of the square tiles a transpose moves at a
// time: 32×32 elements of up to 8 bytes stay within L1 on both sides.
const transposeBlock = 32

// permuteTranspose handles permutations that move the innermost input dim:
// the dim with input stride 1 (call it the column dim, at output position
// t) and the output's last dim swap roles, and the pair is moved in square
// tiles so that both reads and writes stay in cache. Work items are
// (position in the other dims, tile row of the column dim).
func permuteTranspose[T any](be *Backend, d, x []T, p permutePlan) {
	n := len(p.dims)
	t := 0
	for k := range p.in {
		if p.in[k] == 1 {
			t = k
		}
	}
	os := strides(p.dims)
	cols, colOut := p.dims[t], os[t] // input-contiguous dim: its output stride
	rows, rowIn := p.dims[n-1], p.in[n-1]
	var other, otherIn, otherOut []int
	for k := 0; k < n-1; k++ {
		if k != t {
			other = append(other, p.dims[k])
			otherIn = append(otherIn, p.in[k])
			otherOut = append(otherOut, os[k])
		}
	}
	tiles := (cols + transposeBlock - 1) / transposeBlock
	items := tensor.NumElems(other) * tiles
	be.pool.For(items, max(1, grainStream/(transposeBlock*rows)), func(lo, hi int) {
		idx := make([]int, len(other))
		for it := lo; it < hi; it++ {
			unravel(it/tiles, other, idx)
			bi, bo := 0, 0
			for k, c := range idx {
				bi += c * otherIn[k]
				bo += c * otherOut[k]
			}
			c0 := it % tiles * transposeBlock
			c1 := min(c0+transposeBlock, cols)
			for r0 := 0; r0 < rows; r0 += transposeBlock {
				r1 := min(r0+transposeBlock, rows)
				transposeTile(d, x, bo, colOut, bi, rowIn, c0, c1, r0, r1)
			}
		}
	})
}

// transposeTile sets d[bo + c·colOut + r] = x[bi + c + r·rowIn] for c in
// [c0, c1), r in [r0, r1).
func transposeTile[T any](d, x []T, bo, colOut, bi, rowIn, c0, c1, r0, r1 int) {
	if d32, ok := any(d).([]uint32); ok && (c1-c0)%4 == 0 && (r1-r0)%4 == 0 {
		x32 := any(x).([]uint32)
		// Bounds of the whole tile, checked once for the unchecked loop.
		_ = d32[bo+(c1-1)*colOut+r1-1]
		_ = x32[bi+c1-1+(r1-1)*rowIn]
		transposeTile32(d32, x32, bo, colOut, bi, rowIn, c0, c1, r0, r1)
		return
	}
	for c := c0; c < c1; c++ {
		out := d[bo+c*colOut : bo+c*colOut+r1]
		in := bi + c
		for r := r0; r < r1; r++ {
			out[r] = x[in+r*rowIn]
		}
	}
}

// transposeTile32 moves 4×4 micro-tiles: four contiguous reads from each
// of four input rows, four contiguous writes to each of four output rows.
// The caller has checked the tile's bounds.
func transposeTile32(d, x []uint32, bo, colOut, bi, rowIn, c0, c1, r0, r1 int) {
	pd, px := unsafe.Pointer(&d[0]), unsafe.Pointer(&x[0])
	at := func(p unsafe.Pointer, i int) *uint32 { return (*uint32)(unsafe.Add(p, 4*i)) }
	for c := c0; c < c1; c += 4 {
		for r := r0; r < r1; r += 4 {
			src := bi + c + r*rowIn
			dst := bo + c*colOut + r
			for i := range 4 {
				s := src + i*rowIn
				a0, a1, a2, a3 := *at(px, s), *at(px, s+1), *at(px, s+2), *at(px, s+3)
				*at(pd, dst+i) = a0
				*at(pd, dst+colOut+i) = a1
				*at(pd, dst+2*colOut+i) = a2
				*at(pd, dst+3*colOut+i) = a3
			}
		}
	}
}
