package trace

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chromeEvent is one entry of the Chrome trace event format (the JSON that
// Perfetto and chrome://tracing open). Times are in microseconds.
type chromeEvent struct {
	Name string
	Cat  string
	Ph   string
	Ts   float64
	Dur  float64 // complete ("X") events only
	Tid  int
	Args chromeArgs
}

// chromeArgs are the few arguments ferry writes; which ones appear depends
// on the event's phase and content (see appendArgs).
type chromeArgs struct {
	Name      string  // thread_name, process_name
	SortIndex int     // thread_sort_index
	Bytes     int64   // counters; copies when > 0
	GBps      float64 // copies with a duration
}

// chromePid is the one process every event belongs to.
const chromePid = 1

// trackOrder puts the well-known tracks first, top to bottom.
var trackOrder = map[string]int{TrackPhase: 0, TrackCompute: 1, TrackCopy: 2}

// WriteChrome writes the run as a Chrome trace: one thread per track (phase,
// compute, copy worker, then any others), a complete ("X") event for every
// span, named by its block or phase, and a counter ("C") event for every
// sample, whose value is in bytes. Spans of one track that overlap without
// nesting (which a viewer cannot draw on one row) go to an extra thread named
// after the track, so nothing is hidden. Events are written one by one, so a
// long run's trace costs little memory beyond the recorder's own.
func (r *Recorder) WriteChrome(w io.Writer) error {
	bw := bufio.NewWriter(w)
	err := writeChromeJSON(bw, r.chromeEvents(), r.Annotations())
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("trace: write chrome trace: %w", err)
	}
	return nil
}

// chromeEvents lists the trace's events in the order they are written.
func (r *Recorder) chromeEvents() []chromeEvent {
	threads, spanEvents := chromeSpans(r.Spans())
	samples := r.Samples()
	meta := threadMetadata(threads)
	events := make([]chromeEvent, 0, len(meta)+len(spanEvents)+len(samples))
	events = append(append(events, meta...), spanEvents...)
	for _, s := range samples {
		events = append(events, chromeEvent{Name: s.Name, Cat: "memory", Ph: "C", Ts: us(s.At), Args: chromeArgs{Bytes: s.Value}})
	}
	sortEvents(events)
	return events
}

// writeChromeJSON writes the top-level object one event at a time.
func writeChromeJSON(w io.Writer, events []chromeEvent, meta map[string]string) error {
	buf := []byte(`{"displayTimeUnit":"ms","traceEvents":[`)
	for i, ev := range events {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendEvent(append(buf, '\n'), ev)
		if _, err := w.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	buf = append(buf, "\n]"...)
	if len(meta) > 0 {
		m, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		buf = append(append(buf, `,"metadata":`...), m...)
	}
	_, err := w.Write(append(buf, "}\n"...))
	return err
}

// appendEvent writes one event as a JSON object.
func appendEvent(b []byte, ev chromeEvent) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, ev.Name)
	if ev.Cat != "" {
		b = append(b, `,"cat":`...)
		b = appendString(b, ev.Cat)
	}
	b = append(b, `,"ph":`...)
	b = appendString(b, ev.Ph)
	b = append(b, `,"ts":`...)
	b = strconv.AppendFloat(b, ev.Ts, 'f', -1, 64)
	if ev.Ph == "X" {
		b = append(b, `,"dur":`...)
		b = strconv.AppendFloat(b, ev.Dur, 'f', -1, 64)
	}
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, chromePid, 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(ev.Tid), 10)
	b = appendArgs(b, ev)
	return append(b, '}')
}

// appendArgs writes the arguments an event of this kind carries.
func appendArgs(b []byte, ev chromeEvent) []byte {
	a := ev.Args
	switch {
	case ev.Ph == "M" && ev.Name == "thread_sort_index":
		b = append(b, `,"args":{"sort_index":`...)
		b = strconv.AppendInt(b, int64(a.SortIndex), 10)
	case ev.Ph == "M":
		b = append(b, `,"args":{"name":`...)
		b = appendString(b, a.Name)
	case ev.Ph == "C" || a.Bytes > 0:
		b = append(b, `,"args":{"bytes":`...)
		b = strconv.AppendInt(b, a.Bytes, 10)
		if a.GBps > 0 {
			b = append(b, `,"GB/s":`...)
			b = strconv.AppendFloat(b, a.GBps, 'g', 4, 64)
		}
	default:
		return b
	}
	return append(b, '}')
}

// appendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced.
func appendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// thread is one row of the viewer: a track, or an overflow lane of one.
type thread struct {
	name string
	tid  int
}

// chromeSpans turns spans into complete events, assigning each to a thread.
func chromeSpans(spans []Span) ([]thread, []chromeEvent) {
	byTrack := map[string][]Span{}
	var tracks []string
	for _, s := range spans {
		if _, ok := byTrack[s.Track]; !ok {
			tracks = append(tracks, s.Track)
		}
		byTrack[s.Track] = append(byTrack[s.Track], s)
	}
	for t := range trackOrder {
		if _, ok := byTrack[t]; !ok {
			tracks = append(tracks, t) // always name the main tracks
		}
	}
	sort.SliceStable(tracks, func(i, j int) bool { return trackRank(tracks[i]) < trackRank(tracks[j]) })

	var threads []thread
	var events []chromeEvent
	for _, track := range tracks {
		ts := byTrack[track]
		lanes := assignLanes(ts)
		base := len(threads) + 1
		nLanes := 1
		for _, l := range lanes {
			nLanes = max(nLanes, l+1)
		}
		for l := range nLanes {
			name := track
			if l > 0 {
				name = fmt.Sprintf("%s (%d)", track, l+1)
			}
			threads = append(threads, thread{name: name, tid: base + l})
		}
		for i, s := range ts {
			events = append(events, spanEvent(s, base+lanes[i]))
		}
	}
	return threads, events
}

// trackRank orders tracks: the known ones first, the rest after them.
func trackRank(track string) int {
	if r, ok := trackOrder[track]; ok {
		return r
	}
	return len(trackOrder)
}

// spanEvent is the complete event of one span.
func spanEvent(s Span, tid int) chromeEvent {
	ev := chromeEvent{Name: s.Name, Cat: s.Kind.String(), Ph: "X", Ts: us(s.Start), Dur: us(s.Dur), Tid: tid}
	ev.Args.Bytes = s.Bytes
	if s.Bytes > 0 && s.Dur > 0 {
		ev.Args.GBps = float64(s.Bytes) / s.Dur.Seconds() / 1e9
	}
	return ev
}

// assignLanes gives each span (sorted by start) a lane such that spans in a
// lane are either disjoint or properly nested, as the viewers require.
func assignLanes(spans []Span) []int {
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		sa, sb := spans[order[a]], spans[order[b]]
		if sa.Start != sb.Start {
			return sa.Start < sb.Start
		}
		return sa.Dur > sb.Dur // parent before child
	})
	lanes := make([]int, len(spans))
	var open [][]Span // per lane, the stack of spans still open
	for _, i := range order {
		s := spans[i]
		placed := false
		for l := range open {
			stack := open[l]
			for len(stack) > 0 && stack[len(stack)-1].End() <= s.Start {
				stack = stack[:len(stack)-1]
			}
			open[l] = stack
			if len(stack) == 0 || s.End() <= stack[len(stack)-1].End() {
				open[l] = append(stack, s)
				lanes[i], placed = l, true
				break
			}
		}
		if !placed {
			open = append(open, []Span{s})
			lanes[i] = len(open) - 1
		}
	}
	return lanes
}

// threadMetadata names the process and its threads and fixes their order.
func threadMetadata(threads []thread) []chromeEvent {
	events := []chromeEvent{{Name: "process_name", Ph: "M", Args: chromeArgs{Name: "ferry"}}}
	for i, t := range threads {
		events = append(events,
			chromeEvent{Name: "thread_name", Ph: "M", Tid: t.tid, Args: chromeArgs{Name: t.name}},
			chromeEvent{Name: "thread_sort_index", Ph: "M", Tid: t.tid, Args: chromeArgs{SortIndex: i}})
	}
	return events
}

// sortEvents puts metadata first, then events by time, parents before the
// spans they contain.
func sortEvents(events []chromeEvent) {
	slices.SortStableFunc(events, func(a, b chromeEvent) int {
		if am, bm := a.Ph == "M", b.Ph == "M"; am != bm {
			if am {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.Ts, b.Ts); c != 0 {
			return c
		}
		return cmp.Compare(b.Dur, a.Dur)
	})
}

func us(d interface{ Nanoseconds() int64 }) float64 { return float64(d.Nanoseconds()) / 1e3 }
