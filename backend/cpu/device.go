package cpu

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"ferry/tensor"
)

// Allocation sizes and segment sizes, in the spirit of PyTorch's caching
// allocator: small requests share 2 MiB segments; a large request gets a
// segment of its own, rounded up to its size class (at most 1/8 more), that
// is never split, and freed blocks are cached for reuse (fresh memory costs
// ~10 µs per 4 KiB page on first touch here). Because a large segment only
// ever holds one block, a free large block is an empty segment that can be
// given back when the capacity is reached: under a hard budget the cache
// cannot fragment into pieces too small for the next large tensor.
const (
	align        = 512
	smallLimit   = 1 << 20
	segmentRound = 2 << 20
	pageSize     = 4096
)

// Device is the CPU "device": memory mmap'd outside the Go heap, handed out
// by a caching allocator with a hard capacity on reserved bytes.
type Device struct {
	name     string
	capacity int64

	mu       sync.Mutex
	segments []*segment
	free     []*block // cached free blocks, sorted by size then address
	stats    tensor.MemStats

	reclaimers []func(need int64) bool
	observer   func(ev AllocEvent)
}

// AllocEvent reports one allocation or free to an observer (traces).
type AllocEvent struct {
	Alloc bool // false: a free
	Tag   string
	Bytes int64
	Stats tensor.MemStats
}

type segment struct {
	mem   []byte
	base  uintptr
	size  int64
	used  int64 // bytes held by allocated blocks
	large bool  // one block, never split
}

// block is a span inside a segment; neighbours are linked for coalescing.
type block struct {
	seg        *segment
	off, size  int64
	allocated  bool
	prev, next *block
}

// NewDevice makes a CPU device whose reserved memory may not exceed capacity
// bytes (capacity <= 0 means unlimited).
func NewDevice(capacity int64) *Device {
	d := &Device{name: "cpu", capacity: capacity}
	d.stats.Capacity = capacity
	return d
}

// Name is "cpu".
func (d *Device) Name() string { return d.name }

// Capacity is the hard cap on reserved bytes (0: none).
func (d *Device) Capacity() int64 { return d.capacity }

// OnReclaim registers fn, called (without the lock held) when an allocation
// would exceed the capacity; fn frees what it can and reports whether it freed
// anything. The residency executor evicts idle components this way.
func (d *Device) OnReclaim(fn func(need int64) bool) {
	d.mu.Lock()
	d.reclaimers = append(d.reclaimers, fn)
	d.mu.Unlock()
}

// Observe sets a function told of every allocation and free (nil: none).
// It runs with the allocator's lock held: it must not allocate on d.
func (d *Device) Observe(fn func(ev AllocEvent)) {
	d.mu.Lock()
	d.observer = fn
	d.mu.Unlock()
}

// Alloc returns a buffer of at least n bytes.
func (d *Device) Alloc(n int64, tag string) (*tensor.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: negative allocation %d for %s", n, tag)
	}
	size := roundUp(max(n, 1), align)
	for attempt := 0; ; attempt++ {
		d.mu.Lock()
		b, err := d.allocLocked(size)
		if err == nil {
			buf := &tensor.Buffer{Ptr: unsafe.Add(unsafe.Pointer(&b.seg.mem[0]), b.off), Size: n, Device: d, Tag: tag, Handle: b}
			d.notify(true, tag, size)
			d.mu.Unlock()
			return buf, nil
		}
		oom := &tensor.OOMError{Device: d.name, Tag: tag, Requested: n, Allocated: d.stats.Allocated, Reserved: d.stats.Reserved, Capacity: d.capacity}
		reclaimers := d.reclaimers
		d.mu.Unlock()
		if err != tensor.ErrOutOfMemory {
			return nil, fmt.Errorf("cpu: allocate %d bytes for %s: %w", n, tag, err)
		}
		freed := false
		for _, r := range reclaimers {
			if r(size) {
				freed = true
			}
		}
		if !freed || attempt > 8 {
			return nil, oom
		}
	}
}

func (d *Device) allocLocked(size int64) (*block, error) {
	if b := d.takeFree(size); b != nil {
		return d.use(b, size), nil
	}
	seg := segmentRound
	large := size >= smallLimit
	if large {
		seg = int(sizeClass(size))
	}
	if !d.fits(int64(seg)) {
		d.releaseEmpty()
	}
	if !d.fits(int64(seg)) && !d.fits(int64(roundUp(size, pageSize))) {
		return nil, tensor.ErrOutOfMemory
	}
	if !d.fits(int64(seg)) {
		seg = int(roundUp(size, pageSize)) // near the cap: no rounding slack
	}
	s, err := d.newSegment(int64(seg))
	if err != nil {
		return nil, err
	}
	s.large = large
	b := &block{seg: s, size: s.size}
	return d.use(b, size), nil
}

// sizeClass rounds a large request up to a multiple of 1/8 of its power of
// two (at least 64 KiB), so that tensors of nearly equal size share cached
// segments while the rounding wastes at most 1/8.
func sizeClass(size int64) int64 {
	step := int64(64 << 10)
	for p := int64(1); p <= size; p <<= 1 {
		step = max(step, p/8)
	}
	return roundUp(size, step)
}

func (d *Device) fits(n int64) bool {
	return d.capacity <= 0 || d.stats.Reserved+n <= d.capacity
}

// use marks b allocated, splitting off the tail when it is worth keeping.
func (d *Device) use(b *block, size int64) *block {
	if rest := b.size - size; !b.seg.large && rest >= align {
		tail := &block{seg: b.seg, off: b.off + size, size: rest, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = tail
		}
		b.next = tail
		b.size = size
		d.insertFree(tail)
	}
	b.allocated = true
	b.seg.used += b.size
	d.stats.Allocated += b.size
	d.stats.Allocs++
	d.stats.PeakAllocated = max(d.stats.PeakAllocated, d.stats.Allocated)
	return b
}

// Free returns a buffer to the cache, merging it with free neighbours.
func (d *Device) Free(buf *tensor.Buffer) {
	if buf == nil {
		return
	}
	b, ok := buf.Handle.(*block)
	if !ok || b == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !b.allocated {
		return
	}
	buf.Handle = nil
	b.allocated = false
	b.seg.used -= b.size
	d.stats.Allocated -= b.size
	d.stats.Frees++
	size := b.size
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
	d.notify(false, buf.Tag, size)
}

func (d *Device) notify(alloc bool, tag string, n int64) {
	if d.observer != nil {
		d.observer(AllocEvent{Alloc: alloc, Tag: tag, Bytes: n, Stats: d.stats})
	}
}

// takeFree removes and returns a cached block for size bytes: for a small
// request the smallest free span of a small segment that holds it, for a
// large one a cached segment of exactly its size class.
func (d *Device) takeFree(size int64) *block {
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
				break // sorted by size: no exact class left
			}
			continue
		}
		d.free = append(d.free[:i], d.free[i+1:]...)
		return b
	}
	return nil
}

func (d *Device) insertFree(b *block) {
	i := sort.Search(len(d.free), func(i int) bool {
		f := d.free[i]
		return f.size > b.size || (f.size == b.size && f.seg.base+uintptr(f.off) >= b.seg.base+uintptr(b.off))
	})
	d.free = append(d.free, nil)
	copy(d.free[i+1:], d.free[i:])
	d.free[i] = b
}

func (d *Device) removeFree(b *block) {
	for i, f := range d.free {
		if f == b {
			d.free = append(d.free[:i], d.free[i+1:]...)
			return
		}
	}
}

func (d *Device) newSegment(size int64) (*segment, error) {
	mem, err := mapAnon(size)
	if err != nil {
		return nil, err
	}
	s := &segment{mem: mem, base: uintptr(unsafe.Pointer(&mem[0])), size: size}
	d.segments = append(d.segments, s)
	d.stats.Reserved += size
	d.stats.PeakReserved = max(d.stats.PeakReserved, d.stats.Reserved)
	return s, nil
}

// releaseEmpty unmaps every segment with nothing allocated in it.
func (d *Device) releaseEmpty() {
	kept := d.segments[:0]
	for _, s := range d.segments {
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
		d.stats.Reserved -= s.size
		unmap(s.mem)
	}
	for i := len(kept); i < len(d.segments); i++ {
		d.segments[i] = nil
	}
	d.segments = kept
}

// EmptyCache gives every unused segment back to the system.
func (d *Device) EmptyCache() {
	d.mu.Lock()
	d.releaseEmpty()
	d.mu.Unlock()
}

// Stats reports the counters.
func (d *Device) Stats() tensor.MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// ResetPeakStats sets the peaks to the current values.
func (d *Device) ResetPeakStats() {
	d.mu.Lock()
	d.stats.PeakAllocated = d.stats.Allocated
	d.stats.PeakReserved = d.stats.Reserved
	d.mu.Unlock()
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }
