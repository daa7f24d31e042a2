package cpu

import (
	"fmt"
	"math"
	"sync"

	"ferry/dtype"
	"ferry/tensor"
)

// Attention tiles: a worker takes attnTileQ query rows of one (batch, head)
// and streams over the keys attnTileK at a time, keeping a running maximum
// and sum per row (the online softmax of flash attention). Its scratch is a
// score tile [attnTileQ, attnTileK] and an accumulator [attnTileQ, D]:
// 64 KiB + 32 KiB at D = 128, inside L2. (Variables only so that tests can
// shrink them.)
var (
	attnTileQ = 64
	attnTileK = 256
)

// attnScratch is one worker's memory for one query tile.
type attnScratch struct {
	s       []float32 // scores, then probabilities, of one key tile
	o       []float32 // unnormalised output rows
	m, l    []float32 // running max and sum per row
	mx, cor []float32 // per row: the max after this tile, the rescale factor
}

var attnScratchPool sync.Pool

func getAttnScratch(d int) *attnScratch {
	sc, _ := attnScratchPool.Get().(*attnScratch)
	if sc == nil || cap(sc.s) < attnTileQ*attnTileK || cap(sc.m) < attnTileQ {
		sc = &attnScratch{
			s:   make([]float32, attnTileQ*attnTileK),
			m:   make([]float32, attnTileQ),
			l:   make([]float32, attnTileQ),
			mx:  make([]float32, attnTileQ),
			cor: make([]float32, attnTileQ),
		}
	}
	if cap(sc.o) < attnTileQ*d {
		sc.o = make([]float32, attnTileQ*d)
	}
	return sc
}

// attnProblem holds the operands of one Attention call.
type attnProblem struct {
	q, k, v, out  []float32
	bias          []float32
	b, lq, lk     int
	heads, d      int
	scale         float32
	biasB, biasH  int // bias element strides per batch and head (0: shared)
	biasQ         int // per query row (0: one row for all)
	tilesPerQuery int
}

// Attention sets dst = softmax(q·kᵀ·scale + bias)·v per batch and head, with
// q, k, v and dst in [B, L, H, D] layout.
func (be *Backend) Attention(dst, q, k, v, bias *tensor.Tensor, scale float32) error {
	p, err := planAttention(dst, q, k, v, bias, scale)
	if err != nil || len(p.out) == 0 {
		return err
	}
	if p.lk == 0 {
		// Softmax over no keys is undefined, as in PyTorch.
		fillT(be.pool, p.out, float32(math.NaN()))
		return nil
	}
	items := p.b * p.heads * p.tilesPerQuery
	be.pool.For(items, 1, func(lo, hi int) {
		sc := getAttnScratch(p.d)
		for it := lo; it < hi; it++ {
			be.attentionTile(&p, sc, it)
		}
		attnScratchPool.Put(sc)
	})
	return nil
}

func planAttention(dst, q, k, v, bias *tensor.Tensor, scale float32) (attnProblem, error) {
	var p attnProblem
	var err error
	if p.out, err = f32("dst", dst); err != nil {
		return p, err
	}
	if p.q, err = f32("q", q); err != nil {
		return p, err
	}
	if p.k, err = f32("k", k); err != nil {
		return p, err
	}
	if p.v, err = f32("v", v); err != nil {
		return p, err
	}
	if q.Rank() != 4 || k.Rank() != 4 || !tensor.SameShape(k.Shape(), v.Shape()) || !tensor.SameShape(dst.Shape(), q.Shape()) ||
		q.Dim(0) != k.Dim(0) || q.Dim(2) != k.Dim(2) || q.Dim(3) != k.Dim(3) {
		return p, fmt.Errorf("cpu: attention q %v, k %v, v %v, dst %v do not match ([B, L, H, D])", q, k, v, dst)
	}
	p.b, p.lq, p.heads, p.d = q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	p.lk = k.Dim(1)
	p.scale = scale
	p.tilesPerQuery = (p.lq + attnTileQ - 1) / attnTileQ
	if bias == nil {
		return p, nil
	}
	if p.bias, err = f32("bias", bias); err != nil {
		return p, err
	}
	bs := bias.Shape()
	if len(bs) != 4 || (bs[0] != 1 && bs[0] != p.b) || (bs[1] != 1 && bs[1] != p.heads) ||
		(bs[2] != 1 && bs[2] != p.lq) || bs[3] != p.lk {
		return p, fmt.Errorf("cpu: attention bias %v does not broadcast to [%d %d %d %d]", bias, p.b, p.heads, p.lq, p.lk)
	}
	st := strides(bs)
	for i, s := range []*int{&p.biasB, &p.biasH, &p.biasQ} {
		if bs[i] > 1 {
			*s = st[i]
		}
	}
	return p, nil
}

// attentionTile computes one tile of query rows for one batch and head.
func (be *Backend) attentionTile(p *attnProblem, sc *attnScratch, item int) {
	qt := item % p.tilesPerQuery
	h := item / p.tilesPerQuery % p.heads
	b := item / p.tilesPerQuery / p.heads
	q0 := qt * attnTileQ
	mq := min(attnTileQ, p.lq-q0)
	ld := p.heads * p.d // row stride of every operand in [B, L, H, D]
	qOff := ((b*p.lq+q0)*p.heads + h) * p.d

	o := sc.o[:mq*p.d]
	clear(o)
	m, l := sc.m[:mq], sc.l[:mq]
	for i := range m {
		m[i], l[i] = float32(math.Inf(-1)), 0
	}
	for k0 := 0; k0 < p.lk; k0 += attnTileK {
		nk := min(attnTileK, p.lk-k0)
		kOff := ((b*p.lk+k0)*p.heads + h) * p.d
		s := sc.s[:mq*nk]
		be.gemm.Sgemm(false, true, mq, nk, p.d, p.scale, p.q[qOff:], ld, p.k[kOff:], ld, 0, s, nk)
		if p.bias != nil {
			p.addBias(s, b, h, q0, mq, k0, nk)
		}
		onlineSoftmax(s, o, nk, p.d, m, l, sc.mx[:mq], sc.cor[:mq])
		be.gemm.Sgemm(false, false, mq, p.d, nk, 1, s, nk, p.v[kOff:], ld, 1, o, p.d)
	}
	for i := range mq {
		out := p.out[qOff+i*ld : qOff+i*ld+p.d]
		inv := 1 / l[i]
		for j, x := range o[i*p.d : (i+1)*p.d] {
			out[j] = x * inv
		}
	}
}

// addBias adds the bias rows for query rows [q0, q0+mq) and keys
// [k0, k0+nk) to the score tile s.
func (p *attnProblem) addBias(s []float32, b, h, q0, mq, k0, nk int) {
	base := b*p.biasB + h*p.biasH + k0
	for i := range mq {
		addRow(s[i*nk:(i+1)*nk], p.bias[base+(q0+i)*p.biasQ:][:nk])
	}
}

// onlineSoftmax folds one tile of scores s [rows, nk] into the rows'
// running softmax: it replaces the scores by exp(score - max), and where a
// row's max grows it rescales the row's accumulator (o [rows, d]) and sum
// l by exp(old max - new max). m and l hold the running max and sum; mx and
// cor are scratch of one float per row (the rescale factors are computed in
// one vector call).
func onlineSoftmax(s, o []float32, nk, d int, m, l, mx, cor []float32) {
	for i := range m {
		mx[i] = rowMax(s[i*nk:(i+1)*nk], m[i])
		cor[i] = m[i] - mx[i] // -Inf - finite = -Inf: exp gives 0
		if math.IsInf(float64(mx[i]), -1) {
			cor[i] = 0 // no key seen yet: keep (zero) state, exp(0) = 1
		}
	}
	expShift(cor, 0)
	for i := range m {
		row := s[i*nk : (i+1)*nk]
		if math.IsInf(float64(mx[i]), -1) {
			// Every key so far is masked out: nothing to add yet.
			clear(row)
			continue
		}
		sum := expShift(row, mx[i])
		l[i] = l[i]*cor[i] + sum
		if cor[i] != 1 {
			scaleRow(o[i*d:(i+1)*d], cor[i])
		}
		m[i] = mx[i]
	}
}

// Rope rotates adjacent pairs of x [B, L, H, D] by the angles of the F64
// tables cos and sin [L, D/2], evaluating in float64.
func (be *Backend) Rope(dst, x, cos, sin *tensor.Tensor) error {
	d, xs, err := be.unaryArgs(dst, x)
	if err != nil {
		return err
	}
	if cos == nil || sin == nil || cos.DType() != dtype.F64 || sin.DType() != dtype.F64 {
		return fmt.Errorf("cpu: rope tables %v, %v: want F64", cos, sin)
	}
	if _, err := hostData("cos", cos); err != nil {
		return err
	}
	if _, err := hostData("sin", sin); err != nil {
		return err
	}
	if x.Rank() != 4 || x.Dim(3)%2 != 0 || !tensor.SameShape(cos.Shape(), []int{x.Dim(1), x.Dim(3) / 2}) ||
		!tensor.SameShape(sin.Shape(), cos.Shape()) {
		return fmt.Errorf("cpu: rope x %v does not match tables %v, %v", x, cos, sin)
	}
	if len(d) == 0 {
		return nil
	}
	seq, width, half := x.Dim(1), x.Dim(2)*x.Dim(3), x.Dim(3)/2
	c, s := cos.F64(), sin.F64()
	be.forRows(len(d)/width, width, grainStream, func(lo, hi int) {
		for row := lo; row < hi; row++ {
			pos := row % seq
			ropeRow(d[row*width:(row+1)*width], xs[row*width:(row+1)*width],
				c[pos*half:(pos+1)*half], s[pos*half:(pos+1)*half])
		}
	})
	return nil
}

// ropeRow rotates every head of one position; d may alias x.
func ropeRow(d, x []float32, c, s []float64) {
	half := len(c)
	for h := 0; h < len(d); h += 2 * half {
		dd, xx := d[h:h+2*half], x[h:h+2*half]
		for j := range half {
			x0, x1 := float64(xx[2*j]), float64(xx[2*j+1])
			dd[2*j] = float32(x0*c[j] - x1*s[j])
			dd[2*j+1] = float32(x0*s[j] + x1*c[j])
		}
	}
}
