package tensor

import (
	"errors"
	"fmt"
	"unsafe"
)

// Device hands out memory with a hard capacity. A request that would take
// reserved memory past the capacity fails with an error wrapping
// ErrOutOfMemory; nothing ever overshoots silently.
type Device interface {
	// Name says what the memory is ("cpu", "cuda:0").
	Name() string
	// Alloc returns a buffer of at least n bytes. tag names the owner in
	// traces ("transformer.blocks.3", "activation").
	Alloc(n int64, tag string) (*Buffer, error)
	// Free returns b to the device's cache. Freeing nil or twice is a no-op.
	Free(b *Buffer)
	// Stats reports allocated, reserved and peak bytes, like torch.cuda.memory_stats.
	Stats() MemStats
	// ResetPeakStats sets the peaks to the current values.
	ResetPeakStats()
	// EmptyCache gives cached but unused memory back to the system.
	EmptyCache()
}

// ErrOutOfMemory is wrapped by every allocation that would exceed a capacity.
var ErrOutOfMemory = errors.New("out of memory")

// MemStats are a device's memory counters in bytes.
type MemStats struct {
	Capacity      int64 `json:"capacity_bytes"`
	Allocated     int64 `json:"allocated_bytes"`
	Reserved      int64 `json:"reserved_bytes"`
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	PeakReserved  int64 `json:"peak_reserved_bytes"`
	Allocs        int64 `json:"allocs"`
	Frees         int64 `json:"frees"`
}

// Buffer is a span of memory owned by a Device (or by the Go heap when
// Device is nil). On host-addressable devices Ptr points at the bytes.
type Buffer struct {
	Ptr    unsafe.Pointer
	Size   int64
	Device Device
	Tag    string
	// Handle is the owning device's private bookkeeping.
	Handle any
	freed  bool
}

// Bytes views the buffer as a byte slice. Only valid on host-addressable
// memory (the CPU device, the Go heap).
func (b *Buffer) Bytes() []byte {
	if b == nil || b.Size == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.Ptr), b.Size)
}

// Free releases the buffer to its device. Safe on nil and idempotent.
func (b *Buffer) Free() {
	if b == nil || b.freed {
		return
	}
	b.freed = true
	if b.Device != nil {
		b.Device.Free(b)
	}
}

// Freed reports whether Free has been called.
func (b *Buffer) Freed() bool { return b != nil && b.freed }

// HostBuffer wraps Go-heap bytes (inputs read from files, test data). It is
// not counted by any device.
func HostBuffer(data []byte) *Buffer {
	if len(data) == 0 {
		return &Buffer{}
	}
	return &Buffer{Ptr: unsafe.Pointer(&data[0]), Size: int64(len(data))}
}

// OOMError describes a failed allocation; it wraps ErrOutOfMemory.
type OOMError struct {
	Device    string
	Tag       string
	Requested int64
	Allocated int64
	Reserved  int64
	Capacity  int64
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("%s: out of memory allocating %s for %s (allocated %s, reserved %s, capacity %s)",
		e.Device, FormatBytes(e.Requested), e.Tag, FormatBytes(e.Allocated), FormatBytes(e.Reserved), FormatBytes(e.Capacity))
}

func (e *OOMError) Unwrap() error { return ErrOutOfMemory }

// FormatBytes prints n in the largest binary unit that keeps it >= 1 (1.50 GiB).
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit && f > -unit {
			return fmt.Sprintf("%.2f %s", f, u)
		}
	}
	return fmt.Sprintf("%.2f PiB", f/unit)
}
