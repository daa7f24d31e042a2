package checkpoint

import (
	"fmt"
	"os"
	"time"
)

// PageCached reports how many of the file's bytes sit in the OS page cache
// now, so a planner can price a read at memory speed rather than disk
// speed. Nothing is read and no page is faulted in.
func (f *File) PageCached() (int64, error) {
	vec, err := residentPages(f.f, f.size)
	if err != nil {
		return 0, fmt.Errorf("page cache of %s: %w", f.path, err)
	}
	page := int64(os.Getpagesize())
	var n int64
	for i, v := range vec {
		if v&1 != 0 {
			n += min(page, f.size-int64(i)*page)
		}
	}
	return n, nil
}

// PageCached sums File.PageCached over the set's files; total is their
// size in bytes.
func (s *Set) PageCached() (cached, total int64, err error) {
	for _, f := range s.files {
		n, err := f.PageCached()
		if err != nil {
			return 0, 0, err
		}
		cached += n
		total += f.size
	}
	return cached, total, nil
}

// ProbeChunk is the size of one probe read: large enough that a disk
// streams it, small enough that a probe of a few of them stays short.
// Read directly, 4, 16 and 64 MiB reads spread over a file came at the
// same rate (1.30-1.51 GB/s, Zen 5 kind VM, 2026-11-27), once the buffer
// they land in had been touched before the clock started.
const ProbeChunk = 4 << 20

// Probe is what a read of pages outside the page cache took.
type Probe struct {
	Bytes   int64
	Seconds float64
	// Direct says the reads bypassed the page cache (O_DIRECT): the time
	// is the disk's alone. A read through the page cache also fills it,
	// and on a virtual machine that fill can cost more than the disk.
	Direct bool
}

// GBps is the probe's read rate; 0 when nothing was read.
func (p Probe) GBps() float64 {
	if p.Bytes == 0 || p.Seconds <= 0 {
		return 0
	}
	return float64(p.Bytes) / p.Seconds / 1e9
}

// Add sums two probes; the sum is direct only when both are (or one read
// nothing).
func (p Probe) Add(o Probe) Probe {
	direct := (p.Direct || p.Bytes == 0) && (o.Direct || o.Bytes == 0)
	return Probe{Bytes: p.Bytes + o.Bytes, Seconds: p.Seconds + o.Seconds, Direct: direct}
}

// ProbeUncached times reads of up to limit bytes of the set's pages that
// are not in the page cache, in chunks of ProbeChunk spread evenly over
// the uncached chunks of all its files: the read rate its weights will
// see, from whatever actually holds them (a disk, or a cache outside this
// machine that no residency query can see). Chunks with any cached page
// are skipped, so cached data never inflates the rate.
//
// The reads bypass the page cache where the OS and file system allow
// (O_DIRECT), so that the rate is the disk's alone and the planner prices
// the page cache a run's reads fill apart, by the memory it comes from.
// Timed through the page cache, 64 MiB read at 0.7-0.9 GB/s where a long
// read into cold memory came at 0.47 (Zen 5 kind VM, 2026-11-27): a
// short buffered read does not show what a long one pays. Elsewhere the
// reads go through the page cache, and the pages read stay cached.
func (s *Set) ProbeUncached(limit int64) (Probe, error) {
	var cands []probeChunk
	for _, f := range s.files {
		vec, err := residentPages(f.f, f.size)
		if err != nil {
			return Probe{}, fmt.Errorf("page cache of %s: %w", f.path, err)
		}
		for off := int64(0); off+ProbeChunk <= f.size; off += ProbeChunk {
			if noneResident(vec, off, ProbeChunk) {
				cands = append(cands, probeChunk{f, off})
			}
		}
	}
	n := min(int64(len(cands)), limit/ProbeChunk)
	if n == 0 {
		return Probe{}, nil
	}
	picked := make([]probeChunk, n)
	for i := range n {
		picked[i] = cands[i*int64(len(cands))/n]
	}
	if p, err := probeDirect(picked); err == nil {
		return p, nil
	}
	return probeBuffered(picked)
}

// probeChunk is one ProbeChunk of a file, at off.
type probeChunk struct {
	f   *File
	off int64
}

// probeBuffered times reads of the chunks through the page cache.
func probeBuffered(chunks []probeChunk) (Probe, error) {
	buf := make([]byte, ProbeChunk)
	var p Probe
	for _, c := range chunks {
		t0 := time.Now()
		if _, err := c.f.f.ReadAt(buf, c.off); err != nil {
			return Probe{}, fmt.Errorf("probe read of %s at %d: %w", c.f.path, c.off, err)
		}
		p.Seconds += time.Since(t0).Seconds()
		p.Bytes += ProbeChunk
	}
	return p, nil
}

// noneResident says no page of [off, off+n) is in vec's page cache.
func noneResident(vec []byte, off, n int64) bool {
	page := int64(os.Getpagesize())
	for i := off / page; i < (off+n+page-1)/page && i < int64(len(vec)); i++ {
		if vec[i]&1 != 0 {
			return false
		}
	}
	return true
}
