package wanvae

import (
	"slices"
	"sync"
	"testing"

	"ferry/backend/cpu"
	"ferry/model/modeltest"
	"ferry/residency"
	"ferry/tensor"
)

// liveBytes follows a device's allocations by tag and keeps the peaks of
// weight bytes (every tag but the activations') and activation bytes.
type liveBytes struct {
	mu                   sync.Mutex
	weights, activations int64
	peakW, peakA         int64
	first                int64 // size of the first activation allocated
}

func (l *liveBytes) observe(ev cpu.AllocEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := ev.Bytes
	if !ev.Alloc {
		n = -n
	}
	if ev.Tag == "activation" {
		if ev.Alloc && l.first == 0 {
			l.first = ev.Bytes
		}
		l.activations += n
		l.peakA = max(l.peakA, l.activations)
		return
	}
	l.weights += n
	l.peakW = max(l.peakW, l.weights)
}

// decoderRig registers only the decoder over the golden weights under plan.
func decoderRig(t *testing.T, plan *residency.Plan) (*rig, *Model, *residency.Component) {
	t.Helper()
	g := loadGolden(t)
	r := newRig(t, nil, plan)
	m := New(g.cfg)
	comp := m.DecoderComponent("vae", residency.SourceOf(g.weights))
	if err := r.ex.Register(comp); err != nil {
		t.Fatal(err)
	}
	return r, m, comp
}

// TestStreamedDecodeMatchesResident decodes with every decoder block
// streamed (prefetch 1) and with all resident: the results must be
// bit-identical, and streaming must never hold more weights than a block
// and the one prefetched after it.
func TestStreamedDecodeMatchesResident(t *testing.T) {
	g := loadGolden(t)
	z, zs := modeltest.TensorOf(t, g.inputs, "z")

	resident, mr, _ := decoderRig(t, nil)
	want, _ := resident.decode(t, mr, z, zs)

	plan := residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, "vae")
	streamed, ms, comp := decoderRig(t, plan)
	var live liveBytes
	streamed.dev.Observe(live.observe)
	got, _ := streamed.decode(t, ms, z, zs)
	streamed.dev.Observe(nil)

	if !slices.Equal(got, want) {
		t.Errorf("streamed decode differs from resident (max diff %g)", maxDiff(got, want))
	}
	// The CPU device hands out multiples of 512 bytes.
	rounded := func(b *residency.Block) int64 { return (b.Bytes() + 511) &^ 511 }
	bound := int64(0)
	for i, b := range comp.Blocks {
		next := comp.Blocks[(i+1)%len(comp.Blocks)]
		bound = max(bound, rounded(b)+rounded(next))
	}
	if live.peakW > bound || live.peakW == 0 {
		t.Errorf("streaming held %d weight bytes at once, want (0, %d] (two consecutive blocks)", live.peakW, bound)
	}
	if s := streamed.ex.Stats(); s.Loads < len(comp.Blocks)*zs[2] {
		t.Errorf("%d block loads for %d blocks × %d frames: blocks were not streamed", s.Loads, len(comp.Blocks), zs[2])
	}
	t.Logf("peak weights streamed %d bytes (bound %d, all blocks %d)", live.peakW, bound, totalBytes(comp))
}

func totalBytes(c *residency.Component) int64 {
	n := int64(0)
	for _, b := range c.Blocks {
		n += b.Bytes()
	}
	return n
}

// TestDecodeActivationsDoNotGrowWithFrames checks that what Decode holds
// besides its output is the same for 3 and 5 latent frames: frames after
// the second see the same shapes (two kept frames per causal conv), so
// nothing may accumulate per frame.
func TestDecodeActivationsDoNotGrowWithFrames(t *testing.T) {
	r, m, _ := decoderRig(t, nil)
	shape := []int{1, 16, 0, 4, 5}
	var held []int64
	for _, frames := range []int{3, 5} {
		shape[2] = frames
		z := modeltest.Randn(uint64(frames), tensor.NumElems(shape))
		r.decode(t, m, z, shape) // loads the weights (resident plan)

		ops := r.ex.Ops("vae")
		x := ops.Upload(z, shape...)
		var live liveBytes
		r.dev.Observe(live.observe)
		out, err := m.Decode(r.ex, ops, x)
		r.dev.Observe(nil)
		if err != nil {
			t.Fatal(err)
		}
		tensor.Free(out, x)
		if live.activations != live.first {
			t.Errorf("%d frames: %d activation bytes left besides the output", frames, live.activations-live.first)
		}
		if live.peakW != 0 {
			t.Errorf("%d frames: %d weight bytes allocated with the weights resident", frames, live.peakW)
		}
		// The output is the first allocation and lives throughout.
		held = append(held, live.peakA-live.first)
	}
	if held[0] != held[1] || held[0] <= 0 {
		t.Errorf("Decode held %d bytes besides its output for 3 frames, %d for 5: want equal", held[0], held[1])
	}
	t.Logf("activations besides the output: %d bytes", held[0])
}
