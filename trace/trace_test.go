package trace

import (
	"testing"
	"time"
)

func TestReset(t *testing.T) {
	r := New()
	r.Annotate("model", "m")
	r.Add(Span{Kind: Compute, Name: "a", Start: 0, Dur: time.Millisecond})
	r.Count("bytes", 100)
	time.Sleep(20 * time.Millisecond)
	r.Reset()
	if len(r.Spans()) != 0 {
		t.Errorf("spans after Reset: %v", r.Spans())
	}
	if _, ok := r.Peak("bytes"); ok {
		t.Error("a peak survived Reset")
	}
	if now := r.Now(); now >= 20*time.Millisecond {
		t.Errorf("Now after Reset is %v: the clock did not restart", now)
	}
	r.Count("bytes", 9)
	if v, _ := r.Peak("bytes"); v != 9 {
		t.Errorf("peak after Reset %d, want 9 (the peak before was 100)", v)
	}
	if got := r.Annotations()["model"]; got != "m" {
		t.Errorf("annotation after Reset %q, want m", got)
	}
}
