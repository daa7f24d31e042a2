package arena

import (
	"math/rand/v2"
	"testing"
)

// TestChoicesIgnoreAddresses runs one random sequence of allocations and
// frees through two arenas whose segments get addresses in opposite
// orders (mmap hands them out top-down; the planner's model numbers them
// bottom-up): every block must land in the same segment at the same
// offset, and the reserved bytes must agree throughout.
func TestChoicesIgnoreAddresses(t *testing.T) {
	up, down := int64(1<<40), int64(1<<50)
	a := Arena{Map: func(size int64) (int64, any, error) { up += size + 1<<20; return up, nil, nil }}
	b := Arena{Map: func(size int64) (int64, any, error) { down -= size + 1<<20; return down, nil, nil }}
	rng := rand.New(rand.NewPCG(1, 2))
	var live [][2]*Block
	sizes := []int64{512, 4096, 8192, 131072, 262144, 524288, 1 << 20, 3 << 20}
	for step := range 5000 {
		if len(live) > 0 && rng.IntN(5) < 2 {
			i := rng.IntN(len(live))
			a.Free(live[i][0])
			b.Free(live[i][1])
			live = append(live[:i], live[i+1:]...)
		} else {
			n := Round(sizes[rng.IntN(len(sizes))] + int64(rng.IntN(3))*512)
			x, errA := a.Alloc(n)
			y, errB := b.Alloc(n)
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if x.Seg.seq != y.Seg.seq || x.Off != y.Off || x.Size != y.Size {
				t.Fatalf("step %d: %d bytes placed at segment %d offset %d in one arena, segment %d offset %d in the other",
					step, n, x.Seg.seq, x.Off, y.Seg.seq, y.Off)
			}
			live = append(live, [2]*Block{x, y})
		}
		if a.Reserved != b.Reserved || a.Allocated != b.Allocated {
			t.Fatalf("step %d: reserved %d and %d, allocated %d and %d", step, a.Reserved, b.Reserved, a.Allocated, b.Allocated)
		}
	}
	if a.PeakReserved != b.PeakReserved {
		t.Errorf("peak reserved %d and %d", a.PeakReserved, b.PeakReserved)
	}
}

// TestSignature: states that differ only in which of two cached large
// segments of one size holds a tensor hash alike; a different layout of
// a small segment, or another count of large segments, does not.
func TestSignature(t *testing.T) {
	mapper := func() func(int64) (int64, any, error) {
		next := int64(1 << 30)
		return func(size int64) (int64, any, error) { next += size; return next, nil, nil }
	}
	// Two large segments of one class, the first or the second in use.
	var a, b Arena
	a.Map, b.Map = mapper(), mapper()
	x1, _ := a.Alloc(2 << 20)
	x2, _ := a.Alloc(2 << 20)
	y1, _ := b.Alloc(2 << 20)
	y2, _ := b.Alloc(2 << 20)
	a.Free(x1)
	b.Free(y2)
	if a.Signature() != b.Signature() {
		t.Error("the same counts of large segments in use and cached hash differently")
	}
	a.Free(x2)
	if a.Signature() == b.Signature() {
		t.Error("two cached large segments hash as one cached and one in use")
	}
	b.Free(y1)
	if a.Signature() != b.Signature() {
		t.Error("two cached large segments of one size hash differently")
	}
	// Small segments: the layout counts.
	var c, d Arena
	c.Map, d.Map = mapper(), mapper()
	s1, _ := c.Alloc(4096)
	c.Alloc(4096)
	d.Alloc(4096)
	s2, _ := d.Alloc(4096)
	c.Free(s1)
	d.Free(s2)
	if c.Signature() == d.Signature() {
		t.Error("a small segment's first block freed hashes as its second freed")
	}
}

// TestSizeClass checks the size classes against their definition: the
// request rounded up to a multiple of max(64 KiB, p/8), p the largest
// power of two not above it, at every power of two and its neighbours and
// at random sizes.
func TestSizeClass(t *testing.T) {
	want := func(size int64) int64 {
		step := int64(64 << 10)
		for p := int64(1); p > 0 && p <= size; p <<= 1 {
			step = max(step, p/8)
		}
		return (size + step - 1) / step * step
	}
	sizes := []int64{0, 1, 64 << 10, 1 << 20}
	for e := 1; e < 60; e++ {
		sizes = append(sizes, int64(1)<<e-1, int64(1)<<e, int64(1)<<e+1)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		sizes = append(sizes, rng.Int64N(1<<40))
	}
	for _, n := range sizes {
		if got, w := SizeClass(n), want(n); got != w {
			t.Fatalf("SizeClass(%d) = %d, want %d", n, got, w)
		}
	}
}

// TestLargeReuse: a large request takes a cached segment of its own size
// class, else the smallest cached one up to half as large again (whole,
// counting its own class as allocated), and maps fresh memory only when
// none is that close.
func TestLargeReuse(t *testing.T) {
	const mib = int64(1 << 20)
	for _, c := range []struct {
		name   string
		cached []int64 // sizes allocated then freed, in order
		want   int64   // the request
		reuse  int64   // the cached segment it gets; 0: a fresh one
	}{
		{"own class", []int64{64 * mib, 40 * mib}, 40 * mib, 40 * mib},
		{"own class before a larger", []int64{48 * mib, 40 * mib}, 40 * mib, 40 * mib},
		{"larger within half again", []int64{56 * mib}, 40 * mib, 56 * mib},
		{"the smallest larger", []int64{60 * mib, 48 * mib}, 40 * mib, 48 * mib},
		{"exactly half again", []int64{60 * mib}, 40 * mib, 60 * mib},
		{"too large", []int64{64 * mib}, 40 * mib, 0},
		{"only smaller", []int64{32 * mib}, 40 * mib, 0},
		{"small segments never serve large", []int64{mib / 2}, 2 * mib, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := int64(1 << 40)
			a := Arena{Map: func(size int64) (int64, any, error) { base += size; return base, nil, nil }}
			var blocks []*Block
			for _, n := range c.cached {
				b, err := a.Alloc(Round(n))
				if err != nil {
					t.Fatal(err)
				}
				blocks = append(blocks, b)
			}
			for _, b := range blocks {
				a.Free(b)
			}
			mapped := a.Mapped
			b, err := a.Alloc(Round(c.want))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.reuse == 0 && a.Mapped == mapped:
				t.Errorf("%d bytes took a cached segment of %d", c.want, b.Seg.Size)
			case c.reuse != 0 && (a.Mapped != mapped || b.Seg.Size != SizeClass(c.reuse)):
				t.Errorf("%d bytes got a segment of %d (mapped %d more), want the cached %d", c.want, b.Seg.Size, a.Mapped-mapped, SizeClass(c.reuse))
			}
			if b.Seg.Large && b.Size != b.Seg.Size {
				t.Errorf("a large segment split: block %d of %d", b.Size, b.Seg.Size)
			}
			if want := SizeClass(c.want); c.want >= SmallLimit && a.Allocated != want {
				t.Errorf("allocated %d, want the request's class %d", a.Allocated, want)
			}
			if got := a.Free(b); a.Allocated != 0 || (c.want >= SmallLimit && got != SizeClass(c.want)) {
				t.Errorf("free returned %d and left %d allocated", got, a.Allocated)
			}
		})
	}
}
