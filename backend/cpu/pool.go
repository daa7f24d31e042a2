package cpu

import (
	"sync"

	"ferry/backend/cpu/arena"
)

// Pool caps the reserved bytes of several devices together. A server job
// whose model shares its text encoder or VAE with other models runs those
// in runtimes of their own, each with its own devices; the job's budget is
// on the sum. A device in a pool maps a segment only when the pool has
// room; when it has none, the members' cached empty segments are given
// back first (a finished phase's activations, cached in its runtime, make
// room for the next phase's in another), as one device does for itself.
type Pool struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	members []*Device
}

// NewPool returns a pool of limit bytes (<= 0: no limit) over devs, which
// join it now with what they reserve; Leave ends it.
func NewPool(limit int64, devs ...*Device) *Pool {
	p := &Pool{limit: limit}
	for _, d := range devs {
		d.mu.Lock()
		p.mu.Lock()
		p.used += d.arena.Reserved
		p.members = append(p.members, d)
		p.mu.Unlock()
		d.pool = p
		d.mu.Unlock()
	}
	return p
}

// Leave detaches every member; their segments stop counting.
func (p *Pool) Leave() {
	p.mu.Lock()
	members := p.members
	p.members = nil
	p.mu.Unlock()
	for _, d := range members {
		d.mu.Lock()
		if d.pool == p {
			d.pool = nil
		}
		d.mu.Unlock()
	}
}

// Used is what the members reserve together.
func (p *Pool) Used() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}

// take counts size more bytes if they fit.
func (p *Pool) take(size int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limit > 0 && p.used+size > p.limit {
		return false
	}
	p.used += size
	return true
}

func (p *Pool) give(size int64) {
	p.mu.Lock()
	p.used -= size
	p.mu.Unlock()
}

// releaseEmpty gives back every member's cached empty segments; it reports
// whether that freed anything. No member's lock may be held.
func (p *Pool) releaseEmpty() bool {
	p.mu.Lock()
	members := append([]*Device(nil), p.members...)
	before := p.used
	p.mu.Unlock()
	for _, d := range members {
		d.EmptyCache()
	}
	return p.Used() < before
}

// poolMap maps a segment for d when its pool has room (d.mu held).
func (d *Device) poolMap(size int64) (int64, any, error) {
	if d.pool != nil && !d.pool.take(size) {
		return 0, nil, arena.ErrFull
	}
	base, mem, err := d.mapSegment(size)
	if err != nil && d.pool != nil {
		d.pool.give(size)
	}
	return base, mem, err
}

// poolUnmap gives a segment back (d.mu held).
func (d *Device) poolUnmap(s *arena.Segment) {
	unmap(s.Mem.([]byte))
	if d.pool != nil {
		d.pool.give(s.Size)
	}
}
