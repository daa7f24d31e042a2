package cpu

import (
	"errors"
	"math/rand"
	"testing"

	"ferry/backend/cpu/arena"
	"ferry/tensor"
)

func TestDeviceCapacityIsHard(t *testing.T) {
	d := NewDevice(8 << 20)
	a, err := d.Alloc(5<<20, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Alloc(4<<20, "b"); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("allocating past capacity: got %v, want ErrOutOfMemory", err)
	}
	if s := d.Stats(); s.Reserved > 8<<20 || s.PeakReserved > 8<<20 {
		t.Fatalf("reserved %d / peak %d exceed capacity", s.Reserved, s.PeakReserved)
	}
	a.Free()
	b, err := d.Alloc(7<<20, "b")
	if err != nil {
		t.Fatalf("after free, 7 MiB in an 8 MiB device: %v", err)
	}
	b.Free()
	if s := d.Stats(); s.Allocated != 0 {
		t.Fatalf("allocated %d after freeing everything", s.Allocated)
	}
}

func TestDeviceStatsAndReuse(t *testing.T) {
	d := NewDevice(0)
	a, _ := d.Alloc(1000, "a")
	s := d.Stats()
	if s.Allocated != 1024 || s.Reserved != arena.SegmentRound {
		t.Fatalf("stats after 1000-byte alloc: %+v", s)
	}
	p := a.Ptr
	a.Free()
	a.Free() // idempotent
	b, _ := d.Alloc(900, "b")
	if b.Ptr != p {
		t.Errorf("freed block not reused")
	}
	if s := d.Stats(); s.Reserved != arena.SegmentRound || s.PeakAllocated != 1024 {
		t.Errorf("stats after reuse: %+v", s)
	}
	d.ResetPeakStats()
	if s := d.Stats(); s.PeakAllocated != s.Allocated {
		t.Errorf("peak not reset: %+v", s)
	}
	b.Free()
	d.EmptyCache()
	if s := d.Stats(); s.Reserved != 0 {
		t.Errorf("reserved %d after EmptyCache", s.Reserved)
	}
}

func TestDeviceRandomAllocFreeKeepsInvariants(t *testing.T) {
	d := NewDevice(64 << 20)
	rng := rand.New(rand.NewSource(1))
	var live []*tensor.Buffer
	for i := 0; i < 5000; i++ {
		if len(live) > 0 && rng.Intn(2) == 0 {
			j := rng.Intn(len(live))
			live[j].Free()
			live = append(live[:j], live[j+1:]...)
		} else {
			n := int64(rng.Intn(3 << 20))
			if rng.Intn(4) == 0 {
				n = int64(rng.Intn(4096))
			}
			b, err := d.Alloc(n, "x")
			if err != nil {
				if !errors.Is(err, tensor.ErrOutOfMemory) {
					t.Fatal(err)
				}
				continue
			}
			bs := b.Bytes()
			if len(bs) > 0 {
				bs[0], bs[len(bs)-1] = 1, 2 // must be writable end to end
			}
			live = append(live, b)
		}
		s := d.Stats()
		if s.Reserved > 64<<20 || s.Allocated > s.Reserved {
			t.Fatalf("step %d: %+v", i, s)
		}
	}
	for _, b := range live {
		b.Free()
	}
	if s := d.Stats(); s.Allocated != 0 {
		t.Fatalf("leak: %+v", s)
	}
}

func TestDeviceReclaimFreesRoom(t *testing.T) {
	d := NewDevice(4 << 20)
	held, _ := d.Alloc(3<<20, "idle component")
	calls := 0
	d.OnReclaim(func(need int64) bool {
		calls++
		if held != nil {
			held.Free()
			held = nil
			return true
		}
		return false
	})
	b, err := d.Alloc(3<<20, "new")
	if err != nil || calls != 1 {
		t.Fatalf("reclaim: err=%v calls=%d", err, calls)
	}
	b.Free()
}

// TestLargeSegmentsStartOnHugePages: with huge pages on (Linux), a segment
// of 2 MiB or more starts on a 2 MiB boundary, so that all of it can be
// backed by huge pages, and it is fully writable.
func TestLargeSegmentsStartOnHugePages(t *testing.T) {
	if !HugePages {
		t.Skip("huge pages are off here (not Linux, or FERRY_HUGEPAGES=0)")
	}
	d := NewDevice(0)
	for _, n := range []int64{2 << 20, 5<<20 + 4096, 33 << 20} {
		buf, err := d.Alloc(n, "big")
		if err != nil {
			t.Fatal(err)
		}
		if p := uintptr(buf.Ptr); p%(2<<20) != 0 {
			t.Errorf("%d-byte segment at %#x, not on a 2 MiB boundary", n, p)
		}
		b := buf.Bytes()
		b[0], b[len(b)-1] = 1, 2
		buf.Free()
	}
	d.EmptyCache()
}
