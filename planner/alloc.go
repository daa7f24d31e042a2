package planner

import "ferry/backend/cpu/arena"

// pageSize is the unit of first touches.
const pageSize = arena.PageSize

// mblock is a block of a modelled device.
type mblock = arena.Block

// allocModel is one device: the CPU device's caching allocator (package
// arena, the same code the device runs) over no memory, so that allocated
// and reserved bytes follow the real device for the same requests.
type allocModel struct {
	arena.Arena
	// winAlloc and winRes are peaks since the last resetWindow (per phase).
	winAlloc, winRes int64
	// reclaim is the executor's out-of-memory hook.
	reclaim func(need int64) bool
	// observe is told after every change (for joint peaks).
	observe func()
}

func newAllocModel(capacity int64) *allocModel {
	d := &allocModel{}
	next := int64(1 << 30)
	d.Arena = arena.Arena{Capacity: capacity, Map: func(size int64) (int64, any, error) {
		base := next
		next += size + 1<<20
		return base, nil, nil
	}}
	return d
}

// alloc returns a block of at least n bytes, or nil when the device is
// full even after reclaiming.
func (d *allocModel) alloc(n int64) *mblock {
	size := arena.Round(n)
	for attempt := 0; ; attempt++ {
		if b, err := d.Alloc(size); err == nil {
			d.winAlloc = max(d.winAlloc, d.Allocated)
			d.winRes = max(d.winRes, d.Reserved)
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

// resetWindow starts a new window of peaks at the current values.
func (d *allocModel) resetWindow() { d.winAlloc, d.winRes = d.Allocated, d.Reserved }

// release frees b.
func (d *allocModel) release(b *mblock) {
	if d.Free(b) > 0 {
		d.notify()
	}
}

// releaseEmpty gives back the empty segments.
func (d *allocModel) releaseEmpty() {
	d.ReleaseEmpty()
	d.notify()
}
