package residency

import "testing"

// runPass runs every block of c once with a no-op.
func runPass(t *testing.T, ex *Executor, c *Component) {
	t.Helper()
	for _, b := range c.Blocks {
		if err := ex.Run(b, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandoffPrefetchesIntoNext: during the last pass of the first
// component its prefetch window fetches the next component's first
// blocks, not its own first blocks again; Retire then leaves nothing of it
// on the device or the host tier.
func TestHandoffPrefetchesIntoNext(t *testing.T) {
	const n, width = 5, 24
	for _, tc := range []struct {
		name  string
		first ComponentPlan
		k     int // blocks of lo fetched ahead
	}{
		{"stream k=2", ComponentPlan{Placement: Stream, Prefetch: 2}, 2},
		{"stream k=1 disk", ComponentPlan{Placement: Stream, Prefetch: 1, Tier: TierDisk}, 1},
		{"resident (no prefetch)", ComponentPlan{Placement: Resident}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &Plan{Components: map[string]ComponentPlan{"hi": tc.first, "lo": {Placement: Stream, Prefetch: 2}}}
			r := newRig(t, 0, plan)
			hi, _, _ := component("hi", n, width)
			lo, _, _ := component("lo", n, width)
			for _, c := range []*Component{hi, lo} {
				if err := r.ex.Register(c); err != nil {
					t.Fatal(err)
				}
			}
			runPass(t, r.ex, hi)
			if err := r.ex.Handoff("hi", "lo"); err != nil {
				t.Fatal(err)
			}
			runPass(t, r.ex, hi)
			r.ex.mu.Lock()
			for i, b := range lo.Blocks {
				if fetched := b.ready != nil; fetched != (i < tc.k) {
					t.Errorf("lo block %d fetched %v before lo ran, want %v", i, fetched, i < tc.k)
				}
			}
			r.ex.mu.Unlock()
			r.ex.Retire("hi")
			r.ex.mu.Lock()
			for _, b := range hi.Blocks {
				if b.dev != nil || b.host != nil {
					t.Errorf("%s still holds memory after Retire (device %v, host %v)", b.Name, b.dev != nil, b.host != nil)
				}
			}
			r.ex.mu.Unlock()
			runPass(t, r.ex, lo)
			r.ex.Done("lo")
			if got := r.dev.Stats().Allocated; got != 0 {
				t.Errorf("%d bytes left on the device after both are done", got)
			}
		})
	}
}

func TestHandoffUnknownComponent(t *testing.T) {
	r := newRig(t, 0, nil)
	hi, _, _ := component("hi", 2, 8)
	if err := r.ex.Register(hi); err != nil {
		t.Fatal(err)
	}
	if err := r.ex.Handoff("hi", "nope"); err == nil {
		t.Error("handoff to an unregistered component accepted")
	}
	if err := r.ex.Handoff("nope", "hi"); err == nil {
		t.Error("handoff from an unregistered component accepted")
	}
}
