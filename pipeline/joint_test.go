package pipeline

import (
	"testing"

	"ferry/residency"
)

// TestMeterPeakOfSum: two runtimes that hold 4 MiB in turn peak at 4 MiB
// together, not at the 8 MiB their own peaks add up to; a cache one of
// them empties stops counting at once; Cap keeps their sum within its
// budget by emptying the other's cache.
func TestMeterPeakOfSum(t *testing.T) {
	const mib = 1 << 20
	newRT := func() *Runtime {
		rt, err := NewRuntime(Budget{}, &residency.Plan{Name: "resident", Components: map[string]residency.ComponentPlan{}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		return rt
	}
	a, b := newRT(), newRT()
	dev, host := NewMeter(), NewMeter()
	a.Join(dev, host)
	b.Join(dev, host)
	defer a.Join(nil, nil)
	defer b.Join(nil, nil)

	x, err := a.Device.Alloc(4*mib, "a")
	if err != nil {
		t.Fatal(err)
	}
	a.Device.Free(x)
	a.Device.EmptyCache()
	y, err := b.Device.Alloc(4*mib, "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Peak(); got != 4*mib {
		t.Errorf("joint peak %d, want %d (a's emptied cache counted?)", got, 4*mib)
	}
	if host.Peak() != 0 {
		t.Errorf("host peak %d, nothing allocated there", host.Peak())
	}

	// Under a cap of 6 MiB, a's cached 4 MiB go when b needs room.
	b.Device.Free(y)
	release := Cap(Budget{DeviceBytes: 6 * mib}, a, b)
	x, err = a.Device.Alloc(4*mib, "a again") // b's cached 4 MiB go first
	if err != nil {
		t.Fatalf("a under the cap: %v", err)
	}
	a.Device.Free(x)
	if _, err := b.Device.Alloc(5*mib, "b bigger"); err != nil {
		t.Fatalf("b under the cap: %v", err)
	}
	if sum := a.Device.Stats().Reserved + b.Device.Stats().Reserved; sum > 6*mib {
		t.Errorf("reserved %d together under a 6 MiB cap", sum)
	}
	release()
}
