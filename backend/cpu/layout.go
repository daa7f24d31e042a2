package cpu

import (
	"fmt"

	"ferry/dtype"
	"ferry/tensor"
)

// Layout kernels move elements without looking at them, so they work on any
// dtype by element size (1, 2, 4 or 8 bytes).

// layoutArgs checks that dst and a share a dtype and returns their bytes.
func layoutArgs(dst, a *tensor.Tensor) (d, x []byte, es int, err error) {
	if dst == nil || a == nil {
		return nil, nil, 0, fmt.Errorf("cpu: nil tensor")
	}
	if dst.DType() != a.DType() {
		return nil, nil, 0, fmt.Errorf("cpu: dst %v and input %v differ in dtype", dst, a)
	}
	es = a.DType().Size()
	switch es {
	case 1, 2, 4, 8:
	default:
		return nil, nil, 0, fmt.Errorf("cpu: dtype %s not supported", a.DType())
	}
	if d, err = hostData("dst", dst); err != nil {
		return nil, nil, 0, err
	}
	if x, err = hostData("input", a); err != nil {
		return nil, nil, 0, err
	}
	return d, x, es, nil
}

// strides gives the row-major element strides of shape.
func strides(shape []int) []int {
	s := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= shape[i]
	}
	return s
}

// unravel splits the flat index i over dims, writing the coordinates to idx.
func unravel(i int, dims, idx []int) {
	for k := len(dims) - 1; k >= 0; k-- {
		idx[k] = i % dims[k]
		i /= dims[k]
	}
}

// copyRows copies rows of rowBytes from src (row r at sOff + r·sStride) to
// dst (row r at dOff + r·dStride), in parallel.
func (be *Backend) copyRows(dst []byte, dOff, dStride int, src []byte, sOff, sStride, rowBytes, rows int) {
	if rows == 1 {
		be.copyBytes(dst[dOff:dOff+rowBytes], src[sOff:sOff+rowBytes])
		return
	}
	be.pool.For(rows, max(1, (1<<18)/max(rowBytes, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			d := dOff + r*dStride
			s := sOff + r*sStride
			copy(dst[d:d+rowBytes], src[s:s+rowBytes])
		}
	})
}

// Concat joins srcs along axis into dst.
func (be *Backend) Concat(dst *tensor.Tensor, srcs []*tensor.Tensor, axis int) error {
	if dst == nil || axis < 0 || axis >= dst.Rank() {
		return fmt.Errorf("cpu: concat axis %d out of range for %v", axis, dst)
	}
	shape := dst.Shape()
	total := 0
	for _, s := range srcs {
		if s == nil || s.Rank() != dst.Rank() {
			return fmt.Errorf("cpu: concat %v into %v: ranks differ", s, dst)
		}
		for i, n := range s.Shape() {
			if i != axis && n != shape[i] {
				return fmt.Errorf("cpu: concat %v into %v: shapes differ off axis %d", s, dst, axis)
			}
		}
		total += s.Dim(axis)
	}
	if total != shape[axis] {
		return fmt.Errorf("cpu: concat along axis %d gives %d, dst %v", axis, total, dst)
	}
	outer := tensor.NumElems(shape[:axis])
	off := 0
	for _, s := range srcs {
		d, x, es, err := layoutArgs(dst, s)
		if err != nil {
			return err
		}
		inner := tensor.NumElems(shape[axis+1:]) * es
		if row := s.Dim(axis) * inner; row > 0 && outer > 0 {
			be.copyRows(d, off, shape[axis]*inner, x, 0, row, row, outer)
		}
		off += s.Dim(axis) * inner
	}
	return nil
}

// Narrow copies a[..., start:start+dst.shape[axis], ...] into dst.
func (be *Backend) Narrow(dst, a *tensor.Tensor, axis, start int) error {
	d, x, es, err := layoutArgs(dst, a)
	if err != nil {
		return err
	}
	if axis < 0 || axis >= a.Rank() || dst.Rank() != a.Rank() {
		return fmt.Errorf("cpu: narrow axis %d of %v into %v", axis, a, dst)
	}
	n := dst.Dim(axis)
	for i := range a.Rank() {
		if i != axis && a.Dim(i) != dst.Dim(i) {
			return fmt.Errorf("cpu: narrow %v into %v: shapes differ off axis %d", a, dst, axis)
		}
	}
	if start < 0 || start+n > a.Dim(axis) {
		return fmt.Errorf("cpu: narrow [%d:%d] of axis %d of %v", start, start+n, axis, a)
	}
	if len(d) == 0 {
		return nil
	}
	inner := tensor.NumElems(a.Shape()[axis+1:]) * es
	outer := tensor.NumElems(a.Shape()[:axis])
	be.copyRows(d, 0, n*inner, x, start*inner, a.Dim(axis)*inner, n*inner, outer)
	return nil
}

// Pad places a inside a zero-filled dst at offset before.
func (be *Backend) Pad(dst, a *tensor.Tensor, before []int) error {
	d, x, es, err := layoutArgs(dst, a)
	if err != nil {
		return err
	}
	r := a.Rank()
	if dst.Rank() != r || len(before) != r {
		return fmt.Errorf("cpu: pad %v into %v with %v", a, dst, before)
	}
	for i := range r {
		if before[i] < 0 || before[i]+a.Dim(i) > dst.Dim(i) {
			return fmt.Errorf("cpu: pad %v at %v does not fit in %v", a, before, dst)
		}
	}
	if len(d) == 0 {
		return nil
	}
	fillT(be.pool, d, 0)
	if len(x) == 0 {
		return nil
	}
	if r == 0 {
		copy(d, x)
		return nil
	}
	width := a.Dim(-1)
	rows := a.Len() / width
	outer := a.Shape()[:r-1]
	ds := strides(dst.Shape())
	be.pool.For(rows, max(1, grainStream/width), func(lo, hi int) {
		idx := make([]int, r-1)
		for row := lo; row < hi; row++ {
			unravel(row, outer, idx)
			o := before[r-1]
			for k, c := range idx {
				o += (c + before[k]) * ds[k]
			}
			copy(d[o*es:(o+width)*es], x[row*width*es:(row+1)*width*es])
		}
	})
	return nil
}

// Upsample repeats each element scale[i] times along the trailing dims.
func (be *Backend) Upsample(dst, a *tensor.Tensor, scale []int) error {
	d, x, es, err := layoutArgs(dst, a)
	if err != nil {
		return err
	}
	r := a.Rank()
	if len(scale) > r || dst.Rank() != r {
		return fmt.Errorf("cpu: upsample %v by %v into %v", a, scale, dst)
	}
	factor := make([]int, r) // per dim, 1 where not scaled
	for i := range r {
		factor[i] = 1
		if j := i - (r - len(scale)); j >= 0 {
			factor[i] = scale[j]
		}
		if factor[i] < 1 || dst.Dim(i) != a.Dim(i)*factor[i] {
			return fmt.Errorf("cpu: upsample %v by %v does not give %v", a, scale, dst)
		}
	}
	if len(d) == 0 {
		return nil
	}
	if r == 0 || len(scale) == 0 {
		be.copyBytes(d, x)
		return nil
	}
	switch es {
	case 1:
		upsample(be, elems[uint8](d), elems[uint8](x), dst.Shape(), a.Shape(), factor)
	case 2:
		upsample(be, elems[uint16](d), elems[uint16](x), dst.Shape(), a.Shape(), factor)
	case 4:
		upsample(be, elems[uint32](d), elems[uint32](x), dst.Shape(), a.Shape(), factor)
	default:
		upsample(be, elems[uint64](d), elems[uint64](x), dst.Shape(), a.Shape(), factor)
	}
	return nil
}

// upsample writes each dst row (all dims but the last) from its source row,
// repeating elements along the last dim.
func upsample[T any](be *Backend, d, x []T, dshape, xshape, factor []int) {
	r := len(dshape)
	wo, wi, fw := dshape[r-1], xshape[r-1], factor[r-1]
	xs := strides(xshape)
	rows := len(d) / wo
	be.pool.For(rows, max(1, grainStream/wo), func(lo, hi int) {
		idx := make([]int, r-1)
		for row := lo; row < hi; row++ {
			unravel(row, dshape[:r-1], idx)
			src := 0
			for k, c := range idx {
				src += c / factor[k] * xs[k]
			}
			in := x[src : src+wi]
			out := d[row*wo : (row+1)*wo]
			for i, v := range in {
				for j := range fw {
					out[i*fw+j] = v
				}
			}
		}
	})
}

// Embedding gathers rows ids of table [V, D] (F32 or BF16) into dst.
func (be *Backend) Embedding(dst, table *tensor.Tensor, ids []int32) error {
	d, err := f32("dst", dst)
	if err != nil {
		return err
	}
	if table == nil || table.Rank() != 2 {
		return fmt.Errorf("cpu: embedding table %v is not [V, D]", table)
	}
	raw, err := hostData("table", table)
	if err != nil {
		return err
	}
	v, width := table.Dim(0), table.Dim(1)
	if !tensor.SameShape(dst.Shape(), []int{len(ids), width}) {
		return fmt.Errorf("cpu: embedding dst %v, want [%d %d]", dst, len(ids), width)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= v {
			return fmt.Errorf("cpu: embedding id %d outside vocabulary of %d", id, v)
		}
	}
	if len(d) == 0 {
		return nil
	}
	switch table.DType() {
	case dtype.F32, dtype.BF16:
	default:
		return fmt.Errorf("cpu: embedding table %v: want F32 or BF16", table)
	}
	es := table.DType().Size()
	be.pool.For(len(ids), max(1, grainStream/width), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := raw[int(ids[i])*width*es : (int(ids[i])+1)*width*es]
			// Cannot fail: the dtype and lengths are checked above.
			_ = dtype.ToF32(d[i*width:(i+1)*width], row, table.DType())
		}
	})
	return nil
}
