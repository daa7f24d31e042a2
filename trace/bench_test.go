package trace

import (
	"fmt"
	"testing"
	"time"
)

// countingWriter counts the bytes written.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkWriteChrome writes the trace of a long run: 40 steps of 40
// streamed blocks (a copy, a compute and a phase span each) and 80,000
// counter samples.
func BenchmarkWriteChrome(b *testing.B) {
	r := New()
	for k := range 1600 {
		t := time.Duration(k) * 375 * time.Millisecond
		name := fmt.Sprintf("transformer.blocks.%d", k%40)
		r.Add(Span{Kind: Copy, Track: TrackCopy, Name: name, Start: t, Dur: 300 * time.Millisecond, Bytes: 1 << 28})
		r.Add(Span{Kind: Compute, Track: TrackCompute, Name: name, Start: t + 300*time.Millisecond, Dur: 70 * time.Millisecond})
	}
	for i := range 80000 {
		r.samples = append(r.samples, Sample{Name: CounterDeviceAllocated, At: time.Duration(i) * 7 * time.Millisecond, Value: int64(i) << 20})
	}
	var w countingWriter
	for b.Loop() {
		w.n = 0
		if err := r.WriteChrome(&w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(w.n), "file-bytes")
}
