package server

import (
	"encoding/json"
	"sync"
)

// Event is one Server-Sent Event of a job: progress, a phase change, or
// the one terminal event (completed, failed, cancelled).
type Event struct {
	ID   int             `json:"-"`
	Type string          `json:"-"`
	Data json.RawMessage `json:"-"`
}

// eventData is what every event carries.
type eventData struct {
	ID       string    `json:"id"`
	Status   string    `json:"status"`
	Phase    string    `json:"phase,omitempty"`
	Progress float64   `json:"progress"`
	Done     int       `json:"done,omitempty"`
	Total    int       `json:"total,omitempty"`
	Error    *jobError `json:"error,omitempty"`
}

type jobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// hub keeps each job's events in memory so a client can replay them with
// Last-Event-ID, and wakes the streams that follow a job. A log holds at
// most one terminal event: later ones are dropped.
type hub struct {
	mu   sync.Mutex
	logs map[string]*eventLog
	// relay, when set, carries the events published here to the other
	// processes of a NATS deployment (see eventRelay).
	relay func(id, typ string, data []byte) error
}

// eventRelay is a queue that spans processes (server/natsq): the events of
// a job running on one worker reach the API node its client follows it on.
// Events that arrive through it are not relayed again.
type eventRelay interface {
	PublishEvent(id, typ string, data []byte) error
	SubscribeEvents(fn func(id, typ string, data []byte)) (stop func(), err error)
}

type eventLog struct {
	events   []Event
	terminal bool
	wake     chan struct{}
}

// maxEvents bounds one job's log; progress past it keeps only the newest
// half (the terminal event always fits).
const maxEvents = 4096

func newHub() *hub { return &hub{logs: map[string]*eventLog{}} }

func (h *hub) log(id string) *eventLog {
	l, ok := h.logs[id]
	if !ok {
		l = &eventLog{wake: make(chan struct{})}
		h.logs[id] = l
	}
	return l
}

// publish appends an event (and relays it); it reports false after the
// terminal one.
func (h *hub) publish(id, typ string, d eventData) bool {
	b, _ := json.Marshal(d)
	if !h.add(id, typ, b) {
		return false
	}
	if h.relay != nil {
		h.relay(id, typ, b)
	}
	return true
}

// add appends an encoded event; it reports false after the terminal one.
func (h *hub) add(id, typ string, b []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.log(id)
	if l.terminal {
		return false
	}
	next := 1
	if n := len(l.events); n > 0 {
		next = l.events[n-1].ID + 1
	}
	if len(l.events) >= maxEvents {
		l.events = append([]Event(nil), l.events[len(l.events)/2:]...)
	}
	l.events = append(l.events, Event{ID: next, Type: typ, Data: b})
	l.terminal = isTerminal(typ)
	close(l.wake)
	l.wake = make(chan struct{})
	return true
}

func isTerminal(typ string) bool {
	return typ == "completed" || typ == "failed" || typ == "cancelled"
}

// since returns the events after id, whether the log has ended, and a
// channel closed on the next publish.
func (h *hub) since(id string, after int) ([]Event, bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.log(id)
	var out []Event
	for _, e := range l.events {
		if e.ID > after {
			out = append(out, e)
		}
	}
	return out, l.terminal, l.wake
}

// forget drops a job's log (deleted jobs).
func (h *hub) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.logs, id)
}
