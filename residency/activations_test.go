package residency

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"ferry/backend/cpu"
	"ferry/dtype"
	"ferry/tensor"
)

// deviceTensor allocates a tensor of dt and shape on dev filled with a
// byte pattern.
func deviceTensor(t *testing.T, dev tensor.Device, seed byte, dt dtype.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := allocLike(dev, []*tensor.Tensor{tensor.FromF32(make([]float32, tensor.NumElems(shape)), shape...)}, "test")
	if err != nil {
		t.Fatal(err)
	}
	buf := x[0].Buffer()
	y, err := tensor.New(buf, dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := 0, y.Raw(); i < len(b); i++ {
		b[i] = seed + byte(i*7)
	}
	return y
}

// TestHostActivationsRoundTrip: every block comes back with its bytes,
// dtypes, shapes and nil entries, in reverse order with prefetching, and
// the device holds only the blocks being worked on.
func TestHostActivationsRoundTrip(t *testing.T) {
	for _, prefetch := range []bool{true, false} {
		dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
		s := NewHostActivations(dev, host)
		s.NoPrefetch = !prefetch
		const blocks = 4
		want := map[int][][]byte{}
		for i := range blocks {
			ts := []*tensor.Tensor{deviceTensor(t, dev, byte(i), dtype.F32, 3, 5), nil, deviceTensor(t, dev, byte(10*i), dtype.BF16, 2, 2, 3)}
			want[i] = [][]byte{slices.Clone(ts[0].Raw()), nil, slices.Clone(ts[2].Raw())}
			if err := s.Put(i, ts); err != nil {
				t.Fatal(err)
			}
			if a := dev.Stats().Allocated; a != 0 {
				t.Fatalf("device holds %d bytes after Put", a)
			}
		}
		per := host.Stats().Allocated / blocks
		for i := blocks - 1; i >= 0; i-- {
			ts, err := s.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != 3 || ts[1] != nil || ts[0].DType() != dtype.F32 || ts[2].DType() != dtype.BF16 ||
				!slices.Equal(ts[2].Shape(), []int{2, 2, 3}) {
				t.Fatalf("block %d came back as %v", i, ts)
			}
			for _, j := range []int{0, 2} {
				if !slices.Equal(ts[j].Raw(), want[i][j]) {
					t.Errorf("prefetch %v: block %d tensor %d changed on the way", prefetch, i, j)
				}
			}
			onDevice := int64(1)
			if prefetch && i > 0 {
				onDevice = 2 // and the next one, prefetched
			}
			if a := dev.Stats().Allocated; a != onDevice*per {
				t.Errorf("prefetch %v, block %d: device holds %d bytes, want %d blocks of %d", prefetch, i, a, onDevice, per)
			}
			tensor.Free(ts...)
		}
		st := s.Stats()
		if st.ToHostBytes != st.FromHostBytes || st.ToHostBytes == 0 {
			t.Errorf("moved %d bytes to the host, %d back", st.ToHostBytes, st.FromHostBytes)
		}
		if dev.Stats().Allocated != 0 || host.Stats().Allocated != 0 {
			t.Errorf("left %d bytes on the device, %d on the host", dev.Stats().Allocated, host.Stats().Allocated)
		}
	}
}

// TestHostActivationsBudgets: a host tier too small fails Put with its
// out-of-memory error (and frees the device tensors); a device too small
// for a prefetch brings the block back on demand instead; Release frees a
// prefetched block.
func TestHostActivationsBudgets(t *testing.T) {
	dev, host := cpu.NewDevice(0), cpu.NewDevice(1024)
	s := NewHostActivations(dev, host)
	err := s.Put(0, []*tensor.Tensor{deviceTensor(t, dev, 1, dtype.F32, 1024)})
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "host tier") {
		t.Errorf("Put on a 1 KiB host: %v", err)
	}
	if dev.Stats().Allocated != 0 || host.Stats().Allocated != 0 {
		t.Errorf("failed Put left %d bytes on the device, %d on the host", dev.Stats().Allocated, host.Stats().Allocated)
	}

	dev, host = cpu.NewDevice(4096+512), cpu.NewDevice(0)
	s = NewHostActivations(dev, host)
	for i := range 3 {
		if err := s.Put(i, []*tensor.Tensor{deviceTensor(t, dev, byte(i), dtype.F32, 1024)}); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := s.Get(2) // block 1's prefetch finds no room
	if err != nil {
		t.Fatal(err)
	}
	if s.Stats().PrefetchSkipped != 1 {
		t.Errorf("%d prefetches skipped, want 1", s.Stats().PrefetchSkipped)
	}
	tensor.Free(ts...)
	if ts, err = s.Get(1); err != nil {
		t.Fatalf("block 1 on demand: %v", err)
	}
	tensor.Free(ts...)
	s.Release(0) // prefetched by Get(1)
	if dev.Stats().Allocated != 0 || host.Stats().Allocated != 0 {
		t.Errorf("left %d bytes on the device, %d on the host", dev.Stats().Allocated, host.Stats().Allocated)
	}
	if _, err := s.Get(0); err == nil {
		t.Error("Get of a released block succeeded")
	}
}
