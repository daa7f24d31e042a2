package residency

// What a long-lived executor (ferry serve keeps one per model between
// requests) needs beyond one run: to see where every block's weights are,
// and to demote idle blocks one tier down to make room for another model.

// ResidentBlock is where one block's weights are now.
type ResidentBlock struct {
	Component string
	Block     string
	// DeviceBytes are on the device (or, for a component placed on the
	// host, in the host memory it computes from: OnHostCompute).
	DeviceBytes   int64
	OnHostCompute bool
	// HostBytes is the block's host-tier copy (storage dtype).
	HostBytes int64
	// StoredBytes is the block's size on disk, what a reload from the
	// checkpoint reads.
	StoredBytes int64
	// Busy: in use, loading or queued: it cannot be demoted now.
	Busy bool
	// LastUse orders blocks by their last run (larger: more recent).
	LastUse uint64
}

// Resident lists every registered block's residency, in registration order.
func (e *Executor) Resident() []ResidentBlock {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ResidentBlock
	for _, cs := range e.order {
		for _, b := range cs.Blocks {
			r := ResidentBlock{Component: cs.Name, Block: b.Name, StoredBytes: b.rawBytes, LastUse: b.lastUse,
				OnHostCompute: cs.plan.Placement == Host, Busy: e.busy(b)}
			if b.dev != nil {
				r.DeviceBytes = b.devBytes
			}
			if b.host != nil {
				r.HostBytes = b.rawBytes
			}
			out = append(out, r)
		}
	}
	return out
}

// busy reports whether b is running, loading or waiting to load. Caller
// holds e.mu.
func (e *Executor) busy(b *Block) bool {
	return b.inUse || e.loading == b || (b.ready != nil && b.dev == nil)
}

// DemoteDevice frees the named block's compute copy when it is idle,
// returning the bytes freed (0 when absent or busy). Its host-tier copy,
// if any, stays: the next run reloads from there, or else from disk.
func (e *Executor) DemoteDevice(block string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.block(block)
	if b == nil || b.dev == nil || e.busy(b) {
		return 0
	}
	n := b.devBytes
	e.evict(b)
	return n
}

// DemoteHost frees the named block's host-tier copy when it is idle,
// returning the bytes freed: the next load reads the checkpoint again.
func (e *Executor) DemoteHost(block string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.block(block)
	if b == nil || b.host == nil || e.busy(b) {
		return 0
	}
	n := b.rawBytes
	b.host.Free()
	b.host = nil
	return n
}

// block finds a registered block by name. Caller holds e.mu.
func (e *Executor) block(name string) *Block {
	for _, cs := range e.order {
		for _, b := range cs.Blocks {
			if b.Name == name {
				return b
			}
		}
	}
	return nil
}

// ReleaseStaging frees the buffer reads from disk go through, when no
// copy is running or queued: a runtime kept between requests then holds
// only its blocks' weights while idle, which another model's job can
// demote, and not a buffer nothing can take back. The next read from disk
// allocates it again.
func (e *Executor) ReleaseStaging() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.staging != nil && e.loading == nil && len(e.queue) == 0 {
		e.staging.Free()
		e.staging = nil
	}
}
