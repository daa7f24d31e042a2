package server

import (
	"context"
	"sync"
	"time"
)

// switchCtx is the context a resident runtime was built with: it stands
// for whichever job runs on the runtime now, so that cancelling that job
// stops its executor at the next block although the executor outlives it.
// Its OnBlock hook likewise forwards to the current job.
type switchCtx struct {
	mu    sync.Mutex
	cur   context.Context
	block func(component, block string)
}

func newSwitchCtx() *switchCtx { return &switchCtx{cur: context.Background()} }

// use makes ctx and onBlock the current job's; use(nil, nil) detaches.
func (c *switchCtx) use(ctx context.Context, onBlock func(component, block string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	c.cur, c.block = ctx, onBlock
}

func (c *switchCtx) get() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func (c *switchCtx) onBlock(component, block string) {
	c.mu.Lock()
	fn := c.block
	c.mu.Unlock()
	if fn != nil {
		fn(component, block)
	}
}

func (c *switchCtx) Deadline() (time.Time, bool) { return c.get().Deadline() }
func (c *switchCtx) Done() <-chan struct{}       { return c.get().Done() }
func (c *switchCtx) Err() error                  { return c.get().Err() }
func (c *switchCtx) Value(key any) any           { return c.get().Value(key) }
