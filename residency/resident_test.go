package residency

import (
	"errors"
	"testing"
	"time"
)

// Demotion moves an idle block one tier down: off the device (its host
// copy stays, and the next run reloads from it without reading the disk),
// then off the host (the next run reads the checkpoint again).
func TestDemoteTierByTier(t *testing.T) {
	plan := Uniform("t", ComponentPlan{Placement: Onload, Tier: TierHost}, "c")
	r := newRig(t, 0, plan)
	c, src, ws := component("c", 3, 16)
	if err := r.ex.Register(c); err != nil {
		t.Fatal(err)
	}
	r.runAll(t, c, ws, 1)
	rs := r.ex.Resident()
	if len(rs) != 3 || rs[0].DeviceBytes == 0 || rs[0].HostBytes == 0 || rs[0].Busy {
		t.Fatalf("after a run: %+v", rs)
	}
	name := c.Blocks[1].Name
	before := r.dev.Stats().Allocated
	if n := r.ex.DemoteDevice(name); n != rs[1].DeviceBytes {
		t.Fatalf("DemoteDevice freed %d, block holds %d", n, rs[1].DeviceBytes)
	}
	// The allocator rounds sizes up: at least the block's bytes come back.
	if got := r.dev.Stats().Allocated; got > before-rs[1].DeviceBytes {
		t.Fatalf("device allocated %d after the demotion, want at most %d", got, before-rs[1].DeviceBytes)
	}
	if n := r.ex.DemoteDevice(name); n != 0 {
		t.Fatalf("a second demotion freed %d", n)
	}
	reads := src.reads
	r.runAll(t, c, ws, 1)
	if src.reads != reads {
		t.Fatalf("reload from the host copy read %d bytes from disk", src.reads-reads)
	}
	r.ex.DemoteDevice(name)
	if n := r.ex.DemoteHost(name); n != rs[1].HostBytes {
		t.Fatalf("DemoteHost freed %d, copy holds %d", n, rs[1].HostBytes)
	}
	if got := r.ex.Resident()[1]; got.DeviceBytes != 0 || got.HostBytes != 0 {
		t.Fatalf("after both demotions: %+v", got)
	}
	r.runAll(t, c, ws, 1)
	if src.reads == reads {
		t.Fatal("a block demoted to disk reloaded without reading the checkpoint")
	}
	if r.ex.DemoteDevice("no.such.block") != 0 || r.ex.DemoteHost("no.such.block") != 0 {
		t.Fatal("demoted an unknown block")
	}
}

// TestWaitReloadsABlockEvictedBeforeIt: a block demoted by another
// goroutine after Run queued it but before Run waited for it has no ready
// channel; the wait loads it again instead of blocking on a nil channel
// forever, and a closed executor says so.
func TestWaitReloadsABlockEvictedBeforeIt(t *testing.T) {
	plan := Uniform("t", ComponentPlan{Placement: Onload, Tier: TierHost}, "c")
	r := newRig(t, 0, plan)
	c, _, ws := component("c", 2, 16)
	if err := r.ex.Register(c); err != nil {
		t.Fatal(err)
	}
	r.runAll(t, c, ws, 1)
	b := c.Blocks[1]
	if r.ex.DemoteDevice(b.Name) == 0 {
		t.Fatal("the idle block was not demoted")
	}
	done := make(chan error, 1)
	go func() { done <- r.ex.wait(b.Name, []*Block{b}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait for an evicted block never returned")
	}
	r.ex.mu.Lock()
	ok := loaded([]*Block{b})
	r.ex.mu.Unlock()
	if !ok {
		t.Fatal("wait returned without loading the block")
	}
	r.ex.DemoteDevice(b.Name)
	r.ex.Close()
	if err := r.ex.wait(b.Name, []*Block{b}); !errors.Is(err, errClosed) {
		t.Fatalf("wait on a closed executor: %v, want %v", err, errClosed)
	}
}
