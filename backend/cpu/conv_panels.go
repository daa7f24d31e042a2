package cpu

import (
	"fmt"
	"math/bits"
	"sync"
)

// Gathering input patches straight into the GEMM's row panels. The packed
// convolution multiplies colᵀ (positions × K) by the packed weights, and
// colᵀ is the A operand: row panels of mr positions, each K steps of mr
// floats. Rather than write col and then copy it into panels (im2col, then
// packRowsContiguous: a fifth of the Wan VAE decoder's time), a worker
// fills each panel from the input directly.
//
// With stride 1 along the width, the positions of a panel that lie in one
// output row (a run) read, for one channel and kernel tap, consecutive
// input elements: one masked vector load per run and step, the mask
// leaving out lanes whose input column, row or frame falls in the padding.
// Where each run reads depends only on the tap, so a panel's reads are
// described once, per tap and run (panelTaps), and every channel reuses
// the description at its own offset.

// tapRun is where one run of a panel reads for one kernel tap: lane j of
// the mask reads element off + j of the channel's input (lanes outside the
// mask are zero).
type tapRun struct {
	off  int64
	mask int64
}

// gatherPanel fills steps K steps of one panel of rows lanes (dst[s·rows+j]
// for step s) from the input x of one image, starting at K row r0 (channel
// r0/kvol, tap r0%kvol). tab holds runs tapRuns per tap; plane is the
// element count of one input channel.
var gatherPanel = gatherPanelGo

func gatherPanelGo(dst, x []float32, tab []tapRun, runs, plane, r0, steps, kvol, rows int) {
	ch, tap := r0/kvol, r0%kvol
	for s := range steps {
		out := dst[s*rows : (s+1)*rows]
		clear(out)
		base := ch * plane
		for _, tr := range tab[tap*runs : (tap+1)*runs] {
			for m := uint64(tr.mask); m != 0; m &= m - 1 {
				j := bits.TrailingZeros64(m)
				out[j] = x[base+int(tr.off)+j]
			}
		}
		if tap++; tap == kvol {
			tap, ch = 0, ch+1
		}
	}
}

// gathers says whether the packed path can gather this convolution's
// panels: stride 1 along the width (each run reads consecutive input
// elements) and panels of at most 16 lanes (one vector).
func (p *convProblem) gathers(mr int) bool {
	return !p.pointwise && p.stride[2] == 1 && mr <= 16
}

// panelTaps appends to tab the reads of the panel of rows output positions
// starting at position pp (within one image), runs per tap, and returns
// tab and the run count.
func (p *convProblem) panelTaps(tab []tapRun, pp, rows int) ([]tapRun, int) {
	ow := p.outDim[2]
	first, last := pp/ow, (pp+rows-1)/ow // output rows (frame·height + row) the panel touches
	runs := last - first + 1
	kvol := p.ker[0] * p.ker[1] * p.ker[2]
	for tap := range kvol {
		dt, dh, dw := tap/(p.ker[1]*p.ker[2]), tap/p.ker[2]%p.ker[1], tap%p.ker[2]
		for row := first; row <= last; row++ {
			lo, hi := max(pp, row*ow), min(pp+rows, (row+1)*ow) // positions of this run
			lane0 := lo - pp
			it := row/p.outDim[1]*p.stride[0] + dt - p.pad[0]
			ih := row%p.outDim[1]*p.stride[1] + dh - p.pad[1]
			if it < 0 || it >= p.in[0] || ih < 0 || ih >= p.in[1] {
				tab = append(tab, tapRun{})
				continue
			}
			iw := lo - row*ow + dw - p.pad[2] // input column of the run's first lane
			// Lanes lane0+j for j in [jlo, jhi) read columns inside the input.
			jlo, jhi := max(0, -iw), min(hi-lo, p.in[2]-iw)
			var mask int64
			if jhi > jlo {
				mask = int64((uint64(1)<<(jhi-jlo) - 1) << (lane0 + jlo))
			}
			tab = append(tab, tapRun{off: int64((it*p.in[1]+ih)*p.in[2] + iw - lane0), mask: mask})
		}
	}
	return tab, runs
}

// tileTaps is a worker's description of every panel of its current tile:
// panel q's tapRuns start at start[q] and it has runs[q] per tap.
type tileTaps struct {
	tab         []tapRun
	start, runs []int
}

var tileTapsPool = sync.Pool{New: func() any { return new(tileTaps) }}

// describe fills tt for the panels of mr positions of the tile of np
// positions starting at p0. The vector gather reads where the masks say
// without bounds checks, so describe checks every lane against the
// channel's bounds once per tile, as a Go slice index would.
func (tt *tileTaps) describe(p *convProblem, p0, np, mr int) {
	tt.tab, tt.start, tt.runs = tt.tab[:0], tt.start[:0], tt.runs[:0]
	for q := 0; q*mr < np; q++ {
		tt.start = append(tt.start, len(tt.tab))
		var runs int
		tt.tab, runs = p.panelTaps(tt.tab, p0+q*mr, min(mr, np-q*mr))
		tt.runs = append(tt.runs, runs)
	}
	plane := int64(p.in[0] * p.in[1] * p.in[2])
	for _, tr := range tt.tab {
		if m := uint64(tr.mask); m != 0 {
			lo, hi := tr.off+int64(bits.TrailingZeros64(m)), tr.off+int64(63-bits.LeadingZeros64(m))
			if lo < 0 || hi >= plane {
				panic(fmt.Sprintf("cpu: conv gather reads elements %d..%d of a %d-element channel", lo, hi, plane))
			}
		}
	}
}

// gatherA fills a with colᵀ for positions [i0, i0+rows) of the tile tt
// describes (of image img; i0 a multiple of mr) and K rows [r0, r0+steps),
// in row panels of mr: the A block the GEMM asks its filler for.
func (p *convProblem) gatherA(a []float32, tt *tileTaps, img, i0, rows, r0, steps, mr int) {
	plane := p.in[0] * p.in[1] * p.in[2]
	x := p.x[img*p.c*plane : (img+1)*p.c*plane]
	kvol := p.ker[0] * p.ker[1] * p.ker[2]
	for q := 0; q*mr < rows; q++ {
		pr := min(mr, rows-q*mr)
		panel := a[q*mr*steps : (q*mr+pr)*steps]
		start, runs := tt.start[i0/mr+q], tt.runs[i0/mr+q]
		gatherPanel(panel, x, tt.tab[start:start+kvol*runs], runs, plane, r0, steps, kvol, pr)
	}
}
