package trace

import (
	"errors"
	"fmt"
	"sort"
)

// maxProblems caps how many violations CheckOrder lists.
const maxProblems = 10

// CheckOrder verifies the residency contract on a run's spans:
//   - every span has a non-negative start and duration;
//   - compute spans on the compute track are disjoint or nested (one compute
//     stream; a block's function may run inner blocks);
//   - each compute of a block the copy worker ever moved starts after a copy
//     of that block has ended, and no copy of the block runs during the
//     compute (weights never move under a running block).
//
// Blocks never copied (no weights to move, e.g. gathered-row tables) need no
// copy. It lists up to ten violations.
func CheckOrder(spans []Span) error {
	var problems []error
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	copies := map[string][]Span{}
	var computes []Span
	for _, s := range spans {
		if s.Start < 0 || s.Dur < 0 {
			report("span %s %q has start %v and duration %v", s.Kind, s.Name, s.Start, s.Dur)
			continue
		}
		switch s.Kind {
		case Copy:
			copies[s.Name] = append(copies[s.Name], s)
		case Compute:
			computes = append(computes, s)
		}
	}
	sort.SliceStable(computes, func(i, j int) bool { return computes[i].Start < computes[j].Start })
	for _, cs := range copies {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Start < cs[j].Start })
	}
	checkComputeOverlap(computes, report)
	for _, c := range computes {
		checkCopied(c, copies[c.Name], report)
	}
	return errors.Join(problems...)
}

// checkComputeOverlap reports compute spans on the compute track that
// overlap without nesting: one compute stream runs one block at a time,
// though a block's function may run inner blocks.
func checkComputeOverlap(computes []Span, report func(string, ...any)) {
	var open []Span
	for _, c := range computes {
		if c.Track != TrackCompute {
			continue
		}
		for len(open) > 0 && open[len(open)-1].End() <= c.Start {
			open = open[:len(open)-1]
		}
		if n := len(open); n > 0 && c.End() > open[n-1].End() {
			p := open[n-1]
			report("compute %q (%v to %v) overlaps compute %q (%v to %v)", c.Name, c.Start, c.End(), p.Name, p.Start, p.End())
			continue
		}
		open = append(open, c)
	}
}

// checkCopied reports a compute that no finished copy of its block precedes,
// or during which a copy of its block ran.
func checkCopied(c Span, copies []Span, report func(string, ...any)) {
	if len(copies) == 0 {
		return
	}
	var last *Span
	for i := range copies {
		cp := &copies[i]
		if cp.Start < c.End() && cp.End() > c.Start {
			report("copy of %q (%v to %v) overlaps its compute (%v to %v)", c.Name, cp.Start, cp.End(), c.Start, c.End())
			return
		}
		if cp.End() <= c.Start {
			last = cp
		}
	}
	if last == nil {
		report("compute of %q at %v has no copy of the block before it (first copy ends at %v)", c.Name, c.Start, copies[0].End())
	}
}
