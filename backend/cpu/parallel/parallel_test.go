package parallel

import (
	"sync/atomic"
	"testing"
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
