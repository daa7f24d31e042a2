package cpu

import (
	"fmt"

	"ferry/tensor"
)

// sumPlan is SumTo over merged dimensions (as planBroadcast merges them):
// each of a's merged dimensions is either kept (dst has it) or reduced
// (dst broadcasts along it). When the innermost is kept, dst's rows of
// cols elements are summed as whole runs of a (an adaLN gradient [B, L,
// C] -> [B, 1, C] adds L rows of C); when it is reduced, each dst element
// sums runs of a of length run.
type sumPlan struct {
	keep, keepA, keepD []int // kept outer dims, their strides in a and dst
	red, redA          []int // reduced dims (innermost excluded when run > 1), strides in a
	cols               int   // innermost kept length (1 when the innermost is reduced)
	run                int   // innermost reduced length (1 when the innermost is kept)
}

// SumTo sets dst = a summed over the dimensions along which dst broadcasts
// to a (right-aligned; dst has 1 there or lacks the dimension): the
// gradient of a broadcast operand of Add or Mul. Sums are float64, rounded
// once.
func (be *Backend) SumTo(dst, a *tensor.Tensor) error {
	d, err := f32("dst", dst)
	if err != nil {
		return err
	}
	as, err := f32("a", a)
	if err != nil {
		return err
	}
	if dst.Rank() > a.Rank() {
		return fmt.Errorf("cpu: sum %v to %v: dst has more dimensions", a, dst)
	}
	p, err := planBroadcast(a.Shape(), a.Shape(), dst.Shape())
	if err != nil {
		return fmt.Errorf("cpu: sum %v to %v: %w", a, dst, err)
	}
	if len(d) == 0 {
		return nil
	}
	if len(as) == 0 {
		fillT(be.pool, d, 0)
		return nil
	}
	sp := planSum(p)
	if len(sp.red) > maxSumDims {
		return fmt.Errorf("cpu: sum %v to %v: too many alternating dimensions", a, dst)
	}
	chunks := (sp.cols + sumCols - 1) / sumCols
	items := tensor.NumElems(sp.keep) * chunks
	work := max(1, len(as)/max(items, 1))
	be.pool.For(items, max(1, grainStream/work), func(lo, hi int) {
		for it := lo; it < hi; it++ {
			sp.sumItem(d, as, it/chunks, it%chunks*sumCols)
		}
	})
	return nil
}

// planSum splits the merged dimensions of p (a's in p.sa, dst's strides in
// p.sb, 0 where dst broadcasts) into kept and reduced ones.
func planSum(p broadcast) sumPlan {
	sp := sumPlan{cols: 1, run: 1}
	last := len(p.dims) - 1
	for i, n := range p.dims {
		switch {
		case i == last && p.sb[i] != 0:
			sp.cols = n
		case i == last:
			sp.run = n
		case p.sb[i] != 0:
			sp.keep = append(sp.keep, n)
			sp.keepA = append(sp.keepA, p.sa[i])
			sp.keepD = append(sp.keepD, p.sb[i])
		default:
			sp.red = append(sp.red, n)
			sp.redA = append(sp.redA, p.sa[i])
		}
	}
	return sp
}

// maxSumDims bounds the reduced dimensions left after merging (kept and
// reduced ones alternate, so a rank of 32 or more is needed to pass it).
const maxSumDims = 16

// sumItem writes dst's columns [c0, c0+sumCols) of kept index k.
func (sp *sumPlan) sumItem(d, a []float32, k, c0 int) {
	oa, od := 0, 0
	for i := len(sp.keep) - 1; i >= 0; i-- {
		c := k % sp.keep[i]
		k /= sp.keep[i]
		oa += c * sp.keepA[i]
		od += c * sp.keepD[i]
	}
	var acc [sumCols]float64
	w := min(sumCols, sp.cols-c0)
	s := acc[:w]
	var idx [maxSumDims]int // odometer over the reduced dims
	nred := tensor.NumElems(sp.red)
	ra := 0
	for range nred {
		base := oa + ra
		if sp.run > 1 {
			s[0] += sumRun(a[base : base+sp.run])
		} else {
			row := a[base+c0 : base+c0+w]
			for j, v := range row {
				s[j] += float64(v)
			}
		}
		for i := len(sp.red) - 1; i >= 0; i-- { // advance the odometer
			idx[i]++
			ra += sp.redA[i]
			if idx[i] < sp.red[i] {
				break
			}
			ra -= idx[i] * sp.redA[i]
			idx[i] = 0
		}
	}
	out := d[od+c0 : od+c0+w]
	for j, v := range s {
		out[j] = float32(v)
	}
}

func sumRun(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}
