package cpu

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"ferry/backend/cpu/arena"
	"ferry/tensor"
)

// Device is the CPU "device": memory mmap'd outside the Go heap, handed out
// by the caching allocator of package arena with a hard capacity on
// reserved bytes (fresh memory costs ~10 µs per 4 KiB page on first touch
// here, so freed blocks are cached for reuse).
type Device struct {
	name string

	mu    sync.Mutex
	arena arena.Arena
	stats tensor.MemStats // Allocs, Frees, Capacity; the rest from arena

	reclaimers []func(need int64) bool
	observer   func(ev AllocEvent)
	// fragments, when set, reads the kernel's fragmented free memory
	// (SmallPagesFirst).
	fragments func() int64
	// pool, when set, caps d's reserved bytes with other devices' (Pool).
	pool *Pool
}

// AllocEvent reports one allocation or free to an observer (traces).
type AllocEvent struct {
	Alloc bool // false: a free
	Tag   string
	Bytes int64
	Stats tensor.MemStats
}

// NewDevice makes a CPU device whose reserved memory may not exceed capacity
// bytes (capacity <= 0 means unlimited).
func NewDevice(capacity int64) *Device {
	d := &Device{name: "cpu"}
	d.stats.Capacity = capacity
	d.arena = arena.Arena{Capacity: capacity, Map: d.poolMap, Unmap: d.poolUnmap}
	return d
}

// SmallPagesFirst makes the device map a segment with 4 KiB pages while
// the kernel's fragmented free memory, as fragments reads it (normally
// FragmentedFree), holds it (arena.SmallPages), and with huge pages after.
// Where the host backs those fragments and not the free huge pages (a VM
// that reports free memory to its host), the first touch is ~7x cheaper:
// a wan-tiny decode ran 1.3x faster. The GEMMs over 4 KiB pages run 2-4%
// slower, so the caller turns this on only where the hardware profile
// measured the gain (hwprofile.Profile.SmallPagesFirst).
func (d *Device) SmallPagesFirst(fragments func() int64) {
	d.mu.Lock()
	d.fragments = fragments
	d.mu.Unlock()
}

// mapSegment maps a segment's memory; its address is the segment's base.
// It runs with d.mu held (inside the arena).
func (d *Device) mapSegment(size int64) (int64, any, error) {
	mapper := mapAnon
	if d.fragments != nil && arena.SmallPages(size, d.fragments()) {
		mapper = mapSmall
	}
	mem, err := mapper(size)
	if err != nil {
		return 0, nil, err
	}
	return int64(uintptr(unsafe.Pointer(&mem[0]))), mem, nil
}

// Name is "cpu".
func (d *Device) Name() string { return d.name }

// Capacity is the hard cap on reserved bytes (0: none).
func (d *Device) Capacity() int64 { return d.arena.Capacity }

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

// Alloc returns a buffer of at least n bytes, asking the reclaimers
// (OnReclaim) for room when the arena is full.
func (d *Device) Alloc(n int64, tag string) (*tensor.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: negative allocation %d for %s", n, tag)
	}
	size := arena.Round(n)
	for attempt := 0; ; attempt++ {
		buf, oom, err := d.tryAlloc(n, size, tag)
		if err == nil {
			return buf, nil
		}
		d.mu.Lock()
		reclaimers, pool := d.reclaimers, d.pool
		d.mu.Unlock()
		if !errors.Is(err, arena.ErrFull) {
			return nil, fmt.Errorf("cpu: allocate %d bytes for %s: %w", n, tag, err)
		}
		// The pool's cached empty segments go before any weights do.
		if pool != nil && pool.releaseEmpty() {
			continue
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

// TryAlloc is Alloc without reclaiming: it fails at once when the arena
// has no room. Callers that hold a lock a reclaimer takes use it.
func (d *Device) TryAlloc(n int64, tag string) (*tensor.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: negative allocation %d for %s", n, tag)
	}
	buf, oom, err := d.tryAlloc(n, arena.Round(n), tag)
	if errors.Is(err, arena.ErrFull) {
		return nil, oom
	}
	return buf, err
}

// tryAlloc makes one attempt at size bytes from the arena; on failure it
// also returns the OOM error describing the arena then.
func (d *Device) tryAlloc(n, size int64, tag string) (*tensor.Buffer, *tensor.OOMError, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.arena.Alloc(size)
	if err != nil {
		oom := &tensor.OOMError{Device: d.name, Tag: tag, Requested: n, Allocated: d.arena.Allocated, Reserved: d.arena.Reserved, Capacity: d.arena.Capacity}
		if p := d.pool; p != nil && p.limit > 0 && p.Used()+size > p.limit {
			// The pool's cap refused: its sum and limit say why.
			oom.Reserved, oom.Capacity = p.Used(), p.limit
		}
		return nil, oom, err
	}
	d.stats.Allocs++
	mem := b.Seg.Mem.([]byte)
	buf := &tensor.Buffer{Ptr: unsafe.Pointer(&mem[b.Off]), Size: n, Device: d, Tag: tag, Handle: b}
	d.notify(true, tag, size)
	return buf, nil, nil
}

// Free returns a buffer to the cache, merging it with free neighbours.
func (d *Device) Free(buf *tensor.Buffer) {
	if buf == nil {
		return
	}
	b, ok := buf.Handle.(*arena.Block)
	if !ok || b == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	size := d.arena.Free(b)
	if size == 0 {
		return
	}
	buf.Handle = nil
	d.stats.Frees++
	d.notify(false, buf.Tag, size)
}

func (d *Device) notify(alloc bool, tag string, n int64) {
	if d.observer != nil {
		d.observer(AllocEvent{Alloc: alloc, Tag: tag, Bytes: n, Stats: d.statsLocked()})
	}
}

// EmptyCache gives every unused segment back to the system.
func (d *Device) EmptyCache() {
	d.mu.Lock()
	defer d.mu.Unlock()
	before := d.arena.Reserved
	d.arena.ReleaseEmpty()
	if d.arena.Reserved != before {
		d.notify(false, "empty cache", 0)
	}
}

// Stats reports the counters.
func (d *Device) Stats() tensor.MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.statsLocked()
}

func (d *Device) statsLocked() tensor.MemStats {
	st := d.stats
	st.Allocated, st.Reserved = d.arena.Allocated, d.arena.Reserved
	st.PeakAllocated, st.PeakReserved = d.arena.PeakAllocated, d.arena.PeakReserved
	return st
}

// ResetPeakStats sets the peaks to the current values.
func (d *Device) ResetPeakStats() {
	d.mu.Lock()
	d.arena.PeakAllocated = d.arena.Allocated
	d.arena.PeakReserved = d.arena.Reserved
	d.mu.Unlock()
}
