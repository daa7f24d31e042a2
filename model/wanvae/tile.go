package wanvae

import (
	"fmt"

	"ferry/tensor"
)

// tileGrid is the geometry of diffusers' tiled_decode / tiled_encode.
// Tiles start every stride (in input units: latents for decode, pixels for
// encode) and span tile input units, clipped at the edges; their outputs
// are blended over blend output units with the tile above and the tile to
// the left and cropped to crop output units.
type tileGrid struct {
	inH, inW         int
	tileH, tileW     int
	strideH, strideW int
	blendH, blendW   int
	cropH, cropW     int
	// patch, when > 1, says the tiles' outputs are patched (decode of the
	// Wan 2.2 VAE): each assembled row is unpatched into out, whose height
	// and width are patch times the grid's.
	patch int
}

// unit is how many of out's rows and columns one output unit of the
// tiles covers.
func (g tileGrid) unit() int { return max(g.patch, 1) }

// starts is Python's range(0, n, stride).
func starts(n, stride int) []int {
	var s []int
	for i := 0; i < n; i += stride {
		s = append(s, i)
	}
	return s
}

// count is the number of tiles.
func (g tileGrid) count() int { return len(starts(g.inH, g.strideH)) * len(starts(g.inW, g.strideW)) }

// tileFunc computes the output of the input tile at (y0, x0) of h × w.
type tileFunc func(y0, x0, h, w int) (*tensor.Tensor, error)

// assemble computes every tile row by row and writes the blended, cropped
// tiles into out [B, C, T, H, W]. The reference blends tiles in place and
// blends later tiles against the already blended ones, so the edges kept
// for the next tiles are taken after a tile's own blending: the bottom
// blendH rows of each tile of the previous row and the right blendW
// columns of the previous tile.
func (g tileGrid) assemble(ops *tensor.Ops, out *tensor.Tensor, tile tileFunc) error {
	ys, xs := starts(g.inH, g.strideH), starts(g.inW, g.strideW)
	var above, below, crops []*tensor.Tensor
	var left *tensor.Tensor
	defer func() {
		tensor.Free(above...)
		tensor.Free(below...)
		tensor.Free(crops...)
		left.Free()
	}()
	at := 0
	for ri, y0 := range ys {
		below = make([]*tensor.Tensor, len(xs))
		for ci, x0 := range xs {
			t, err := tile(y0, x0, min(g.tileH, g.inH-y0), min(g.tileW, g.inW-x0))
			if err != nil {
				return fmt.Errorf("wanvae: %w", err)
			}
			if ri > 0 {
				t = blend(ops, above[ci], t, 3, g.blendH)
			}
			if ci > 0 {
				t = blend(ops, left, t, 4, g.blendW)
			}
			below[ci] = lastAlong(ops, t, 3, g.blendH)
			left.Free()
			left = lastAlong(ops, t, 4, g.blendW)
			crops = append(crops, cropTile(ops, t, g.cropH, g.cropW))
			if err := ops.Err(); err != nil {
				return fmt.Errorf("wanvae: tile at (%d, %d): %w", y0, x0, err)
			}
		}
		left.Free()
		left = nil
		tensor.Free(above...)
		above, below = below, nil
		n, err := g.placeRow(ops, out, crops, at)
		crops = nil
		if err != nil {
			return err
		}
		at += n
	}
	if at*g.unit() < out.Dim(3) {
		return fmt.Errorf("wanvae: the tiles cover %d of %d rows (use sizes that are multiples of the tile grid)", at*g.unit(), out.Dim(3))
	}
	return nil
}

// placeRow joins one row of cropped tiles (which it frees) and writes it
// into out from row at on (in tile output units), cut to out's width and
// remaining height, unpatched when the grid is patched. It returns the
// number of rows written, in tile output units.
func (g tileGrid) placeRow(ops *tensor.Ops, out *tensor.Tensor, crops []*tensor.Tensor, at int) (int, error) {
	band := ops.Concat(4, crops...)
	tensor.Free(crops...)
	defer func() { band.Free() }()
	u := g.unit()
	outH, outW := out.Dim(3)/u, out.Dim(4)/u
	if band.Dim(4) < outW {
		return 0, fmt.Errorf("wanvae: the tiles cover %d of %d columns (use sizes that are multiples of the tile grid)", band.Dim(4)*u, out.Dim(4))
	}
	band = narrowTo(ops, band, 4, outW)
	n := min(band.Dim(3), outH-at)
	if n <= 0 {
		return 0, nil
	}
	band = narrowTo(ops, band, 3, n)
	band = unpatchify(ops, band, u)
	copyInto(ops, out, band, 3, at*u)
	if err := ops.Err(); err != nil {
		return 0, fmt.Errorf("wanvae: assembling tiles: %w", err)
	}
	return n, nil
}

// narrowTo keeps the first n entries of t along axis, freeing t when it
// makes a copy.
func narrowTo(ops *tensor.Ops, t *tensor.Tensor, axis, n int) *tensor.Tensor {
	if t.Dim(axis) == n {
		return t
	}
	c := ops.Narrow(t, axis, 0, n)
	t.Free()
	return c
}

// lastAlong copies the last n entries (fewer if t has fewer) of t along
// axis; nil when n <= 0.
func lastAlong(ops *tensor.Ops, t *tensor.Tensor, axis, n int) *tensor.Tensor {
	if n <= 0 {
		return nil
	}
	n = min(n, t.Dim(axis))
	return ops.Narrow(t, axis, t.Dim(axis)-n, n)
}

// cropTile keeps the top-left h × w of t (less where t is smaller) and
// frees t.
func cropTile(ops *tensor.Ops, t *tensor.Tensor, h, w int) *tensor.Tensor {
	t = narrowTo(ops, t, 3, min(h, t.Dim(3)))
	return narrowTo(ops, t, 4, min(w, t.Dim(4)))
}

// blend is diffusers' blend_v (axis 3) / blend_h (axis 4): over the first
// e = min(edge, b, extent) entries of b along axis, b[y] = a[-e+y]·(1-y/e)
// + b[y]·(y/e), where edge holds the last entries of the neighbouring tile
// a. Like the reference, the weights are rounded to float32 before they
// multiply. It consumes b and returns the blended tile.
func blend(ops *tensor.Ops, edge, b *tensor.Tensor, axis, extent int) *tensor.Tensor {
	if edge == nil {
		return b
	}
	e := min(edge.Dim(axis), b.Dim(axis), extent)
	if e <= 0 {
		return b
	}
	wa, wb := make([]float32, e), make([]float32, e)
	for y := range e {
		f := float64(y) / float64(e)
		wa[y], wb[y] = float32(1-f), float32(f)
	}
	shape := []int{1, 1, 1, 1, 1}
	shape[axis] = e
	ta, tb := ops.Upload(wa, shape...), ops.Upload(wb, shape...)
	tail := ops.Narrow(edge, axis, edge.Dim(axis)-e, e)
	head := ops.Narrow(b, axis, 0, e)
	ops.MulInPlace(tail, ta)
	ops.MulInPlace(head, tb)
	ops.AddInPlace(head, tail)
	tensor.Free(ta, tb, tail)
	n := b.Dim(axis)
	if e == n {
		b.Free()
		return head
	}
	rest := ops.Narrow(b, axis, e, n-e)
	out := ops.Concat(axis, head, rest)
	tensor.Free(head, rest, b)
	return out
}
