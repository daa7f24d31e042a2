package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"time"
)

// Chrome is a Chrome trace read back: what WriteChrome wrote, for tests and
// tools that check a run from its --trace file.
type Chrome struct {
	Spans    []Span
	Samples  []Sample
	Metadata map[string]string
}

// chromeIn is the subset of an event that ReadChrome needs.
type chromeIn struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   *float64       `json:"ts"`
	Dur  *float64       `json:"dur"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

// overflowLane matches the names WriteChrome gives extra rows of a track.
var overflowLane = regexp.MustCompile(`^(.*) \([0-9]+\)$`)

// ReadChrome parses a trace written by WriteChrome. Spans come back on
// their tracks (overflow rows folded in), with their kind, and times
// rounded to the nanosecond.
func ReadChrome(r io.Reader) (*Chrome, error) {
	var doc struct {
		TraceEvents []chromeIn        `json:"traceEvents"`
		Metadata    map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("trace: read chrome trace: %w", err)
	}
	threads := map[int]string{}
	for _, ev := range doc.TraceEvents {
		if ev.Ph == "M" && ev.Name == "thread_name" {
			name, _ := ev.Args["name"].(string)
			if m := overflowLane.FindStringSubmatch(name); m != nil {
				name = m[1]
			}
			threads[ev.Tid] = name
		}
	}
	out := &Chrome{Metadata: doc.Metadata}
	for i, ev := range doc.TraceEvents {
		switch ev.Ph {
		case "X":
			s, err := readSpan(ev, threads)
			if err != nil {
				return nil, fmt.Errorf("trace: event %d: %w", i, err)
			}
			out.Spans = append(out.Spans, s)
		case "C":
			v, ok := ev.Args["bytes"].(float64)
			if ev.Ts == nil || !ok {
				return nil, fmt.Errorf("trace: event %d: counter %q without ts or bytes", i, ev.Name)
			}
			out.Samples = append(out.Samples, Sample{Name: ev.Name, At: fromUs(*ev.Ts), Value: int64(v)})
		}
	}
	return out, nil
}

// readSpan converts one complete event.
func readSpan(ev chromeIn, threads map[int]string) (Span, error) {
	if ev.Ts == nil || ev.Dur == nil {
		return Span{}, fmt.Errorf("complete event %q without ts or dur", ev.Name)
	}
	kind, ok := kindOf(ev.Cat)
	if !ok {
		return Span{}, fmt.Errorf("span %q has unknown category %q", ev.Name, ev.Cat)
	}
	track, ok := threads[ev.Tid]
	if !ok {
		return Span{}, fmt.Errorf("span %q on unnamed thread %d", ev.Name, ev.Tid)
	}
	s := Span{Kind: kind, Track: track, Name: ev.Name, Start: fromUs(*ev.Ts), Dur: fromUs(*ev.Dur)}
	if b, ok := ev.Args["bytes"].(float64); ok {
		s.Bytes = int64(b)
	}
	return s, nil
}

// kindOf is the inverse of Kind.String.
func kindOf(cat string) (Kind, bool) {
	for k := Compute; k <= Phase; k++ {
		if k.String() == cat {
			return k, true
		}
	}
	return 0, false
}

func fromUs(us float64) time.Duration { return time.Duration(math.Round(us * 1e3)) }
