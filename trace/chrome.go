package trace

import (
	"encoding/json"
	"io"
)

// chromeEvent is one entry of the Chrome trace event format (the JSON that
// Perfetto and chrome://tracing open). Times are in microseconds.
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteChrome writes the spans and counters as a Chrome trace: one thread per
// track (compute, copy, phase), complete events for spans, counter events for
// samples.
func (r *Recorder) WriteChrome(w io.Writer) error {
	tids := map[string]int{TrackPhase: 1, TrackCompute: 2, TrackCopy: 3}
	var events []chromeEvent
	for name, tid := range tids {
		events = append(events, chromeEvent{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid, Args: map[string]any{"name": name}})
	}
	for _, s := range r.Spans() {
		tid, ok := tids[s.Track]
		if !ok {
			tid = len(tids) + 1
			tids[s.Track] = tid
			events = append(events, chromeEvent{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid, Args: map[string]any{"name": s.Track}})
		}
		ev := chromeEvent{Name: s.Name, Cat: s.Kind.String(), Ph: "X", Ts: us(s.Start), Dur: us(s.Dur), Pid: 1, Tid: tid}
		if s.Bytes > 0 {
			ev.Args = map[string]any{"bytes": s.Bytes}
		}
		events = append(events, ev)
	}
	for _, s := range r.Samples() {
		events = append(events, chromeEvent{Name: s.Name, Ph: "C", Ts: us(s.At), Pid: 1, Args: map[string]any{"bytes": s.Value}})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(map[string]any{"traceEvents": events, "displayTimeUnit": "ms"})
}

func us(d interface{ Nanoseconds() int64 }) float64 { return float64(d.Nanoseconds()) / 1e3 }
