package chart

import (
	"sort"

	"ferry/trace"
)

// Info is what a trace does not know: the title and the lines to compare
// the run against. Zero sizes are left out.
type Info struct {
	Title    string // model, shape and plan
	Subtitle string

	DeviceBudget        int64
	HostBudget          int64
	PredictedDevicePeak int64
	PredictedHostPeak   int64
}

// counterOrder lists the usual counters first, in this order; any others
// follow by name.
var counterOrder = []string{
	trace.CounterDeviceAllocated,
	trace.CounterDeviceReserved,
	trace.CounterHostAllocated,
	trace.CounterHostReserved,
	trace.CounterRSS,
}

// waitMinWidth keeps every stall at least this many pixels wide.
const waitMinWidth = 1

// FromRecorder builds chart data from a run's trace: a series per counter
// (with its exact peak), the phase spans (nested ones, like denoise steps,
// at depth 1), and lanes for compute, copy and wait spans. The budget and
// predicted-peak lines come from info.
func FromRecorder(rec *trace.Recorder, info Info) Data {
	d := Data{Title: info.Title, Subtitle: info.Subtitle}
	d.Series = seriesOf(rec)
	d.Levels = levelsOf(info)
	spans := rec.Spans()
	d.Phases = phasesOf(spans)
	d.Lanes = lanesOf(spans)
	for _, s := range spans {
		d.End = max(d.End, s.End().Seconds())
	}
	for _, s := range rec.Samples() {
		d.End = max(d.End, s.At.Seconds())
	}
	return d
}

// seriesOf makes one series per counter, in counterOrder then by name.
func seriesOf(rec *trace.Recorder) []Series {
	byName := map[string][]Point{}
	for _, s := range rec.Samples() {
		byName[s.Name] = append(byName[s.Name], Point{T: s.At.Seconds(), Bytes: s.Value})
	}
	rank := map[string]int{}
	for i, n := range counterOrder {
		rank[n] = i
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		ri, iok := rank[names[i]]
		rj, jok := rank[names[j]]
		if iok != jok {
			return iok
		}
		if iok {
			return ri < rj
		}
		return names[i] < names[j]
	})
	out := make([]Series, 0, len(names))
	for _, n := range names {
		peak, _ := rec.Peak(n)
		label := n
		if n == trace.CounterRSS {
			label = "RSS"
		}
		out = append(out, Series{Name: label, Points: byName[n], Peak: peak})
	}
	return out
}

// levelsOf lists the budget and prediction lines that info sets.
func levelsOf(info Info) []Level {
	var out []Level
	add := func(name string, bytes int64, kind LevelKind) {
		if bytes > 0 {
			out = append(out, Level{Name: name, Bytes: bytes, Kind: kind})
		}
	}
	add("device budget", info.DeviceBudget, Budget)
	add("host budget", info.HostBudget, Budget)
	add("predicted device peak", info.PredictedDevicePeak, Predicted)
	add("predicted host peak", info.PredictedHostPeak, Predicted)
	return out
}

// phasesOf takes the phase spans; a phase inside another is nested (depth
// counts the phases that contain it).
func phasesOf(spans []trace.Span) []Phase {
	var phases []trace.Span
	for _, s := range spans {
		if s.Kind == trace.Phase {
			phases = append(phases, s)
		}
	}
	var out []Phase
	for i, p := range phases {
		depth := 0
		for j, q := range phases {
			if i != j && q.Start <= p.Start && p.End() <= q.End() && (q.Dur > p.Dur || j < i) {
				depth++
			}
		}
		out = append(out, Phase{Name: p.Name, Start: p.Start.Seconds(), End: p.End().Seconds(), Depth: depth})
	}
	return out
}

// lanesOf sorts compute, copy and wait spans into their lanes.
func lanesOf(spans []trace.Span) []Lane {
	lanes := []Lane{{Name: "compute"}, {Name: "copy"}, {Name: "wait", MinWidth: waitMinWidth}}
	for _, s := range spans {
		i := -1
		switch s.Kind {
		case trace.Compute:
			i = 0
		case trace.Copy:
			i = 1
		case trace.Wait:
			i = 2
		}
		if i >= 0 {
			lanes[i].Spans = append(lanes[i].Spans, Span{Name: s.Name, Start: s.Start.Seconds(), End: s.End().Seconds()})
		}
	}
	return lanes
}
