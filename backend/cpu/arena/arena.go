// Package arena is the caching allocator's bookkeeping, without memory:
// segments, the blocks they are split into, size classes, the free list,
// coalescing and giving empty segments back. The CPU device runs it over
// mmap'd memory; the planner runs the same code over nothing, so that its
// predicted allocated and reserved bytes follow the device's exactly.
//
// The policy is in the spirit of PyTorch's caching allocator: small
// requests share 2 MiB segments; a large request gets a segment of its own,
// rounded up to its size class (at most 1/8 more), that is never split, and
// freed blocks are cached for reuse (a cached large segment serves its own
// class, or one up to a third smaller: ReuseSlack). Because a large segment
// only ever holds one block, a free large block is an empty segment that
// can be given back when the capacity is reached: under a hard budget the
// cache cannot fragment into pieces too small for the next large tensor.
package arena

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math/bits"
	"sort"
)

// Sizes, in bytes.
const (
	Align        = 512     // every request is rounded up to this
	SmallLimit   = 1 << 20 // requests below share segments
	SegmentRound = 2 << 20 // a small segment's size
	PageSize     = 4096
)

// ErrFull is returned when a request does not fit the capacity even after
// the empty segments were given back.
var ErrFull = errors.New("arena: capacity reached")

// Segment is one mapping.
type Segment struct {
	Base, Size int64
	// seq numbers segments in the order they were mapped. Equal free
	// blocks are taken in (seq, offset) order, not by address: mmap hands
	// out addresses top-down and a model numbers them bottom-up, and the
	// planner's arena over nothing must choose the same blocks as the
	// device's.
	seq   int64
	Used  int64 // bytes held by allocated blocks
	Large bool  // one block, never split
	Mem   any   // the owner's memory, if any
	// first is the segment's first block: it survives every split and
	// merge (a merge keeps the earlier block), so the blocks can be walked.
	first *Block
}

// Block is a span inside a segment; neighbours are linked for coalescing.
type Block struct {
	Seg       *Segment
	Off, Size int64
	allocated bool
	// held is what an allocated block counts in Allocated: its size, or
	// for a large request in a larger cached segment (ReuseSlack) the
	// request's size class, so that what tensors take does not depend on
	// which segments happened to be cached.
	held       int64
	prev, next *Block
}

// Arena is one device's allocator state. It is not safe for concurrent
// use: the owner locks.
type Arena struct {
	Capacity int64 // on reserved bytes; <= 0: none
	// Map provides a new segment's memory: its base address (any unique
	// numbers for a model) and the owner's handle. Unmap gives it back.
	Map   func(size int64) (base int64, mem any, err error)
	Unmap func(s *Segment)

	Allocated, Reserved         int64
	PeakAllocated, PeakReserved int64
	Mapped                      int64 // bytes ever mapped (first touches)

	segs    []*Segment
	free    []*Block // cached free blocks, sorted by size, segment seq, offset
	nextSeq int64
}

// Round is the size a request of n bytes takes.
func Round(n int64) int64 { return roundUp(max(n, 1), Align) }

// Alloc returns a block for size bytes (already Round'ed).
func (a *Arena) Alloc(size int64) (*Block, error) {
	if b := a.takeFree(size); b != nil {
		return a.use(b, size), nil
	}
	seg := int64(SegmentRound)
	large := size >= SmallLimit
	if large {
		seg = SizeClass(size)
	}
	if !a.fits(seg) {
		a.ReleaseEmpty()
	}
	if !a.fits(seg) && !a.fits(roundUp(size, PageSize)) {
		return nil, ErrFull
	}
	if !a.fits(seg) {
		seg = roundUp(size, PageSize) // near the cap: no rounding slack
	}
	base, mem, err := a.Map(seg)
	if err != nil {
		return nil, err
	}
	a.nextSeq++
	s := &Segment{Base: base, Size: seg, Large: large, Mem: mem, seq: a.nextSeq}
	s.first = &Block{Seg: s, Size: seg}
	a.segs = append(a.segs, s)
	a.Reserved += seg
	a.Mapped += seg
	a.PeakReserved = max(a.PeakReserved, a.Reserved)
	return a.use(s.first, size), nil
}

// Free returns b to the cache, merging it with free neighbours. It reports
// the bytes b held (0 when it was not allocated).
func (a *Arena) Free(b *Block) int64 {
	if b == nil || !b.allocated {
		return 0
	}
	size := b.held
	b.allocated = false
	b.Seg.Used -= b.held
	a.Allocated -= b.held
	if n := b.next; n != nil && !n.allocated {
		a.removeFree(n)
		b.Size += n.Size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
	}
	if p := b.prev; p != nil && !p.allocated {
		a.removeFree(p)
		p.Size += b.Size
		p.next = b.next
		if b.next != nil {
			b.next.prev = p
		}
		b = p
	}
	a.insertFree(b)
	return size
}

// Signature hashes what of the arena's layout decides how it serves
// requests from now on: the small segments in mapping order with their
// blocks (offset, size, allocated or free), and how many large segments
// of each size are in use and how many are cached. Which of two cached
// large segments of one size a request takes changes no count, so large
// segments enter by number, not identity: states that differ only in
// which of them hold the live tensors (a VAE cache slot's frames moving
// between cached segments chunk after chunk) hash alike. The planner
// compares signatures to find where a repeating script (a VAE chunk)
// reaches its steady state.
func (a *Arena) Signature() uint64 {
	h := fnv.New64a()
	var buf [8]byte
	put := func(v int64) {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	type class struct {
		size int64
		used bool
	}
	large := map[class]int64{}
	for _, s := range a.segs {
		if s.Large {
			large[class{s.Size, s.Used > 0}]++
			continue
		}
		put(s.Size)
		for b := s.first; b != nil; b = b.next {
			used := int64(0)
			if b.allocated {
				used = 1
			}
			put(b.Off)
			put(b.Size)
			put(used)
		}
	}
	put(-1)
	classes := make([]class, 0, len(large))
	for c := range large {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool {
		x, y := classes[i], classes[j]
		return x.size < y.size || (x.size == y.size && !x.used && y.used)
	})
	for _, c := range classes {
		used := int64(0)
		if c.used {
			used = 1
		}
		put(c.size)
		put(used)
		put(large[c])
	}
	return h.Sum64()
}

// ReleaseEmpty gives back every segment with nothing allocated in it.
func (a *Arena) ReleaseEmpty() {
	kept := a.segs[:0]
	for _, s := range a.segs {
		if s.Used != 0 {
			kept = append(kept, s)
			continue
		}
		free := a.free[:0]
		for _, b := range a.free {
			if b.Seg != s {
				free = append(free, b)
			}
		}
		a.free = free
		a.Reserved -= s.Size
		if a.Unmap != nil {
			a.Unmap(s)
		}
	}
	for i := len(kept); i < len(a.segs); i++ {
		a.segs[i] = nil
	}
	a.segs = kept
}

// SizeClass rounds a large request up to a multiple of 1/8 of its power of
// two (at least 64 KiB), so that tensors of nearly equal size share cached
// segments while the rounding wastes at most 1/8.
func SizeClass(size int64) int64 {
	step := int64(64 << 10)
	if size > 0 {
		// An eighth of the largest power of two <= size: the planner's
		// replays call this for every allocation, and the loop over the
		// powers it replaced was 7% of their time.
		step = max(step, int64(1)<<(bits.Len64(uint64(size))-1)/8)
	}
	return roundUp(size, step)
}

func (a *Arena) fits(n int64) bool {
	return a.Capacity <= 0 || a.Reserved+n <= a.Capacity
}

// use marks b allocated, splitting off the tail when it is worth keeping.
func (a *Arena) use(b *Block, size int64) *Block {
	if rest := b.Size - size; !b.Seg.Large && rest >= Align {
		tail := &Block{Seg: b.Seg, Off: b.Off + size, Size: rest, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = tail
		}
		b.next = tail
		b.Size = size
		a.insertFree(tail)
	}
	b.allocated = true
	b.held = b.Size
	if b.Seg.Large {
		b.held = min(b.Size, SizeClass(size))
	}
	b.Seg.Used += b.held
	a.Allocated += b.held
	a.PeakAllocated = max(a.PeakAllocated, a.Allocated)
	return b
}

// takeFree removes and returns a cached block for size bytes: for a small
// request the smallest free span of a small segment that holds it, for a
// large one the smallest cached segment of its size class or up to
// ReuseSlack larger.
func (a *Arena) takeFree(size int64) *Block {
	large := size >= SmallLimit
	want := size
	if large {
		want = SizeClass(size)
	}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].Size >= want })
	for ; i < len(a.free); i++ {
		b := a.free[i]
		if b.Seg.Large != large {
			continue
		}
		if large && !reusable(b.Size, want) {
			break // sorted by size: none close enough left
		}
		a.free = append(a.free[:i], a.free[i+1:]...)
		return b
	}
	return nil
}

// ReuseSlack, in halves, is how much larger than a request's size class a
// cached large segment may be and still be handed to it (whole, never
// split) when none of its own class is cached: up to half as large again.
// Without it the request maps fresh memory (slow to touch, and counted in
// RSS) while a slightly larger empty segment sits in the cache; without a
// bound a small tensor could hold a segment many times its size. 3/2
// predicted the lowest peak reserved bytes for issue 23's request (3.47
// GiB; 3.86 with exact classes only, 3.74 at 5/4, 3.55 at 2, 3.76
// unbounded).
const ReuseSlack = 3

// reusable says whether a cached large segment of size bytes may serve a
// request of size class want.
func reusable(size, want int64) bool { return size <= want*ReuseSlack/2 }

func (a *Arena) insertFree(b *Block) {
	i := sort.Search(len(a.free), func(i int) bool { return !before(a.free[i], b) })
	a.free = append(a.free, nil)
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = b
}

// before is the free list's order: size, then the segment's mapping order,
// then the offset in it.
func before(x, y *Block) bool {
	if x.Size != y.Size {
		return x.Size < y.Size
	}
	if x.Seg.seq != y.Seg.seq {
		return x.Seg.seq < y.Seg.seq
	}
	return x.Off < y.Off
}

func (a *Arena) removeFree(b *Block) {
	for i, f := range a.free {
		if f == b {
			a.free = append(a.free[:i], a.free[i+1:]...)
			return
		}
	}
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// FragmentMargin is what of the kernel's fragmented free memory a segment
// leaves to the rest of the process (its heap, some of the page cache its
// reads fill) when SmallPages maps it there.
const FragmentMargin = 16 << 20

// SmallPages reports whether a segment of size bytes is mapped with 4 KiB
// pages out of the kernel's fragmented free memory (fragments bytes of it
// now, see cpu.FragmentedFree) rather than with huge pages: while it holds
// the segment and a margin. The CPU device decides so where the hardware
// profile measured those pages cheaper to touch, and the planner, which
// runs this arena over nothing, prices the same decision.
func SmallPages(size, fragments int64) bool { return size+FragmentMargin <= fragments }
