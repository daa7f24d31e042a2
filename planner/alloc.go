package planner

import "sort"

// The CPU device's caching allocator, as backend/cpu/device.go does it,
// without memory: the same rounding, segment sizes, splitting, coalescing,
// cache release and reclaim, so that allocated and reserved bytes follow
// the real device for the same sequence of requests.
const (
	allocAlign   = 512
	smallLimit   = 1 << 20
	segmentRound = 2 << 20
	pageSize     = 4096
)

type mseg struct {
	base, size, used int64
	large            bool // one block, never split
}

type mblock struct {
	seg        *mseg
	off, size  int64
	allocated  bool
	prev, next *mblock
}

// allocModel is one device.
type allocModel struct {
	capacity int64
	segs     []*mseg
	free     []*mblock
	nextBase int64

	allocated, reserved int64
	peakAlloc, peakRes  int64
	// winAlloc and winRes are peaks since the last resetWindow (per phase).
	winAlloc, winRes int64
	// mapped counts bytes of segments ever mapped (first touches).
	mapped int64
	// reclaim is the executor's out-of-memory hook.
	reclaim func(need int64) bool
	// observe is told after every change (for joint peaks).
	observe func()
}

func newAllocModel(capacity int64) *allocModel {
	return &allocModel{capacity: capacity, nextBase: 1 << 30}
}

// alloc returns a block of at least n bytes, or nil when the device is
// full even after reclaiming.
func (d *allocModel) alloc(n int64) *mblock {
	size := roundUp(max(n, 1), allocAlign)
	for attempt := 0; ; attempt++ {
		if b := d.allocLocked(size); b != nil {
			d.notify()
			return b
		}
		if d.reclaim == nil || !d.reclaim(size) || attempt > 8 {
			return nil
		}
	}
}

func (d *allocModel) notify() {
	if d.observe != nil {
		d.observe()
	}
}

func (d *allocModel) allocLocked(size int64) *mblock {
	if b := d.takeFree(size); b != nil {
		return d.use(b, size)
	}
	seg := int64(segmentRound)
	large := size >= smallLimit
	if large {
		seg = sizeClass(size)
	}
	if !d.fits(seg) {
		d.releaseEmpty()
	}
	if !d.fits(seg) && !d.fits(roundUp(size, pageSize)) {
		return nil
	}
	if !d.fits(seg) {
		seg = roundUp(size, pageSize)
	}
	s := &mseg{base: d.nextBase, size: seg, large: large}
	d.nextBase += seg + 1<<20
	d.segs = append(d.segs, s)
	d.reserved += seg
	d.mapped += seg
	d.peakRes = max(d.peakRes, d.reserved)
	d.winRes = max(d.winRes, d.reserved)
	return d.use(&mblock{seg: s, size: seg}, size)
}

func (d *allocModel) fits(n int64) bool {
	return d.capacity <= 0 || d.reserved+n <= d.capacity
}

func (d *allocModel) use(b *mblock, size int64) *mblock {
	if rest := b.size - size; !b.seg.large && rest >= allocAlign {
		tail := &mblock{seg: b.seg, off: b.off + size, size: rest, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = tail
		}
		b.next = tail
		b.size = size
		d.insertFree(tail)
	}
	b.allocated = true
	b.seg.used += b.size
	d.allocated += b.size
	d.peakAlloc = max(d.peakAlloc, d.allocated)
	d.winAlloc = max(d.winAlloc, d.allocated)
	return b
}

// resetWindow starts a new window of peaks at the current values.
func (d *allocModel) resetWindow() { d.winAlloc, d.winRes = d.allocated, d.reserved }

// release frees b, merging it with free neighbours.
func (d *allocModel) release(b *mblock) {
	if b == nil || !b.allocated {
		return
	}
	b.allocated = false
	b.seg.used -= b.size
	d.allocated -= b.size
	if n := b.next; n != nil && !n.allocated {
		d.removeFree(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
	}
	if p := b.prev; p != nil && !p.allocated {
		d.removeFree(p)
		p.size += b.size
		p.next = b.next
		if b.next != nil {
			b.next.prev = p
		}
		b = p
	}
	d.insertFree(b)
	d.notify()
}

// takeFree takes, for a small request, the smallest free span of a small
// segment that holds it; for a large one a cached segment of exactly its
// size class.
func (d *allocModel) takeFree(size int64) *mblock {
	large := size >= smallLimit
	want := size
	if large {
		want = sizeClass(size)
	}
	i := sort.Search(len(d.free), func(i int) bool { return d.free[i].size >= want })
	for ; i < len(d.free); i++ {
		b := d.free[i]
		if b.seg.large != large || (large && b.size != want) {
			if large && b.size > want {
				break
			}
			continue
		}
		d.free = append(d.free[:i], d.free[i+1:]...)
		return b
	}
	return nil
}

// sizeClass rounds a large request up to a multiple of 1/8 of its power
// of two (at least 64 KiB).
func sizeClass(size int64) int64 {
	step := int64(64 << 10)
	for p := int64(1); p <= size; p <<= 1 {
		step = max(step, p/8)
	}
	return roundUp(size, step)
}

func (d *allocModel) insertFree(b *mblock) {
	addr := b.seg.base + b.off
	i := sort.Search(len(d.free), func(i int) bool {
		f := d.free[i]
		return f.size > b.size || (f.size == b.size && f.seg.base+f.off >= addr)
	})
	d.free = append(d.free, nil)
	copy(d.free[i+1:], d.free[i:])
	d.free[i] = b
}

func (d *allocModel) removeFree(b *mblock) {
	for i, f := range d.free {
		if f == b {
			d.free = append(d.free[:i], d.free[i+1:]...)
			return
		}
	}
}

func (d *allocModel) releaseEmpty() {
	kept := d.segs[:0]
	for _, s := range d.segs {
		if s.used != 0 {
			kept = append(kept, s)
			continue
		}
		free := d.free[:0]
		for _, b := range d.free {
			if b.seg != s {
				free = append(free, b)
			}
		}
		d.free = free
		d.reserved -= s.size
	}
	d.segs = kept
	d.notify()
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }
