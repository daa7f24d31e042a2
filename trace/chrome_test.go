package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// streamRun builds the spans of a two-step streamed run of three blocks by
// hand: each block's copy ends before its compute, block 0 stalls once.
func streamRun() *Recorder {
	r := New()
	add := func(k Kind, track, name string, start, dur time.Duration, bytes int64) {
		r.Add(Span{Kind: k, Track: track, Name: name, Start: start, Dur: dur, Bytes: bytes})
	}
	add(Phase, TrackPhase, "text_encoder", 0, 10*ms, 0)
	add(Phase, TrackPhase, "denoise", 10*ms, 80*ms, 0)
	add(Phase, TrackPhase, "vae", 90*ms, 10*ms, 0)
	t := 10 * ms
	for step := range 2 {
		add(Phase, TrackPhase, fmt.Sprintf("denoise step %d", step), t, 40*ms, 0)
		for b := range 3 {
			name := fmt.Sprintf("transformer.blocks.%d", b)
			add(Copy, TrackCopy, name, t, 5*ms, 1<<20)
			if b == 0 {
				add(Wait, TrackCompute, "wait "+name, t, 5*ms, 0)
			}
			add(Compute, TrackCompute, name, t+5*ms, 8*ms, 0)
			t += 13 * ms
		}
		t = 10*ms + time.Duration(step+1)*40*ms
	}
	return r
}

// chromeJSON is the file as a generic JSON document.
type chromeJSON struct {
	TraceEvents []map[string]any  `json:"traceEvents"`
	Metadata    map[string]string `json:"metadata"`
}

func writeAndParse(t *testing.T, r *Recorder) chromeJSON {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteChrome(&buf); err != nil {
		t.Fatal(err)
	}
	var doc chromeJSON
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("chrome trace is not valid JSON: %v", err)
	}
	return doc
}

// threadNames maps tid to the name its thread_name metadata gives.
func threadNames(t *testing.T, doc chromeJSON) map[float64]string {
	t.Helper()
	names := map[float64]string{}
	for _, ev := range doc.TraceEvents {
		if ev["ph"] == "M" && ev["name"] == "thread_name" {
			args, _ := ev["args"].(map[string]any)
			names[ev["tid"].(float64)], _ = args["name"].(string)
		}
	}
	return names
}

func TestWriteChromeIsWellFormed(t *testing.T) {
	r := streamRun()
	r.Count(CounterDeviceAllocated, 3<<20)
	r.Count(CounterDeviceReserved, 4<<20)
	r.Count(CounterHostReserved, 5<<20)
	r.Count(CounterRSS, 6<<20)
	r.Annotate("model", "wan-test")
	doc := writeAndParse(t, r)

	if doc.Metadata["model"] != "wan-test" {
		t.Errorf("metadata %v lacks the annotation", doc.Metadata)
	}
	names := threadNames(t, doc)
	for _, want := range []string{TrackPhase, TrackCompute, TrackCopy} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("no thread named %q in %v", want, names)
		}
	}
	lastTs, seenSpan := -1.0, false
	for i, ev := range doc.TraceEvents {
		ph, _ := ev["ph"].(string)
		if _, ok := ev["pid"].(float64); !ok {
			t.Fatalf("event %d has no pid: %v", i, ev)
		}
		if ph == "M" {
			if seenSpan {
				t.Fatalf("metadata event %d after timed events", i)
			}
			continue
		}
		seenSpan = true
		ts, ok := ev["ts"].(float64)
		if !ok || ts < lastTs {
			t.Fatalf("event %d ts %v out of order (previous %v)", i, ev["ts"], lastTs)
		}
		lastTs = ts
		if ph == "X" {
			if d, ok := ev["dur"].(float64); !ok || d < 0 {
				t.Fatalf("complete event %d has dur %v", i, ev["dur"])
			}
		}
	}
}

func TestWriteChromeHasEverySpanOnItsTrack(t *testing.T) {
	r := streamRun()
	doc := writeAndParse(t, r)
	names := threadNames(t, doc)
	type key struct{ name, cat, thread string }
	got := map[key]int{}
	for _, ev := range doc.TraceEvents {
		if ev["ph"] == "X" {
			got[key{ev["name"].(string), ev["cat"].(string), names[ev["tid"].(float64)]}]++
		}
	}
	spans := r.Spans()
	for _, s := range spans {
		k := key{s.Name, s.Kind.String(), s.Track}
		if got[k] == 0 {
			t.Errorf("span %v missing from the trace (have %v)", k, got)
		}
		got[k]--
	}
	for k, n := range got {
		if n != 0 {
			t.Errorf("span %v appears %d extra times", k, n)
		}
	}
}

func TestWriteChromeCounters(t *testing.T) {
	r := New()
	for i, v := range []int64{1 << 20, 3 << 20, 2 << 20} {
		r.Count(CounterDeviceAllocated, v)
		r.Count(CounterRSS, int64(i+1)<<30)
	}
	doc := writeAndParse(t, r)
	values := map[string][]float64{}
	for _, ev := range doc.TraceEvents {
		if ev["ph"] != "C" {
			continue
		}
		args, _ := ev["args"].(map[string]any)
		b, ok := args["bytes"].(float64)
		if !ok {
			t.Fatalf("counter event without bytes: %v", ev)
		}
		values[ev["name"].(string)] = append(values[ev["name"].(string)], b)
	}
	want := map[string][]float64{
		CounterDeviceAllocated: {1 << 20, 3 << 20, 2 << 20},
		CounterRSS:             {1 << 30, 2 << 30, 3 << 30},
	}
	for name, w := range want {
		if fmt.Sprint(values[name]) != fmt.Sprint(w) {
			t.Errorf("counter %s: %v, want %v", name, values[name], w)
		}
	}
}

func TestWriteChromeSplitsOverlappingSpans(t *testing.T) {
	r := New()
	r.Add(Span{Kind: Copy, Track: TrackCopy, Name: "a", Start: 0, Dur: 10 * ms})
	r.Add(Span{Kind: Copy, Track: TrackCopy, Name: "b", Start: 5 * ms, Dur: 10 * ms}) // overlaps a, not nested
	r.Add(Span{Kind: Copy, Track: TrackCopy, Name: "c", Start: 12 * ms, Dur: 1 * ms}) // after a: back on the main row
	doc := writeAndParse(t, r)
	names := threadNames(t, doc)
	thread := map[string]string{}
	for _, ev := range doc.TraceEvents {
		if ev["ph"] == "X" {
			thread[ev["name"].(string)] = names[ev["tid"].(float64)]
		}
	}
	want := map[string]string{"a": "copy", "b": "copy (2)", "c": "copy"}
	for n, w := range want {
		if thread[n] != w {
			t.Errorf("span %s on thread %q, want %q", n, thread[n], w)
		}
	}
}

func TestAssignLanesNesting(t *testing.T) {
	spans := []Span{
		{Name: "denoise", Start: 0, Dur: 100},
		{Name: "step 0", Start: 0, Dur: 50},
		{Name: "step 1", Start: 50, Dur: 50},
		{Name: "late", Start: 90, Dur: 20}, // crosses the end of denoise
	}
	got := assignLanes(spans)
	want := []int{0, 0, 0, 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lanes %v, want %v", got, want)
	}
}

func TestChromeOfRecordedRunPassesCheckOrder(t *testing.T) {
	if err := CheckOrder(streamRun().Spans()); err != nil {
		t.Fatal(err)
	}
}

func TestReadChromeRoundTrip(t *testing.T) {
	r := streamRun()
	r.Add(Span{Kind: Copy, Track: TrackCopy, Name: "overlapping", Start: 12 * ms, Dur: 7 * ms, Bytes: 99})
	r.Count(CounterHostReserved, 123456789)
	r.Annotate("plan", "stream")
	var buf bytes.Buffer
	if err := r.WriteChrome(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadChrome(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := r.Spans()
	if len(got.Spans) != len(want) {
		t.Fatalf("read %d spans, wrote %d", len(got.Spans), len(want))
	}
	count := map[Span]int{}
	for _, s := range want {
		count[s]++
	}
	for _, s := range got.Spans {
		count[s]--
	}
	for s, n := range count {
		if n != 0 {
			t.Errorf("span %+v: %d more written than read", s, n)
		}
	}
	if len(got.Samples) != 1 || got.Samples[0].Value != 123456789 || got.Samples[0].Name != CounterHostReserved {
		t.Errorf("samples %+v", got.Samples)
	}
	if got.Metadata["plan"] != "stream" {
		t.Errorf("metadata %v", got.Metadata)
	}
}

func TestReadChromeRejectsBadInput(t *testing.T) {
	cases := []struct{ name, doc string }{
		{"not json", "{"},
		{"span without dur", `{"traceEvents":[{"name":"t","ph":"M","tid":1,"args":{"name":"compute"}},{"name":"a","cat":"compute","ph":"X","ts":1,"tid":1}]}`},
		{"unknown kind", `{"traceEvents":[{"name":"t","ph":"M","tid":1,"args":{"name":"compute"}},{"name":"a","cat":"x","ph":"X","ts":1,"dur":1,"tid":1}]}`},
		{"unnamed thread", `{"traceEvents":[{"name":"a","cat":"compute","ph":"X","ts":1,"dur":1,"tid":7}]}`},
		{"counter without bytes", `{"traceEvents":[{"name":"c","ph":"C","ts":1,"args":{}}]}`},
	}
	for _, c := range cases {
		if _, err := ReadChrome(strings.NewReader(c.doc)); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func TestWriteChromeEscapesNames(t *testing.T) {
	names := []string{`quote " and \ backslash`, "tab\tnewline\n", "ünïcödé ×", "bad \xff utf8"}
	r := New()
	for i, n := range names {
		r.Add(Span{Kind: Compute, Track: TrackCompute, Name: n, Start: time.Duration(i) * ms, Dur: ms})
	}
	var buf bytes.Buffer
	if err := r.WriteChrome(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadChrome(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range got.Spans {
		want := strings.ToValidUTF8(names[i], "\uFFFD")
		if s.Name != want {
			t.Errorf("name %q came back as %q", want, s.Name)
		}
	}
}
