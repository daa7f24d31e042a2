//go:build linux

package trace

import (
	"testing"
	"time"
)

func TestSampleRSS(t *testing.T) {
	r := New()
	stop := r.SampleRSS(time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	stop()
	stop() // twice is safe
	p, ok := r.Peak(CounterRSS)
	if !ok || p < 1<<20 {
		t.Fatalf("rss peak %d %v: want at least 1 MiB", p, ok)
	}
	n := len(r.Samples())
	time.Sleep(5 * time.Millisecond)
	if len(r.Samples()) != n {
		t.Fatal("sampler still running after stop")
	}
}
