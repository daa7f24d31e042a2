package parallel

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestForCoversEveryIndexOnce(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		p := New(workers)
		for _, n := range []int{0, 1, 7, 100, 1001} {
			hits := make([]atomic.Int32, n)
			p.For(n, 3, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("workers=%d n=%d: index %d visited %d times", workers, n, i, h)
				}
			}
		}
	}
}

func TestNestedForDoesNotDeadlock(t *testing.T) {
	p := New(2)
	var total atomic.Int64
	p.For(8, 1, func(lo, hi int) {
		for range hi - lo {
			p.For(100, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
	})
	if total.Load() != 800 {
		t.Fatalf("nested loops did %d items, want 800", total.Load())
	}
}

// BenchmarkRun times Run(2) over two chunks of busy work of 10 µs to 1 ms
// on two workers and reports the time beyond the work itself: a worker
// that has to be woken from sleep shows as overhead of about the chunk
// (the caller ran both chunks), one that was polling as a few µs.
func BenchmarkRun(b *testing.B) {
	p := New(2)
	for _, d := range []time.Duration{10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond} {
		b.Run(d.String(), func(b *testing.B) {
			for b.Loop() {
				p.Run(2, func(int) { busy(d) })
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)-float64(d.Microseconds()), "overhead-µs")
		})
	}
}

// busy keeps the core busy for d.
func busy(d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d; {
	}
}
