package natsq

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Event relay: a job's progress events happen on the worker that runs it,
// but a client follows them (GET /v1/videos/{id}/events) on whichever API
// node it asked. The relay carries them over core NATS on
// PREFIX.events.ID: at most once and in order per worker, which is what
// progress needs (the job's state, with its final status, is in the
// bucket). The server uses it when its queue has these methods.

// Headers of a relayed event.
const (
	hdrEventType = "Ferry-Event"
	hdrOrigin    = "Ferry-Origin"
)

// PublishEvent relays one event of job id to the other processes.
func (q *Queue) PublishEvent(id, typ string, data []byte) error {
	if !validToken(id) {
		return fmt.Errorf("natsq: publish event: bad job id %q", id)
	}
	m := nats.NewMsg(q.cfg.Prefix + ".events." + id)
	m.Header.Set(hdrEventType, typ)
	m.Header.Set(hdrOrigin, q.origin())
	m.Data = data
	if err := q.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("natsq: publish event of %s: %w", id, err)
	}
	return nil
}

// SubscribeEvents calls fn with every event another process relays (this
// process's own are not echoed back), until stop is called or the queue
// closes. fn runs on one goroutine, in arrival order.
func (q *Queue) SubscribeEvents(fn func(id, typ string, data []byte)) (stop func(), err error) {
	prefix := q.cfg.Prefix + ".events."
	me := q.origin()
	sub, err := q.nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		if m.Header.Get(hdrOrigin) == me {
			return
		}
		fn(m.Subject[len(prefix):], m.Header.Get(hdrEventType), m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("natsq: subscribe to events: %w", err)
	}
	// Progress events are small and frequent: never drop them for a slow
	// consumer before the defaults would.
	sub.SetPendingLimits(-1, 64<<20)
	// The subscription counts once the server has it: a round trip, so
	// that events other nodes publish after this returns are not lost (on
	// a loaded machine the first ones were).
	if err := q.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("natsq: subscribe to events: %w", err)
	}
	return func() { sub.Unsubscribe() }, nil
}

// origin names this queue instance in relayed events.
func (q *Queue) origin() string { return q.originID }

// newOrigin makes an id unique to one queue instance.
func newOrigin() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
