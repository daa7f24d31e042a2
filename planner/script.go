package planner

import (
	"math"
	"slices"
)

// work is what a block call computes, in the units the hardware profile
// rates: GEMM, attention and convolution flops, and bytes streamed by
// elementwise kernels. Convolution flops are kept by reduction size
// (see convFlops), whose rates differ tenfold.
type work struct {
	gemm, mem float64
	// attn holds attention flops by the head-dimension probe whose rate
	// prices them: [0] the small head (32), [1] the large (128).
	attn [2]float64
	// conv holds convolution flops by the reduction probe whose rate
	// prices them (convProbes).
	conv [4]float64
}

func (w work) add(o work) work {
	out := work{gemm: w.gemm + o.gemm, attn: [2]float64{w.attn[0] + o.attn[0], w.attn[1] + o.attn[1]}, mem: w.mem + o.mem}
	for i := range w.conv {
		out.conv[i] = w.conv[i] + o.conv[i]
	}
	return out
}

// convProbes are the reductions (C·kernel volume: 8, 32, 96 and 384
// channels at 3×3×3) of the hardware profile's convolution probes:
// ConvSmall, ConvMid, Conv and ConvWide GFLOPS.
var convProbes = [4]float64{216, 864, 2592, 10368}

// convProbeChannels are the probes' channel counts, in and out.
var convProbeChannels = [4]int{8, 32, 96, 384}

// convFlops splits convolution flops of reduction k between the two probes
// around it, linearly in log2(k) (so that they are priced at the harmonic
// interpolation of the two rates), all to the end probe outside their
// range. The rate climbs steeply with the reduction: the GEMM under the
// convolution runs its micro-kernel over longer panels, and the im2col
// and packing are shared by more output channels.
func convFlops(flops float64, k int) [4]float64 {
	var out [4]float64
	x := float64(max(k, 1))
	switch {
	case x <= convProbes[0]:
		out[0] = flops
		return out
	case x >= convProbes[3]:
		out[3] = flops
		return out
	}
	i := 0
	for x > convProbes[i+1] {
		i++
	}
	a := math.Log2(x/convProbes[i]) / math.Log2(convProbes[i+1]/convProbes[i])
	out[i], out[i+1] = (1-a)*flops, a*flops
	return out
}

// event is one allocation (bytes > 0) or free (bytes == 0) of the tensor
// with the given id, in the order the model code does them.
type event struct {
	id    int
	bytes int64
}

// call is one executor Run: a block and what its fn allocates, frees and
// computes. Tensors allocated in one call may be freed in a later one.
type call struct {
	block int // index into the component's blocks
	ev    []event
	work  work
}

// pass is one run over a component's blocks (one forward pass, one encode,
// one decoded tile-chunk): events before the first Run, the calls, and
// events after the last.
type pass struct {
	pre   []event
	calls []call
	post  []event
}

// ids hands out tensor ids, unique within a prediction.
type ids struct{ next int }

// recorder builds an event list.
type recorder struct {
	ids *ids
	ev  []event
}

// alloc records an allocation of n bytes and returns the tensor's id.
func (r *recorder) alloc(n int64) int {
	r.ids.next++
	r.ev = append(r.ev, event{id: r.ids.next, bytes: max(n, 0) + boolInt(n <= 0)})
	return r.ids.next
}

// free records frees, in order.
func (r *recorder) free(ids ...int) {
	for _, id := range ids {
		r.ev = append(r.ev, event{id: id})
	}
}

// take returns a copy of the recorded events and starts a new list in
// the same buffer: a pass records thousands of short lists, and growing
// each from nothing was most of what a plan search allocated.
func (r *recorder) take() []event {
	ev := slices.Clone(r.ev)
	r.ev = r.ev[:0]
	return ev
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// f32 is the size of n float32 elements.
func f32(n ...int) int64 {
	v := int64(4)
	for _, x := range n {
		v *= int64(x)
	}
	return v
}

// attnFlops splits attention flops at head dimension d between the two
// probes (32 and 128), linearly in log2(d), so that the time they are priced
// at is the harmonic interpolation of the two measured rates. Small heads
// run far below large ones: per score the kernel does d multiply-adds but a
// fixed softmax and tiling cost.
func attnFlops(flops float64, d int) [2]float64 {
	a := (math.Log2(float64(max(d, 1))) - 5) / 2
	a = min(1, max(0, a))
	return [2]float64{(1 - a) * flops, a * flops}
}

// roundUp rounds n up to a multiple of to.
func roundUp(n, to int) int { return (n + to - 1) / to * to }
