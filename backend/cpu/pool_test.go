package cpu

import (
	"errors"
	"testing"

	"ferry/tensor"
)

// TestPoolCapsTheSum: two devices in a pool of 6 MiB reserve at most that
// together; a segment the pool has no room for takes the cached empty
// segments of either member first, and fails with out of memory only when
// the live bytes leave no room, saying the pool's figures. After Leave,
// the devices' segments no longer count.
func TestPoolCapsTheSum(t *testing.T) {
	const mib = 1 << 20
	a, b := NewDevice(0), NewDevice(0)
	defer a.EmptyCache()
	defer b.EmptyCache()
	held, err := a.Alloc(2*mib, "weights") // before the pool: counted when it joins
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool(6*mib, a, b)
	if p.Used() != a.Stats().Reserved {
		t.Fatalf("pool counts %d at the start, device a reserves %d", p.Used(), a.Stats().Reserved)
	}
	act, err := a.Alloc(2*mib, "activation")
	if err != nil {
		t.Fatal(err)
	}
	a.Free(act) // cached in a, still reserved
	if got := a.Stats().Reserved + b.Stats().Reserved; got != p.Used() || got != 4*mib {
		t.Fatalf("reserved %d in all, pool %d; want them equal, a's cache included", got, p.Used())
	}
	// b needs room that only a's cache can give.
	x, err := b.Alloc(3*mib, "next phase")
	if err != nil {
		t.Fatalf("b: %v (a reserves %d, b %d, pool %d)", err, a.Stats().Reserved, b.Stats().Reserved, p.Used())
	}
	if sum := a.Stats().Reserved + b.Stats().Reserved; sum > 6*mib || sum != p.Used() {
		t.Fatalf("reserved %d in all (pool %d), past the pool's 6 MiB", sum, p.Used())
	}
	// Live bytes leave no room: out of memory, and nothing past the cap.
	_, err = b.Alloc(2*mib, "too much")
	var oom *tensor.OOMError
	if !errors.Is(err, tensor.ErrOutOfMemory) || !errors.As(err, &oom) || oom.Capacity != 6*mib || oom.Reserved != 5*mib {
		t.Fatalf("an allocation past the pool: %v, want out of memory at the pool's 5 of 6 MiB", err)
	}
	if sum := a.Stats().Reserved + b.Stats().Reserved; sum > 6*mib {
		t.Fatalf("reserved %d in all after a refusal", sum)
	}
	b.Free(x)
	a.Free(held)
	p.Leave()
	y, err := b.Alloc(8*mib, "after the pool")
	if err != nil {
		t.Fatalf("after Leave: %v", err)
	}
	b.Free(y)
	b.EmptyCache()
	if p.Used() != 5*mib {
		t.Errorf("the pool counted %d after Leave, want the 5 MiB it had", p.Used())
	}
}
