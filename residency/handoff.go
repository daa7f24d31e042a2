package residency

import "fmt"

// Handoff makes the streamed component from prefetch across its end into
// component to: while it is set, the window of blocks from's prefetch
// fetches runs past from's last block into to's first blocks instead of
// wrapping around to from's first. A pipeline sets it before the last pass
// it runs from (Wan 2.2's last high-noise step), so that to's first blocks
// are ready when it starts; Retire(from) ends it. to "" ends it now.
func (e *Executor) Handoff(from, to string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cs, ok := e.comps[from]
	if !ok {
		return fmt.Errorf("residency: handoff from %q: no such component", from)
	}
	if to == "" {
		cs.next = nil
		return nil
	}
	next, ok := e.comps[to]
	if !ok {
		return fmt.Errorf("residency: handoff to %q: no such component", to)
	}
	cs.next = next
	return nil
}

// Retire is Done for a component the request will not run again: beyond
// Done, its resident and persistent blocks leave the device and its
// host-tier copies are freed, so that the memory goes to what runs next
// (Wan 2.2's high-noise expert after the switch). A later Run loads
// everything again.
func (e *Executor) Retire(component string) {
	e.Done(component)
	e.mu.Lock()
	defer e.mu.Unlock()
	cs, ok := e.comps[component]
	if !ok {
		return
	}
	cs.next = nil
	for _, b := range cs.Blocks {
		e.evict(b)
		if b.host != nil && !b.inUse {
			b.host.Free()
			b.host = nil
		}
	}
}

// aheadAcross is ahead for a component with a handoff: up to k distinct
// blocks after position pos of cs's order up to its end, then of next's
// order from its start, leaving out those skip says to.
func (cs *compState) aheadAcross(pos, k int, skip func(*Block) bool) []*Block {
	next := cs.next
	if next == nil {
		return cs.ahead(pos, k, skip)
	}
	var out []*Block
	n, m := cs.cycle(), next.cycle()
	for i := pos + 1; i < n+m && len(out) < k; i++ {
		var x *Block
		if i < n {
			x = cs.at(i)
		} else {
			x = next.at(i - n)
		}
		if skip(x) || contains(out, x) {
			continue
		}
		out = append(out, x)
	}
	return out
}
