package residency

import (
	"fmt"
	"sync"
	"time"

	"ferry/tensor"
)

// HostActivations keeps training activations on the host tier between a
// block's forward and its backward (wan.ActivationStore; level 3 of the
// low-memory levels): Put copies a block's tensors to the host device and
// frees their device copies, Get brings them back. Get(i) then starts
// bringing back the next lower block it holds on a goroutine, so that the
// copy overlaps block i's backward (the backward walks the blocks in
// reverse).
//
// Both tiers are budgeted: the host copies are allocated on the host
// device and the copies back on the compute device, so a budget too small
// fails the Put or the Get with the device's out-of-memory error. The
// device copies of a prefetch are allocated when it starts, on the
// caller's goroutine, so that peaks do not depend on timing: during block
// i's backward the device holds blocks i and i−1.
//
// The copies move raw bytes between host-addressable buffers (the CPU
// devices); a store is used by one training pass at a time.
type HostActivations struct {
	dev, host tensor.Device
	// NoPrefetch makes Get copy back only the block asked for, when asked.
	NoPrefetch bool

	mu    sync.Mutex
	held  map[int]*stashed
	stats ActivationStats
}

// ActivationStats are what a HostActivations moved and waited for.
type ActivationStats struct {
	ToHostBytes   int64         `json:"to_host_bytes"`
	FromHostBytes int64         `json:"from_host_bytes"`
	ToHostTime    time.Duration `json:"to_host_ns"`
	// FetchWait is the time Get waited for copies back (a prefetch not
	// done yet, or a block fetched on demand).
	FetchWait time.Duration `json:"fetch_wait_ns"`
	// PrefetchSkipped counts prefetches the device budget had no room
	// for: those blocks came back on demand instead.
	PrefetchSkipped int `json:"prefetch_skipped"`
}

// stashed is one block in the store: its host copies and, once a fetch
// started, its device copies (ready when done is closed).
type stashed struct {
	host, dev []*tensor.Tensor
	done      chan struct{}
}

// NewHostActivations makes a store moving activations from device to host
// and back.
func NewHostActivations(device, host tensor.Device) *HostActivations {
	return &HostActivations{dev: device, host: host, held: map[int]*stashed{}}
}

// Stats reports what the store moved so far.
func (h *HostActivations) Stats() ActivationStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// HeldBytes is the host memory the store's copies take now.
func (h *HostActivations) HeldBytes() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, s := range h.held {
		for _, t := range s.host {
			if t != nil {
				n += t.Bytes()
			}
		}
	}
	return n
}

// Put copies block's tensors to the host and frees them on the device.
func (h *HostActivations) Put(block int, ts []*tensor.Tensor) error {
	defer tensor.Free(ts...)
	h.Release(block)
	t0 := time.Now()
	host, err := copyAll(h.host, ts, "activations (host)")
	if err != nil {
		return fmt.Errorf("block %d to the host tier: %w (raise --host-mem or keep activations on the device)", block, err)
	}
	h.mu.Lock()
	h.held[block] = &stashed{host: host}
	h.stats.ToHostBytes += bytesOf(host)
	h.stats.ToHostTime += time.Since(t0)
	h.mu.Unlock()
	return nil
}

// Get returns block's tensors on the device and starts fetching the next
// lower block held.
func (h *HostActivations) Get(block int) ([]*tensor.Tensor, error) {
	h.mu.Lock()
	s := h.held[block]
	delete(h.held, block)
	h.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("block %d: the store holds no activations for it", block)
	}
	t0 := time.Now()
	if s.done == nil {
		if err := h.fetch(s, false); err != nil {
			tensor.Free(s.host...)
			return nil, fmt.Errorf("block %d back from the host tier: %w", block, err)
		}
	}
	<-s.done
	wait := time.Since(t0)
	tensor.Free(s.host...)
	h.mu.Lock()
	h.stats.FetchWait += wait
	h.mu.Unlock()
	if !h.NoPrefetch {
		h.prefetchBelow(block)
	}
	return s.dev, nil
}

// Prefetch starts fetching block back to the device if the store holds
// it and is not fetching it yet (the backward's first block, while the
// out block's backward runs).
func (h *HostActivations) Prefetch(block int) {
	if h.NoPrefetch {
		return
	}
	h.prefetchBelow(block + 1)
}

// prefetchBelow starts fetching the highest block below block the store
// holds and is not fetching yet.
func (h *HostActivations) prefetchBelow(block int) {
	h.mu.Lock()
	var next *stashed
	best := -1
	for i, s := range h.held {
		if i < block && i > best && s.done == nil {
			best, next = i, s
		}
	}
	h.mu.Unlock()
	if next != nil && h.fetch(next, true) != nil {
		// No room on the device now: the block comes back when asked.
		h.mu.Lock()
		h.stats.PrefetchSkipped++
		h.mu.Unlock()
	}
}

// fetch allocates s's device copies (here, on the caller's goroutine, so
// that peaks are the same whatever the timing) and copies the bytes, on a
// goroutine when async. When the allocation fails s is left as it was.
func (h *HostActivations) fetch(s *stashed, async bool) error {
	dev, err := allocLike(h.dev, s.host, "activations")
	if err != nil {
		return err
	}
	s.dev, s.done = dev, make(chan struct{})
	run := func() {
		copyRaw(s.dev, s.host)
		h.mu.Lock()
		h.stats.FromHostBytes += bytesOf(s.host)
		h.mu.Unlock()
		close(s.done)
	}
	if async {
		go run()
		return nil
	}
	run()
	return nil
}

// Release frees what the store holds for block (waiting for a fetch in
// flight first).
func (h *HostActivations) Release(block int) {
	h.mu.Lock()
	s := h.held[block]
	delete(h.held, block)
	h.mu.Unlock()
	if s == nil {
		return
	}
	if s.done != nil {
		<-s.done
	}
	tensor.Free(s.host...)
	tensor.Free(s.dev...)
}

// copyAll copies ts (nil entries kept) into new tensors on dev.
func copyAll(dev tensor.Device, ts []*tensor.Tensor, tag string) ([]*tensor.Tensor, error) {
	out, err := allocLike(dev, ts, tag)
	if err != nil {
		return nil, err
	}
	copyRaw(out, ts)
	return out, nil
}

// allocLike allocates on dev a tensor of each non-nil t's dtype and shape;
// on failure it frees what it allocated.
func allocLike(dev tensor.Device, ts []*tensor.Tensor, tag string) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		buf, err := dev.Alloc(t.Bytes(), tag)
		if err == nil {
			out[i], err = tensor.New(buf, t.DType(), t.Shape()...)
			if err != nil {
				buf.Free()
			}
		}
		if err != nil {
			tensor.Free(out...)
			return nil, err
		}
	}
	return out, nil
}

// copyRaw copies each src's bytes into dst's.
func copyRaw(dst, src []*tensor.Tensor) {
	for i, s := range src {
		if s != nil {
			copy(dst[i].Raw(), s.Raw())
		}
	}
}

func bytesOf(ts []*tensor.Tensor) int64 {
	var n int64
	for _, t := range ts {
		if t != nil {
			n += t.Bytes()
		}
	}
	return n
}
