// Package trace records what happened during a run: spans of compute, copy
// and wait on named tracks, and counters (device allocated/reserved, host
// bytes). It is the evidence behind the report's measured figures and the
// Chrome trace file.
//
// A nil *Recorder is valid and records nothing, so callers need no checks.
package trace

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Kind classifies a span.
type Kind uint8

// The span kinds.
const (
	Compute Kind = iota // a block's computation
	Copy                // moving weights between tiers (with the dtype cast)
	Wait                // compute stalled until a copy finished
	Phase               // a pipeline phase (text encoder, denoise, vae)
)

func (k Kind) String() string {
	return [...]string{"compute", "copy", "wait", "phase"}[k]
}

// Tracks: compute spans go on the compute track, copies on the copy worker's.
const (
	TrackCompute = "compute"
	TrackCopy    = "copy"
	TrackPhase   = "phase"
)

// Counter names the runtime records (pipeline feeds the device and host
// allocators' stats into these; SampleRSS feeds CounterRSS).
const (
	CounterDeviceAllocated = "device allocated"
	CounterDeviceReserved  = "device reserved"
	CounterHostAllocated   = "host allocated"
	CounterHostReserved    = "host reserved"
	CounterRSS             = "rss"
)

// Span is a closed interval on a track.
type Span struct {
	Kind  Kind
	Track string
	Name  string
	Start time.Duration // since the recorder started
	Dur   time.Duration
	Bytes int64 // bytes moved, for copies
}

// End is Start+Dur.
func (s Span) End() time.Duration { return s.Start + s.Dur }

// Sample is one value of a counter at a time.
type Sample struct {
	Name  string
	At    time.Duration
	Value int64
}

// Recorder collects spans and counter samples; safe for concurrent use.
type Recorder struct {
	start atomic.Pointer[time.Time] // Reset moves it while others read it

	mu       sync.Mutex
	spans    []Span
	samples  []Sample
	last     map[string]int64
	minDelta map[string]int64
	peak     map[string]int64
	meta     map[string]string
}

// New starts a recorder; times are relative to now.
func New() *Recorder {
	r := &Recorder{
		last:     map[string]int64{},
		minDelta: map[string]int64{},
		peak:     map[string]int64{},
		meta:     map[string]string{},
	}
	now := time.Now()
	r.start.Store(&now)
	return r
}

// Reset starts the recorder again for a new run on the same objects (a
// server's resident runtime between jobs): spans, samples and peaks are
// dropped and times count from now; counter resolutions and annotations
// stay. Spans still open keep their old start, so call it between runs.
func (r *Recorder) Reset() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.start.Store(&now)
	r.spans, r.samples = nil, nil
	r.last, r.peak = map[string]int64{}, map[string]int64{}
}

// Now is the time since the recorder started.
func (r *Recorder) Now() time.Duration {
	if r == nil {
		return 0
	}
	return time.Since(*r.start.Load())
}

// Begin opens a span and returns the function that closes it.
func (r *Recorder) Begin(kind Kind, track, name string, bytes int64) func() {
	if r == nil {
		return func() {}
	}
	t0 := r.Now()
	return func() {
		r.Add(Span{Kind: kind, Track: track, Name: name, Start: t0, Dur: r.Now() - t0, Bytes: bytes})
	}
}

// Add records a finished span.
func (r *Recorder) Add(s Span) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
}

// SetResolution drops samples of counter name that differ from the last
// recorded value by less than delta (keeps traces of long runs small). The
// peaks are still exact: see Peak.
func (r *Recorder) SetResolution(name string, delta int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.minDelta[name] = delta
	r.mu.Unlock()
}

// Count records the value of a counter now.
func (r *Recorder) Count(name string, v int64) {
	if r == nil {
		return
	}
	at := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.peak[name]; !ok || v > p {
		r.peak[name] = v
	}
	last, seen := r.last[name]
	if seen {
		d := v - last
		if d < 0 {
			d = -d
		}
		if d < r.minDelta[name] || d == 0 {
			return
		}
	}
	r.last[name] = v
	r.samples = append(r.samples, Sample{Name: name, At: at, Value: v})
}

// Peak is the largest value counter name ever had, exact even when
// SetResolution dropped samples; ok is false for a counter never recorded.
func (r *Recorder) Peak(name string) (v int64, ok bool) {
	if r == nil {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok = r.peak[name]
	return v, ok
}

// Annotate attaches a key/value pair to the run (model, shape, plan); the
// Chrome trace carries them as metadata.
func (r *Recorder) Annotate(key, value string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.meta[key] = value
	r.mu.Unlock()
}

// Annotations returns a copy of the key/value pairs set with Annotate.
func (r *Recorder) Annotations() map[string]string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.meta))
	for k, v := range r.meta {
		out[k] = v
	}
	return out
}

// Spans returns a copy of the spans sorted by start time.
func (r *Recorder) Spans() []Span {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	out := append([]Span(nil), r.spans...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Samples returns a copy of the counter samples in time order.
func (r *Recorder) Samples() []Sample {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sample(nil), r.samples...)
}

// Total sums the durations of spans of a kind.
func (r *Recorder) Total(kind Kind) time.Duration {
	var t time.Duration
	for _, s := range r.Spans() {
		if s.Kind == kind {
			t += s.Dur
		}
	}
	return t
}

// BytesCopied sums the bytes of copy spans.
func (r *Recorder) BytesCopied() int64 {
	var n int64
	for _, s := range r.Spans() {
		if s.Kind == Copy {
			n += s.Bytes
		}
	}
	return n
}

// PeakIn is the largest value counter name had in [from, to], counting the
// value in effect at from. It is built from the kept samples, so it is exact
// to the counter's resolution (see SetResolution); ok is false when the
// counter has no value in the window. Use it for per-phase peaks (the
// denoise phase's device peak is the denoiser's).
func (r *Recorder) PeakIn(name string, from, to time.Duration) (peak int64, ok bool) {
	for _, s := range r.Samples() {
		if s.Name != name || s.At > to {
			continue
		}
		if s.At <= from {
			peak, ok = s.Value, true // the latest value before the window
			continue
		}
		if !ok || s.Value > peak {
			peak, ok = s.Value, true
		}
	}
	return peak, ok
}
