package residency

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"ferry/trace"
)

// slowSource delays every read: copies take time, as they do for real.
type slowSource struct {
	*memSource
	delay time.Duration
}

func (s slowSource) Read(name string, off int64, dst []byte) error {
	time.Sleep(s.delay)
	return s.memSource.Read(name, off, dst)
}

func TestTrainingOrder(t *testing.T) {
	cases := []struct {
		n    int
		want []int
	}{
		{1, []int{0, 0}},
		{3, []int{0, 1, 2, 2, 1, 0}},
	}
	for _, tc := range cases {
		if got := TrainingOrder(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("TrainingOrder(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestOrderMustNameEveryBlock(t *testing.T) {
	for _, order := range [][]int{{0, 1}, {0, 1, 2, 3}, {0, -1, 1, 2}} {
		r := newRig(t, 0, nil)
		c, _, _ := component("den", 3, 8)
		c.Order = order
		if err := r.ex.Register(c); err == nil {
			t.Errorf("order %v over 3 blocks was accepted", order)
		}
	}
}

// TestTrainingOrderPrefetch streams a component through training steps
// (forward, then backward) with copies slower than nothing but faster
// than compute: every block must be on its way before it is needed, the
// blocks at the turns must not be loaded twice, and only the very first
// block may stall.
func TestTrainingOrderPrefetch(t *testing.T) {
	const n, width, steps = 5, 32, 2
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("k%d", k), func(t *testing.T) {
			r := newRig(t, 0, Uniform("t", ComponentPlan{Placement: Stream, Prefetch: k, Tier: TierDisk}, "den"))
			c, src, ws := component("den", n, width)
			c.Source = slowSource{src, time.Millisecond}
			c.Order = TrainingOrder(n)
			if err := r.ex.Register(c); err != nil {
				t.Fatal(err)
			}
			order := c.Order
			for s := range steps {
				for p, i := range order {
					phase := "forward"
					if p >= n {
						phase = "backward"
					}
					r.ex.SetPhase(phase)
					next := c.Blocks[order[(p+1)%len(order)]]
					err := r.ex.Run(c.Blocks[i], func() error {
						if ws[i].W == nil {
							return fmt.Errorf("block %d not bound", i)
						}
						r.ex.mu.Lock()
						onItsWay := next.ready != nil
						r.ex.mu.Unlock()
						if !onItsWay && !(s == steps-1 && p == len(order)-1) {
							return fmt.Errorf("step %d position %d (%s): the next block %s is not being loaded", s, p, phase, next.Name)
						}
						time.Sleep(20 * time.Millisecond) // compute outlasts a copy
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			r.ex.Done("den")
			loads := map[string]int{}
			waits := 0
			for _, sp := range r.rec.Spans() {
				switch sp.Kind {
				case trace.Copy:
					loads[sp.Name]++
				case trace.Wait:
					waits++
				}
			}
			// A block is kept while the next run's window would copy it
			// back: the turn (the last block runs twice in a row, and the
			// first from one step's backward to the next step's forward)
			// and the k blocks beside each turn, which run again within k
			// blocks. Those are loaded once a step (the first k+1 once
			// more, for the first forward), a block beside both turns
			// once; the others twice.
			for i, blk := range c.Blocks {
				want := 2 * steps
				switch {
				case i <= k && i >= n-1-k: // beside both turns: never leaves
					want = 1
				case i <= k:
					want = steps + 1
				case i >= n-1-k:
					want = steps
				}
				if got := loads[blk.Name]; got != want {
					t.Errorf("block %d loaded %d times, want %d", i, got, want)
				}
			}
			st0 := r.ex.Stats()
			if naive := steps * (2*n - 1); st0.Loads >= naive {
				t.Errorf("%d loads, no fewer than evicting after every run (%d)", st0.Loads, naive)
			}
			if waits > 1 {
				t.Errorf("%d stalls, want at most the first block's", waits)
			}
			st := r.ex.Stats()
			f, b := st.Phases["forward"], st.Phases["backward"]
			if f.Loads+b.Loads != st.Loads || f.CopyTime+b.CopyTime != st.CopyTime || f.CopyWait+b.CopyWait != st.CopyWait {
				t.Errorf("phase figures %+v + %+v do not add up to the totals %+v", f, b, st)
			}
			if f.Loads == 0 || b.Loads == 0 {
				t.Errorf("loads by phase: forward %d, backward %d; both phases load", f.Loads, b.Loads)
			}
		})
	}
}
