package trace

import (
	"strings"
	"testing"
	"time"
)

func TestCheckOrder(t *testing.T) {
	cp := func(name string, start, dur time.Duration) Span {
		return Span{Kind: Copy, Track: TrackCopy, Name: name, Start: start, Dur: dur}
	}
	run := func(name string, start, dur time.Duration) Span {
		return Span{Kind: Compute, Track: TrackCompute, Name: name, Start: start, Dur: dur}
	}
	cases := []struct {
		name  string
		spans []Span
		want  string // substring of the error; "" for none
	}{
		{"copy then compute", []Span{cp("b0", 0, 5), run("b0", 5, 5)}, ""},
		{"streamed twice", []Span{cp("b0", 0, 5), run("b0", 5, 5), cp("b0", 10, 5), run("b0", 20, 5)}, ""},
		{"resident reused", []Span{cp("b0", 0, 5), run("b0", 5, 5), run("b0", 10, 5)}, ""},
		{"never copied", []Span{run("rows", 0, 5)}, ""},
		{"nested computes", []Span{cp("vae", 0, 1), cp("vae.up", 0, 1), run("vae", 1, 10), run("vae.up", 2, 3)}, ""},
		{"compute before copy ends", []Span{cp("b0", 0, 5), run("b0", 4, 5)}, "overlaps its compute"},
		{"compute before any copy", []Span{run("b0", 0, 5), cp("b0", 6, 5)}, "no copy of the block before it"},
		{"copy during compute", []Span{cp("b0", 0, 5), run("b0", 5, 10), cp("b0", 8, 1)}, "overlaps its compute"},
		{"computes overlap", []Span{run("a", 0, 10), run("b", 5, 10)}, "overlaps compute"},
		{"negative duration", []Span{run("a", 0, -1)}, "duration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckOrder(c.spans)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("no error, want %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q, want %q", err, c.want)
			}
		})
	}
}

func TestPeakIsExactUnderResolution(t *testing.T) {
	r := New()
	r.SetResolution("x", 1000)
	for _, v := range []int64{0, 2000, 2500, 2100, 0} {
		r.Count("x", v)
	}
	if p, ok := r.Peak("x"); !ok || p != 2500 {
		t.Fatalf("peak %d %v, want 2500", p, ok)
	}
	for _, s := range r.Samples() {
		if s.Value == 2500 {
			t.Fatalf("sample 2500 kept, resolution should drop it")
		}
	}
	if _, ok := r.Peak("y"); ok {
		t.Fatalf("peak of an unrecorded counter")
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Annotate("k", "v")
	r.Count("x", 1)
	r.SampleRSS(time.Millisecond)()
	if _, ok := r.Peak("x"); ok || r.Annotations() != nil || r.Spans() != nil {
		t.Fatal("nil recorder recorded something")
	}
}

func TestPeakIn(t *testing.T) {
	r := New()
	r.samples = []Sample{
		{Name: "x", At: 1, Value: 10},
		{Name: "y", At: 2, Value: 99},
		{Name: "x", At: 3, Value: 30},
		{Name: "x", At: 5, Value: 20},
		{Name: "x", At: 7, Value: 50},
	}
	cases := []struct {
		from, to time.Duration
		want     int64
		ok       bool
	}{
		{0, 10, 50, true},
		{2, 6, 30, true}, // 10 in effect at 2, then 30, 20
		{4, 6, 30, true}, // 30 in effect at 4
		{5, 5, 20, true},
		{0, 0, 0, false},
		{8, 9, 50, true}, // still 50
	}
	for _, c := range cases {
		got, ok := r.PeakIn("x", c.from, c.to)
		if got != c.want || ok != c.ok {
			t.Errorf("PeakIn(%v, %v) = %d, %v; want %d, %v", c.from, c.to, got, ok, c.want, c.ok)
		}
	}
}
