package residency

import (
	"fmt"
	"time"

	"ferry/trace"
)

// TrainingOrder is the order a training step runs a component of n blocks
// in: forward 0..n-1, then backward n-1..0. The last block runs twice in a
// row (the turn), and so does the first, from one step's backward to the
// next step's forward.
func TrainingOrder(n int) []int {
	order := make([]int, 0, 2*n)
	for i := range n {
		order = append(order, i)
	}
	for i := n - 1; i >= 0; i-- {
		order = append(order, i)
	}
	return order
}

// checkOrder says what is wrong with a component's Order: every index must
// name a block, and every block must run somewhere in it.
func checkOrder(c *Component) error {
	if c.Order == nil {
		return nil
	}
	seen := make([]bool, len(c.Blocks))
	for _, i := range c.Order {
		if i < 0 || i >= len(c.Blocks) {
			return fmt.Errorf("residency: component %s: order names block %d of %d", c.Name, i, len(c.Blocks))
		}
		seen[i] = true
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("residency: component %s: block %s never runs in the order", c.Name, c.Blocks[i].Name)
		}
	}
	return nil
}

// cycle is the length of the component's order.
func (cs *compState) cycle() int {
	if cs.Order != nil {
		return len(cs.Order)
	}
	return len(cs.Blocks)
}

// at is the block at a position of the order (wrapping around).
func (cs *compState) at(pos int) *Block {
	pos %= cs.cycle()
	if cs.Order != nil {
		return cs.Blocks[cs.Order[pos]]
	}
	return cs.Blocks[pos]
}

// advance finds b's next run in the order from the cursor, moves the
// cursor past it and returns its position. A caller that skips a block
// (a backward that needs no gradient below some block) only makes the
// search look further: prefetching is a hint, b itself is always loaded.
// Caller holds Executor.mu.
func (cs *compState) advance(b *Block) int {
	n := cs.cycle()
	for i := range n {
		p := (cs.cursor + i) % n
		if cs.at(p) == b {
			cs.cursor = (p + 1) % n
			return p
		}
	}
	return b.index // unreachable: checkOrder makes every block appear
}

// ahead lists up to k distinct blocks that run after position pos, within
// one cycle, leaving out those skip says to.
func (cs *compState) ahead(pos, k int, skip func(*Block) bool) []*Block {
	var out []*Block
	n := cs.cycle()
	for i := 1; i < n && len(out) < k; i++ {
		x := cs.at(pos + i)
		if skip(x) || contains(out, x) {
			continue
		}
		out = append(out, x)
	}
	return out
}

func contains(bs []*Block, x *Block) bool {
	for _, b := range bs {
		if b == x {
			return true
		}
	}
	return false
}

// runsNext reports whether a streamed block that just ran is wanted again
// at once under an explicit order: it runs next (the turn: twice in a
// row), or the next run's prefetch window would copy it straight back
// (the block before the turn, which runs again two blocks later). Keeping
// it costs no more device memory than that copy would. Caller holds
// Executor.mu, after advance(b).
func (cs *compState) runsNext(b *Block) bool {
	if cs.Order == nil {
		return false
	}
	next := cs.at(cs.cursor)
	if next == b {
		return true
	}
	skip := func(x *Block) bool { return x == next }
	return contains(cs.ahead(cs.cursor, cs.plan.Prefetch, skip), b)
}

// SetPhase names the phase the following runs belong to ("forward",
// "backward"): their stalls, and the copies that start while it is
// current, are counted under it in Stats.Phases as well as in the totals.
// "" stops counting by phase.
func (e *Executor) SetPhase(name string) {
	e.mu.Lock()
	e.phase = name
	e.mu.Unlock()
}

// addPhase adds to the current phase's figures. Caller holds e.mu.
func (e *Executor) addPhase(phase string, wait, copyTime time.Duration, loads int) {
	if phase == "" {
		return
	}
	if e.stats.Phases == nil {
		e.stats.Phases = map[string]PhaseStats{}
	}
	p := e.stats.Phases[phase]
	p.CopyWait += wait
	p.CopyTime += copyTime
	p.Loads += loads
	e.stats.Phases[phase] = p
}

// Invalidate says b's weights changed in its source (full fine-tuning
// updated the master copy): a device copy made before leaves, as does
// the host-tier copy, so that the next run loads the new values. A block
// the plan keeps on the device (resident, persistent) is queued for
// loading again at once, so that the copy overlaps what computes until
// its next run. A copy in use stays (it is the caller's to not invalidate
// a running block). A load in flight or queued is left alone: a source
// whose values change must make reads wait until the change is complete
// (see train's master source).
func (e *Executor) Invalidate(b *Block) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.loading == b || b.inUse || (b.ready != nil && b.dev == nil) {
		return
	}
	if b.host != nil {
		b.host.Free()
		b.host = nil
	}
	if b.dev == nil {
		return
	}
	e.evict(b)
	if p := b.comp.plan; p.Placement == Resident || (p.Placement == Stream && e.keeps(b)) {
		e.enqueue(b)
	}
}

// traceWait records a stall on the compute track, named with its phase.
func (e *Executor) traceWait(name, phase string, d time.Duration) {
	if phase != "" {
		name += " (" + phase + ")"
	}
	e.cfg.Trace.Add(trace.Span{Kind: trace.Wait, Track: trace.TrackCompute, Name: "wait " + name, Start: e.cfg.Trace.Now() - d, Dur: d})
}
