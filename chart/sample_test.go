package chart

import (
	"fmt"
	"time"

	"ferry/trace"
)

const gib = 1 << 30

// sampleRecorder builds, by hand, the trace of a small streamed run: a text
// encoder, two denoise steps of six streamed blocks (one stall each step),
// and a VAE decode, with device, host and RSS counters.
func sampleRecorder() *trace.Recorder {
	r := trace.New()
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	add := func(k trace.Kind, track, name string, start, dur float64, bytes int64) {
		r.Add(trace.Span{Kind: k, Track: track, Name: name, Start: sec(start), Dur: sec(dur), Bytes: bytes})
	}
	add(trace.Phase, trace.TrackPhase, "text_encoder", 0, 4, 0)
	add(trace.Phase, trace.TrackPhase, "denoise", 4, 24, 0)
	add(trace.Phase, trace.TrackPhase, "vae", 28, 4, 0)
	for i := range 4 {
		name := fmt.Sprintf("text_encoder.blocks.%d", i)
		add(trace.Copy, trace.TrackCopy, name, float64(i), 0.4, 1<<28)
		add(trace.Compute, trace.TrackCompute, name, float64(i)+0.5, 0.4, 0)
	}
	for step := range 2 {
		t0 := 4 + 12*float64(step)
		add(trace.Phase, trace.TrackPhase, fmt.Sprintf("denoise step %d", step), t0, 12, 0)
		for b := range 6 {
			name := fmt.Sprintf("transformer.blocks.%d", b)
			t := t0 + 2*float64(b)
			add(trace.Copy, trace.TrackCopy, name, t, 0.9, 1<<29)
			if b == 0 {
				add(trace.Wait, trace.TrackCompute, "wait "+name, t, 0.9, 0)
			}
			add(trace.Compute, trace.TrackCompute, name, t+1, 0.9, 0)
		}
	}
	return r
}

// sampleData is sampleRecorder's chart data with hand-placed counter points
// (a recorder stamps counters with the wall clock) and budgets.
func sampleData() Data {
	d := FromRecorder(sampleRecorder(), Info{
		Title:               "Wan2.1-T2V-1.3B 480x832x81, stream prefetch 1",
		Subtitle:            "device budget 6 GiB, host budget 48 GiB",
		DeviceBudget:        6 * gib,
		HostBudget:          48 * gib,
		PredictedDevicePeak: 5 * gib,
	})
	var alloc, reserved, host, rss []Point
	for i := range 33 {
		t := float64(i)
		a := int64(1+i%3) * gib
		alloc = append(alloc, Point{t, a})
		reserved = append(reserved, Point{t, a + gib/2})
		host = append(host, Point{t, 3 * gib})
		rss = append(rss, Point{t, a + 3*gib + gib/4})
	}
	d.Series = []Series{
		{Name: trace.CounterDeviceAllocated, Points: alloc},
		{Name: trace.CounterDeviceReserved, Points: reserved},
		{Name: trace.CounterHostReserved, Points: host},
		{Name: trace.CounterRSS, Points: rss},
	}
	return d
}
