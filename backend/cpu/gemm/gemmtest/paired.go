package gemmtest

import (
	"slices"
	"testing"
	"time"

	"ferry/backend/cpu/gemm"
)

// Side is one of the two things Paired times: a name for its metrics, its
// floating-point operations per run, the run, and what to do after it,
// untimed (let OpenBLAS's threads stop spinning).
type Side struct {
	Name  string
	Flops float64
	Run   func()
	After func()
}

// Linear is g's product C[m×n] = A[m×k]·Bᵀ with B ([n, k], a Linear's
// weight) packed once, as Linear runs it: a Side named name.
func Linear(tb testing.TB, name string, g *gemm.Go, m, n, k int, a, b, c []float32) Side {
	pk, err := g.PackB(nil, true, n, k, b, k)
	if err != nil {
		tb.Fatal(err)
	}
	return Side{Name: name, Flops: 2 * float64(m) * float64(n) * float64(k), Run: func() {
		if err := g.SgemmPacked(false, m, 1, a, k, pk, 0, c, n); err != nil {
			tb.Fatal(err)
		}
	}}
}

// Paired times a and c alternately, once each per benchmark iteration,
// and reports their median GFLOP/s ("a-GFLOP/s") and the median over the
// pairs of a's rate over c's ("ratio"). A ratio taken pair by pair shrugs
// off the drifts and bursts of a shared machine, which separate runs of a
// and c each catch differently.
//
// Each timed run comes right after untimed runs of the same side lasting
// at least warmUp, as a model's products follow one another: both sides
// meet threads that are awake and caches that hold their own data.
// Without it the side that runs after the other's After pause pays alone
// for waking its threads, which took 2-3 ms on these virtual machines
// after 20 ms asleep (the scheduler placed the woken thread on the busy
// core): more than a whole product at 256 rows.
//
// It returns the two sides' median rates (GFLOP/s).
func Paired(b *testing.B, a, c Side) (rateA, rateC float64) {
	var ra, rc, ratio []float64
	for b.Loop() {
		ta := warmTimed(a)
		tc := warmTimed(c)
		ra = append(ra, a.Flops/ta/1e9)
		rc = append(rc, c.Flops/tc/1e9)
		ratio = append(ratio, ra[len(ra)-1]/rc[len(rc)-1])
	}
	rateA, rateC = median(ra), median(rc)
	b.ReportMetric(rateA, a.Name+"-GFLOP/s")
	b.ReportMetric(rateC, c.Name+"-GFLOP/s")
	b.ReportMetric(median(ratio), "ratio")
	return rateA, rateC
}

// warmUp is how long each side runs untimed before its timed run.
const warmUp = 20 * time.Millisecond

// warmTimed runs s untimed for at least warmUp, then times it (After
// follows only the timed run).
func warmTimed(s Side) float64 {
	for t0 := time.Now(); time.Since(t0) < warmUp; {
		s.Run()
	}
	return timed(s)
}

func timed(s Side) float64 {
	t0 := time.Now()
	s.Run()
	sec := time.Since(t0).Seconds()
	if s.After != nil {
		s.After()
	}
	return sec
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
