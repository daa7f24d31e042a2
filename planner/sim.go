package planner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"ferry/backend/cpu/arena"
	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/residency"
	"ferry/tensor"
)

// stagingBytes is the executor's read staging buffer (Config.ChunkBytes'
// default), allocated on the host at the first read from disk.
const stagingBytes = 8 << 20

// errOOM is a simulated allocation that did not fit.
var errOOM = errors.New("out of memory")

// simBlock mirrors a residency block's state: absent, queued, loading
// (buffer allocated, copy under way) or loaded (finish <= now).
type simBlock struct {
	comp               *simComp
	index              int
	name               string
	devBytes, rawBytes int64

	queued   bool
	started  bool
	enqAt    float64
	finish   float64
	buf      *mblock
	hostCopy *mblock
	reads    int // times read from the checkpoint
	inUse    bool
	lastUse  uint64
}

// simComp mirrors a registered component.
type simComp struct {
	name    string
	plan    residency.ComponentPlan
	storage dtype.DType
	// unread is the stored bytes of its blocks not read yet, cachedUnread
	// how many of them the page cache holds.
	unread, cachedUnread int64
	blocks               []*simBlock
	// weights is where its weights live, acts where its activations do
	// (both the host for placement host).
	weights, acts *allocModel
	stats         compStats
	// next is the component prefetch runs on into past this one's last
	// block (Executor.Handoff).
	next *simComp
}

// compStats accumulate per component.
type compStats struct {
	compute, stall, copy, upload float64
	read, touch                  float64 // of copy: reading the checkpoint, first touch of host copies
	fill                         float64 // of touch: the page cache the reads filled
	actTouch                     float64 // of compute: first touch of activations
	loads, evictions             int
	bytesCopied, bytesDisk       int64
}

func (a compStats) plus(b compStats, times int) compStats {
	f := float64(times)
	return compStats{
		compute: a.compute + f*b.compute, stall: a.stall + f*b.stall, copy: a.copy + f*b.copy, upload: a.upload + f*b.upload, read: a.read + f*b.read, touch: a.touch + f*b.touch,
		fill:     a.fill + f*b.fill,
		actTouch: a.actTouch + f*b.actTouch, loads: a.loads + times*b.loads, evictions: a.evictions + times*b.evictions,
		bytesCopied: a.bytesCopied + int64(times)*b.bytesCopied, bytesDisk: a.bytesDisk + int64(times)*b.bytesDisk,
	}
}

func (a compStats) minus(b compStats) compStats {
	return compStats{compute: a.compute - b.compute, stall: a.stall - b.stall, copy: a.copy - b.copy, upload: a.upload - b.upload, read: a.read - b.read, touch: a.touch - b.touch, fill: a.fill - b.fill,
		actTouch: a.actTouch - b.actTouch, loads: a.loads - b.loads, evictions: a.evictions - b.evictions, bytesCopied: a.bytesCopied - b.bytesCopied, bytesDisk: a.bytesDisk - b.bytesDisk}
}

// sim runs the executor's rules on a clock: the compute thread's Runs and
// the copy worker's loads, one at a time in queue order.
type sim struct {
	hw      hwprofile.Profile
	compute dtype.DType // the GEMM weights' device dtype
	// keep is the storage dtypes GEMM weights keep on the device
	// (residency.MatrixDeviceType): keepStored for inference, nil for
	// training's dense weights.
	keep func(dtype.DType) bool
	// approx: the VAE's chunks past the second are taken to repeat it
	// (chunkEstimate; simMode).
	approx    bool
	dev, host *allocModel
	comps     []*simComp
	byName    map[string]*simComp

	now        float64
	queue      []*simBlock
	workerFree float64
	inflight   *simBlock // the load started last
	loadingNow *simBlock // the load whose buffer is being allocated
	current    *simComp
	clock      uint64
	staging    *mblock

	live      liveSet
	err       error
	peakJoint int64
	// free is the memory the kernel can still hand out without evicting
	// (touchTime); negative: unknown, never runs out.
	free int64
	// spare is the page cache the run does not read (other files, the
	// parts of checkpoint files no block holds): the kernel evicts it
	// first once free memory runs out (evictCache).
	spare int64
	// readBytes is what the run's first reads brought into the page
	// cache, readCached how much of it is still there.
	readBytes, readCached int64
	// burst is what the disk still serves at DiskGBps before it throttles
	// to DiskSustainedGBps (diskTime).
	burst int64
	// convRates prices convolution work by probe (see seconds).
	convRates [4]float64
	// warm is memory the run has given back to the kernel and not used
	// again yet, by when: segments the allocator unmapped under a budget,
	// and checkpoint pages the executor dropped (takeWarm).
	warm []warmFree
	// smallFirst: the devices map a segment with 4 KiB pages out of the
	// kernel's fragmented free memory while it holds it (frag bytes of it
	// left), huge pages after (hwprofile.Profile.SmallPagesFirst).
	// fragFresh is what such segments mapped that no touch has priced.
	smallFirst      bool
	frag, fragFresh int64
}

// warmFree is memory given back to the kernel at a time.
type warmFree struct {
	at    float64
	bytes int64
}

// warmLife is how long memory given back to the kernel stays warm. On a VM
// whose balloon reports free memory to its host, the host takes it back
// within seconds, and the next touch faults it in again at the cold rate:
// here 4 GiB freed at once were three quarters warm 3 s later, half 9 s
// later, and all cold after 15.
const warmLife = 6.0

// fillWarmLife is how long the pages a read frees stay warm for the page
// cache the next read fills: the executor drops a disk-tier block's pages
// in one piece right after reading them, and the next block's read, 8-9 s
// later on the A14B, found them warm (see fillTime).
const fillWarmLife = 12.0

type liveTensor struct {
	blk *mblock
	on  *allocModel
}

// liveSet holds the live tensors by id. Ids come from one counter per
// prediction (ids), so they are small and dense: a slice indexed by id
// replaced a map, whose hashing, growth and deletes showed high in a plan
// search's profile (the planner's search tests ran 6% faster).
type liveSet struct{ byID []liveTensor }

func (l *liveSet) get(id int) (liveTensor, bool) {
	if id < 0 || id >= len(l.byID) || l.byID[id].blk == nil {
		return liveTensor{}, false
	}
	return l.byID[id], true
}

func (l *liveSet) put(id int, t liveTensor) {
	if id >= len(l.byID) {
		// The slice never shrinks, so what Grow adds past len is zero.
		l.byID = slices.Grow(l.byID, id+1-len(l.byID))[:id+1]
	}
	l.byID[id] = t
}

func (l *liveSet) remove(id int) {
	if id >= 0 && id < len(l.byID) {
		l.byID[id] = liveTensor{}
	}
}

func newSim(hw hwprofile.Profile, b Budgets) *sim {
	s := &sim{hw: hw, dev: newAllocModel(b.DeviceBytes), host: newAllocModel(b.HostBytes),
		byName: map[string]*simComp{}, free: -1, keep: keepStored}
	if b.FreeBytes > 0 {
		s.free = b.FreeBytes
	}
	s.spare = b.CacheBytes
	if hw.DiskSustainedGBps > 0 {
		s.burst = int64(hw.DiskBurstGB * 1e9)
	}
	for i, r := range [4]float64{hw.ConvSmallGFLOPS, hw.ConvMidGFLOPS, hw.ConvGFLOPS, hw.ConvWideGFLOPS} {
		s.convRates[i] = r * paddedRatio(convProbeChannels[i], hw.ConvPanel) * 1e9
	}
	s.dev.reclaim = s.reclaim
	s.smallFirst, s.frag = hw.SmallPagesFirst(), b.FragmentedBytes
	s.pages(s.dev)
	s.pages(s.host)
	joint := func() { s.peakJoint = max(s.peakJoint, s.dev.Reserved+s.host.Reserved) }
	s.dev.observe, s.host.observe = joint, joint
	return s
}

// pages makes m decide, segment by segment, what pages the device maps
// (arena.SmallPages), and give unmapped segments back to the kernel:
// small-page ones to its fragments, which stay warm, huge-page ones to
// free memory, warm for warmLife (freed).
func (s *sim) pages(m *allocModel) {
	small := map[int64]bool{}
	mapSeg := m.Map
	m.Map = func(size int64) (int64, any, error) {
		base, mem, err := mapSeg(size)
		if err == nil && s.smallFirst && arena.SmallPages(size, s.frag) {
			small[base] = true
			s.frag -= size
			s.fragFresh += size
		}
		return base, mem, err
	}
	m.Unmap = func(seg *arena.Segment) {
		if !small[seg.Base] {
			s.freed(seg.Size, s.now)
			return
		}
		delete(small, seg.Base)
		s.frag += seg.Size
		if s.free >= 0 {
			s.free += seg.Size
		}
	}
}

// register declares a component as Executor.Register does.
func (s *sim) register(c *ComponentProfile, plan residency.ComponentPlan, compute dtype.DType) error {
	s.compute = compute
	sc := &simComp{name: c.Name, plan: plan, storage: c.Storage, weights: s.dev, acts: s.dev}
	if plan.Placement == residency.Host {
		sc.weights, sc.acts = s.host, s.host
	}
	for i, b := range c.Blocks {
		sb := &simBlock{comp: sc, index: i, name: b.Name, devBytes: b.DeviceBytes(c.Storage, compute, s.keep), rawBytes: b.Bytes(c.Storage)}
		if cap := sc.weights.Capacity; cap > 0 && sb.devBytes > cap {
			return fmt.Errorf("block %s needs %s but the budget is %s", b.Name, tensor.FormatBytes(sb.devBytes), tensor.FormatBytes(cap))
		}
		sc.blocks = append(sc.blocks, sb)
		sc.unread += sb.rawBytes
	}
	sc.cachedUnread = int64(min(1, max(0, c.Cached)) * float64(sc.unread))
	s.spare -= sc.cachedUnread
	s.comps = append(s.comps, sc)
	s.byName[c.Name] = sc
	return nil
}

func (s *sim) loaded(b *simBlock) bool { return b.started && b.finish <= s.now }

func (s *sim) keeps(b *simBlock) bool {
	p := b.comp.plan
	return b.index < p.Persistent || p.Blocks[b.name] == residency.Resident
}

func (s *sim) enqueue(b *simBlock) {
	if b.queued || b.started {
		return
	}
	b.queued, b.enqAt = true, s.now
	s.queue = append(s.queue, b)
}

func (s *sim) prefetch(b *simBlock) {
	if b.comp.next != nil {
		s.prefetchAcross(b)
		return
	}
	bs := b.comp.blocks
	n := len(bs)
	want := min(b.comp.plan.Prefetch, n-1)
	for i, queued := 1, 0; i < n && queued < want; i++ {
		x := bs[(b.index+i)%n]
		if s.loaded(x) && s.keeps(x) {
			continue
		}
		s.enqueue(x)
		queued++
	}
}

// prefetchAcross is prefetch under a handoff (Executor.Handoff): the
// window runs past the component's last block into the next component's
// first blocks instead of wrapping around.
func (s *sim) prefetchAcross(b *simBlock) {
	bs, next := b.comp.blocks, b.comp.next.blocks
	n := len(bs)
	want := b.comp.plan.Prefetch
	for i, queued := b.index+1, 0; i < n+len(next) && queued < want; i++ {
		x := next[min(max(i-n, 0), len(next)-1)]
		if i < n {
			x = bs[i]
		}
		if s.loaded(x) && s.keeps(x) {
			continue
		}
		s.enqueue(x)
		queued++
	}
}

// retire is Executor.Retire: Done, then every block leaves the device,
// resident and persistent ones too, and the host-tier copies are freed.
func (s *sim) retire(cs *simComp) {
	s.done(cs)
	cs.next = nil
	for _, b := range cs.blocks {
		if b.buf != nil && !b.inUse {
			cs.weights.release(b.buf)
			b.buf, b.started, b.queued = nil, false, false
			cs.stats.evictions++
		}
		if b.hostCopy != nil {
			s.host.release(b.hostCopy)
			b.hostCopy = nil
		}
	}
}

// advance starts every queued load whose start time is at or before t.
func (s *sim) advance(t float64) {
	for len(s.queue) > 0 && s.err == nil {
		x := s.queue[0]
		start := max(s.workerFree, x.enqAt)
		if start > t {
			return
		}
		s.queue = s.queue[1:]
		s.startLoad(x, start)
	}
}

// startLoad is the copy worker's load: the buffer, the host-tier copy on
// first use, then the read and the upcast.
func (s *sim) startLoad(x *simBlock, start float64) {
	cs := x.comp
	if x.devBytes == 0 {
		// Only row-gathered tables: nothing moves, nothing is allocated.
		x.queued, x.started, x.buf, x.finish = false, true, nil, start
		return
	}
	s.loadingNow = x
	mapped := cs.weights.Mapped
	buf := cs.weights.alloc(x.devBytes)
	s.loadingNow = nil
	if buf == nil {
		s.fail(fmt.Errorf("load %s (%s): %w", x.name, tensor.FormatBytes(x.devBytes), errOOM))
		return
	}
	fresh := cs.weights.Mapped - mapped
	fromHost := cs.plan.FromHostCopy()
	var read, diskRead, touch float64
	if fromHost && x.hostCopy == nil {
		hostMapped := s.host.Mapped
		x.hostCopy = s.host.alloc(x.rawBytes)
		if x.hostCopy == nil {
			s.fail(fmt.Errorf("host copy of %s (%s): %w", x.name, tensor.FormatBytes(x.rawBytes), errOOM))
			return
		}
		// The read lands in fresh host pages, and the kernel faults each
		// in as it copies into it: the read takes the disk's time plus
		// the first touch's. (Reading 1 GiB of the checkpoint into
		// fresh memory took 4.5 s here, the read alone 0.7 s and the
		// touch alone 3.9 s.)
		touch = s.touchTime(s.host.Mapped-hostMapped, start)
		var fill float64
		diskRead, fill = s.readTime(x, start)
		touch += fill
		cs.stats.fill += fill
		read = diskRead + touch
		cs.stats.bytesDisk += x.rawBytes
	}
	if !fromHost {
		if s.staging == nil {
			if s.staging = s.host.alloc(stagingBytes); s.staging == nil {
				s.fail(fmt.Errorf("read staging: %w", errOOM))
				return
			}
		}
		diskRead, touch = s.readTime(x, start)
		read = diskRead + touch
		cs.stats.fill += touch
		cs.stats.bytesDisk += x.rawBytes
	}
	upload := float64(x.devBytes)/s.uploadRate(cs.storage) + s.touchTime(fresh, start)
	dur := read + upload
	x.queued, x.started, x.buf = false, true, buf
	x.finish = start + dur
	s.workerFree = x.finish
	s.inflight = x
	cs.stats.copy += dur
	cs.stats.upload += upload
	cs.stats.read += diskRead
	cs.stats.touch += touch
	cs.stats.loads++
	cs.stats.bytesCopied += x.devBytes
}

// readTime is the time to read a block from its checkpoint at time at:
// the disk's or the page cache's, and apart from it the first touch of the
// page cache the read fills (fillTime), which takes the cores as other
// first touches do. The first read finds the share of the component's
// unread bytes the page cache still holds and leaves the block there, so
// the second (disk tier) finds it unless the run's memory has evicted it
// since; later reads find nothing. From its second load on, the executor drops a disk-tier block's
// pages after reading them, and the kernel has that memory free, warm.
func (s *sim) readTime(x *simBlock, at float64) (read, fill float64) {
	raw := x.rawBytes
	var cached int64
	switch x.reads {
	case 0:
		c := x.comp
		if c.unread > 0 {
			cached = int64(float64(raw) * float64(c.cachedUnread) / float64(c.unread))
		}
		c.unread -= raw
		c.cachedUnread -= cached
		s.readBytes += raw
		s.readCached += raw
	case 1:
		cached = int64(float64(raw) * float64(s.readCached) / float64(s.readBytes))
	}
	x.reads++
	fill = s.fillTime(raw-cached, at)
	read = s.diskTime(raw-cached) + float64(cached)/(s.hw.PageCacheGBps*1e9)
	if x.reads > 1 && x.comp.plan.FromDisk() {
		if x.reads == 2 {
			s.readBytes -= raw
			s.readCached -= cached
		}
		s.freed(raw, at+read+fill)
	}
	return read, fill
}

// fillTime prices the page cache that a read of n uncached bytes fills at
// time at, and takes that memory. The kernel hands the read the pages
// freed last: those given back in the last fillWarmLife seconds (most
// often the pages the executor dropped after the previous block's read)
// cost the warm rate to fill, then free memory the first-touch rate, and
// past it evicting page cache the reclaim rate. Where free memory is
// unknown the disk rate alone prices the read, as the probe measured it.
//
// Measured on Wan2.2-T2V-A14B (bf16, device and host 8 GiB, see
// docs/sweeps/a14b-256x256x17.md): a disk-tier block read into the pages
// of the block dropped 8 s before took 0.6 s (1.1 GB/s); the low-noise
// expert's first reads, into the 17 GB the high-noise expert's drops had
// freed minutes before, took 2.1-2.3 s (9 µs more a 4 KiB page, the
// first-touch rate), with the kernel's time on the cores tripled; once
// the free memory ran out, 0.8 s.
func (s *sim) fillTime(n int64, at float64) float64 {
	if n <= 0 || s.free < 0 {
		return 0
	}
	warm := s.takeWarm(n, at, fillWarmLife)
	s.free -= min(warm, s.free)
	n -= warm
	cold := s.useFree(n)
	us := float64(warm)*s.hw.WarmTouchUsPerPage + float64(cold)*s.hw.FirstTouchUsPerPage +
		float64(n-cold)*s.hw.ReclaimTouchUsPerPage
	return us / pageSize * 1e-6
}

// diskTime prices n bytes read from the disk: at DiskGBps (the rate ferry
// measured reading the checkpoint before planning) while the disk's burst
// lasts, at DiskSustainedGBps past it, where calibrate measured one. On
// the reference VM a 64 MiB probe read 0.98-1.4 GB/s and a long read
// 0.55-0.65 after its first few hundred MiB.
func (s *sim) diskTime(n int64) float64 {
	fast := min(n, s.burst)
	s.burst -= fast
	return float64(fast)/(s.hw.DiskGBps*1e9) + float64(n-fast)/(s.hw.DiskGBpsPastBurst()*1e9)
}

// touchTime prices the first touch of fresh pages at time at: segments
// mapped out of the kernel's fragmented free memory at the fragment rate
// (the page cache takes little of it: reading 1 GiB of a checkpoint here
// took 65 MiB of 574, the kernel filling it with larger blocks);
// memory the run gave back to the kernel in the last warmLife seconds at
// the warm rate; the rest at the calibrated (cold) rate while the kernel
// has free memory, at the reclaim rate past it, where it must evict page
// cache for each page (evictCache). On a VM whose balloon reports free
// memory to the host, the reclaim rate is the lower one: evicted pages are
// pages the host already backs (measured here: cold 6-9 µs per page, past
// free memory 0.5-1.6, from the fragments 1.3).
func (s *sim) touchTime(fresh int64, at float64) float64 {
	if fresh <= 0 {
		return 0 // most calls map nothing: skip the warm list
	}
	frag := min(fresh, s.fragFresh)
	s.fragFresh -= frag
	fresh -= frag
	warm := s.takeWarm(fresh, at, warmLife)
	if s.free >= 0 {
		s.free -= min(frag+warm, s.free) // fragments and warm pages are free memory too
	}
	fresh -= warm
	slow := fresh - s.useFree(fresh)
	us := float64(frag)*s.hw.FragmentTouchUsPerPage + float64(warm)*s.hw.WarmTouchUsPerPage +
		float64(fresh-slow)*s.hw.FirstTouchUsPerPage + float64(slow)*s.hw.ReclaimTouchUsPerPage
	return us / pageSize * 1e-6
}

// freed gives n bytes back to the kernel at time at: free memory, warm for
// warmLife seconds (fillWarmLife for the page cache, fillTime).
func (s *sim) freed(n int64, at float64) {
	if s.free >= 0 {
		s.free += n
	}
	s.warm = append(s.warm, warmFree{at: at, bytes: n})
}

// takeWarm takes up to n bytes of the memory given back in the life
// seconds before at, the most recent first (the kernel hands out the pages
// freed last first), and returns how many it got. What is older than the
// longest life has gone cold and is dropped from the list.
func (s *sim) takeWarm(n int64, at, life float64) int64 {
	var got int64
	for i := len(s.warm) - 1; i >= 0 && got < n; i-- {
		w := &s.warm[i]
		if w.at > at || at-w.at > life {
			continue // not freed yet (the copy worker runs ahead), or cold
		}
		k := min(n-got, w.bytes)
		w.bytes -= k
		got += k
	}
	kept := s.warm[:0]
	for _, w := range s.warm {
		if w.bytes > 0 && at-w.at <= max(warmLife, fillWarmLife) {
			kept = append(kept, w)
		}
	}
	s.warm = kept
	return got
}

// useFree takes up to n bytes of the free memory and returns how many it
// got (all of them when the free memory is unknown); the kernel evicts
// page cache for the rest.
func (s *sim) useFree(n int64) int64 {
	if s.free < 0 {
		return n
	}
	got := min(n, s.free)
	s.free -= got
	s.evictCache(n - got)
	return got
}

// evictCache drops n bytes of page cache, oldest and least used first, as
// the kernel's LRU lists do: what the run does not read, then the cached
// pages of blocks not read yet, in the order the run reads its components
// (a previous run read them in that order, so the components read first
// hold the oldest pages), and last the pages the run's own reads left.
// Measured on the 1.3B: a run whose memory left no room for the cached
// checkpoint read what had looked 74-98% cached at disk speed; one after
// `cat` of the whole folder first evicted the 2 GB of the text encoder's
// files no block holds, and read every block from the cache.
func (s *sim) evictCache(n int64) {
	take := func(have *int64) {
		k := min(n, max(0, *have))
		*have -= k
		n -= k
	}
	take(&s.spare)
	for _, c := range s.comps {
		take(&c.cachedUnread)
	}
	take(&s.readCached)
}

func (s *sim) uploadRate(storage dtype.DType) float64 {
	if storage == dtype.F32 {
		return s.hw.H2DF32GBps * 1e9
	}
	return s.hw.H2DGBps * 1e9
}

func (s *sim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// wait blocks the compute thread until every block in bs is loaded.
func (s *sim) wait(cs *simComp, bs []*simBlock) {
	for _, x := range bs {
		for !x.started && len(s.queue) > 0 && s.err == nil {
			y := s.queue[0]
			s.queue = s.queue[1:]
			s.startLoad(y, max(s.workerFree, y.enqAt))
		}
		if s.err != nil {
			return
		}
		if x.finish > s.now {
			cs.stats.stall += x.finish - s.now
			s.now = x.finish
		}
	}
	s.advance(s.now)
}

// evict frees a loaded, idle block's device copy.
func (s *sim) evict(b *simBlock) {
	if !s.loaded(b) || b.inUse {
		return
	}
	b.comp.weights.release(b.buf)
	b.buf, b.started, b.queued = nil, false, false
	b.comp.stats.evictions++
}

// reclaim is Executor.reclaim: evict the least recently used idle onload
// component that is neither current nor loading.
func (s *sim) reclaim(int64) bool {
	loading := s.loadingNow
	if loading == nil && s.inflight != nil && s.inflight.finish > s.now {
		loading = s.inflight
	}
	var victim *simComp
	var victimUse uint64
	for _, cs := range s.comps {
		if cs.plan.Placement != residency.Onload || cs == s.current || (loading != nil && loading.comp == cs) {
			continue
		}
		use, isLoaded, busy := uint64(0), false, false
		for _, b := range cs.blocks {
			isLoaded = isLoaded || s.loaded(b)
			busy = busy || b.inUse || b.queued || (b.started && !s.loaded(b))
			use = max(use, b.lastUse)
		}
		if isLoaded && !busy && (victim == nil || use < victimUse) {
			victim, victimUse = cs, use
		}
	}
	if victim == nil {
		return false
	}
	for _, b := range victim.blocks {
		s.evict(b)
	}
	return true
}

// run is Executor.Run with fn replaced by the call's events and time.
func (s *sim) run(cs *simComp, c call) {
	if s.err != nil {
		return
	}
	b := cs.blocks[c.block]
	s.current = cs
	waitFor := []*simBlock{b}
	switch cs.plan.Placement {
	case residency.Onload:
		for _, x := range cs.blocks {
			s.enqueue(x)
		}
		waitFor = cs.blocks
	case residency.Stream:
		s.enqueue(b)
		s.prefetch(b)
	default:
		s.enqueue(b)
	}
	s.wait(cs, waitFor)
	if s.err != nil {
		return
	}
	s.clock++
	b.inUse, b.lastUse = true, s.clock

	dur := s.seconds(c.work) + s.overhead(c.ev)
	mapped := cs.acts.Mapped
	t0 := s.now
	for j, ev := range c.ev {
		s.now = t0 + dur*float64(j+1)/float64(len(c.ev)+1)
		s.advance(s.now)
		s.apply(ev, cs.acts)
	}
	touch := s.touchTime(cs.acts.Mapped-mapped, s.now)
	s.now = t0 + dur + touch
	cs.stats.compute += dur + touch
	cs.stats.actTouch += touch
	s.advance(s.now)

	b.inUse = false
	if cs.plan.Placement == residency.Stream && !s.keeps(b) {
		s.evict(b)
	}
}

// seconds rates work with the hardware profile.
func (s *sim) seconds(w work) float64 {
	t := w.gemm/(s.gemmGFLOPS()*1e9) + w.attn[0]/(s.hw.AttentionSmallGFLOPS*1e9) + w.attn[1]/(s.hw.AttentionGFLOPS*1e9) +
		w.mem/(s.hw.MemGBps*1e9)
	for i, f := range w.conv {
		t += f / s.convRates[i]
	}
	return t
}

// paddedRatio is what c output channels cost in whole panels, over c: 4
// for the 8-channel probe under panels of 32. The probes' rates are of
// real flops, the work is of padded ones, so newSim scales the rates.
func paddedRatio(c, panel int) float64 {
	return float64(roundUp(c, max(panel, 1))) / float64(c)
}

// gemmGFLOPS is the measured rate of the products as they run: the bf16
// path's when GEMM weights are bf16, the default implementation's else.
func (s *sim) gemmGFLOPS() float64 {
	if s.compute == dtype.BF16 {
		for _, g := range s.hw.Gemm {
			if g.Name == "go-bf16" && g.GFLOPS > 0 {
				return g.GFLOPS
			}
		}
	}
	return s.hw.GEMMGFLOPS("")
}

// opsPerAlloc is kernel calls per allocated output: the model code runs
// about two in-place ops (norm scales, gates, residual adds) for every five
// that allocate.
const opsPerAlloc = 1.4

// overhead is the fixed cost of the kernel calls behind a call's events.
func (s *sim) overhead(ev []event) float64 {
	n := 0
	for _, e := range ev {
		if e.bytes > 0 {
			n++
		}
	}
	return float64(n) * opsPerAlloc * s.hw.OpOverheadUs * 1e-6
}

// apply performs one activation event on a device.
func (s *sim) apply(ev event, on *allocModel) {
	if s.err != nil {
		return
	}
	if ev.bytes == 0 {
		if t, ok := s.live.get(ev.id); ok {
			t.on.release(t.blk)
			s.live.remove(ev.id)
		}
		return
	}
	blk := on.alloc(ev.bytes)
	if blk == nil {
		s.fail(fmt.Errorf("activation of %s: %w", tensor.FormatBytes(ev.bytes), errOOM))
		return
	}
	s.live.put(ev.id, liveTensor{blk: blk, on: on})
}

// runPass runs one pass of a component.
func (s *sim) runPass(cs *simComp, p pass) {
	for _, ev := range p.pre {
		s.apply(ev, cs.acts)
	}
	for _, c := range p.calls {
		s.run(cs, c)
	}
	for _, ev := range p.post {
		s.apply(ev, cs.acts)
	}
}

// done is Executor.Done.
func (s *sim) done(cs *simComp) {
	kept := s.queue[:0]
	for _, x := range s.queue {
		if x.comp == cs {
			x.queued = false
			continue
		}
		kept = append(kept, x)
	}
	s.queue = kept
	if f := s.inflight; f != nil && f.comp == cs && f.finish > s.now {
		cs.stats.stall += f.finish - s.now
		s.now = f.finish
	}
	if cs.plan.Placement == residency.Stream {
		for _, b := range cs.blocks {
			if !s.keeps(b) {
				s.evict(b)
			}
		}
	}
	if s.current == cs {
		s.current = nil
	}
}

// chunkLoop runs n chunks of a repeating script on cs (the VAE's frames),
// next making each chunk's pass (the last frees what the chunks carried).
// Chunks run one by one until the state they leave (the devices' layouts
// and cs's loaded blocks, signature) repeats the state some chunk at most
// maxPeriod before left: the chunks in between then repeat exactly (a
// cache slot's frames ping-pong between two cached segments: period 2),
// so whole periods of them are counted without running them, their time
// without the first touches (they find the memory in the allocator's
// cache), and the rest and the last chunk are run. Without a period every
// chunk runs. Under sim.approx (the search's comparisons) chunkEstimate
// stands in. It returns the chunks' time and stats.
func (s *sim) chunkLoop(cs *simComp, n int, next func(last bool) pass) (float64, compStats) {
	if s.approx {
		return s.chunkEstimate(cs, n, next)
	}
	const maxPeriod = 4
	var total float64
	var stats compStats
	// ran holds, since the last skip, each chunk's leaving state and its
	// time and stats without first touches (what a repeat costs).
	type chunk struct {
		sig uint64
		t   float64
		st  compStats
	}
	var ran []chunk
	for j := 0; j < n; j++ {
		before, t := cs.stats, s.now
		s.runPass(cs, next(j == n-1))
		st := cs.stats.minus(before)
		total += s.now - t
		stats = stats.plus(st, 1)
		ran = append(ran, chunk{sig: s.signature(cs), t: s.now - t - st.actTouch, st: st.withoutTouch()})
		last := len(ran) - 1
		for period := 1; period <= maxPeriod && last-period >= 0 && j < n-1; period++ {
			if ran[last-period].sig != ran[last].sig {
				continue
			}
			k := (n - 2 - j) / period // whole periods before the last chunk
			for _, c := range ran[last-period+1:] {
				total += float64(k) * c.t
				stats = stats.plus(c.st, k)
			}
			j += k * period
			ran = nil // the state is this chunk's again
			break
		}
	}
	return total, stats
}

// withoutTouch is what a repeat of a chunk with stats a costs: its first
// touches found the memory in the allocator's cache.
func (a compStats) withoutTouch() compStats {
	a.compute -= a.actTouch
	a.actTouch = 0
	return a
}

// chunkEstimate is chunkLoop for the search's comparisons (sim.approx):
// the first chunk and a second, which ends the chunks (it frees what they
// carried), and the second, without its first touches, standing for the
// rest. Two chunks' work instead of every chunk up to a period, and not
// exact.
func (s *sim) chunkEstimate(cs *simComp, n int, next func(last bool) pass) (float64, compStats) {
	var total float64
	var stats compStats
	runs := min(n, 2)
	for j := range runs {
		before, t := cs.stats, s.now
		s.runPass(cs, next(j == runs-1))
		st := cs.stats.minus(before)
		total += s.now - t
		stats = stats.plus(st, 1)
		if j == 1 && n > 2 {
			total += float64(n-2) * (s.now - t - st.actTouch)
			stats = stats.plus(st.withoutTouch(), n-2)
		}
	}
	return total, stats
}

// signature is the state the next chunk of cs starts from: both
// allocators' layouts and which of cs's blocks are loaded or queued.
func (s *sim) signature(cs *simComp) uint64 {
	h := fnv.New64a()
	var buf [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	put(s.dev.Signature())
	put(s.host.Signature())
	for _, b := range cs.blocks {
		put(uint64(boolInt(b.started)) | uint64(boolInt(b.queued))<<1 | uint64(boolInt(s.loaded(b)))<<2)
	}
	return h.Sum64()
}
