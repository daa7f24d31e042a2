// Package parallel is the one thread pool every CPU kernel shares. It starts
// one worker per core once; kernels split their work into chunks that the
// caller and the workers claim, so no goroutine is started per operation and
// nested calls cannot deadlock (the caller always works its own chunks).
//
// A worker that runs out of work, and a caller waiting for its loop to
// finish, poll for a while (spinWait) before they sleep: waking a sleeping
// thread took 100-120 µs on the virtual machines ferry was measured on, so
// a loop of 100 µs per worker ran on one core and took twice as long.
// After 20 ms or more asleep it took 2-3 ms there (the kernel placed the
// woken thread on the caller's busy core until the next tick), so the
// first loop after a long pause runs on fewer cores. Pipelines rarely
// meet it (20-50 sleeps in a wan-tiny run; polling for 20 ms instead of
// spinWait changed no run time), and benchmarks warm up past it.
package parallel

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// spinWait is how long an idle worker, or a caller whose chunks are done,
// polls before it sleeps. Polling yields the core to any other goroutine
// that is ready (runtime.Gosched), so it delays no other work, and it
// costs at most this much CPU after the last loop of a run of kernels.
const spinWait = 500 * time.Microsecond

// Pool runs loops over worker goroutines.
type Pool struct {
	workers int
	tasks   chan *task
}

type task struct {
	fn      func(lo, hi int)
	n       int
	chunk   int
	nchunks int64
	next    atomic.Int64
	done    atomic.Int64
	finish  chan struct{}
}

// New starts a pool with n workers in all (the caller counts as one).
func New(n int) *Pool {
	n = max(n, 1)
	p := &Pool{workers: n, tasks: make(chan *task, 4*n)}
	for range n - 1 {
		go p.loop()
	}
	return p
}

func (p *Pool) loop() {
	for {
		p.take().work()
	}
}

// take returns the next task, polling for spinWait before it sleeps on
// the channel (which is never closed: a pool lives as long as the
// process).
func (p *Pool) take() *task {
	start := time.Now()
	for {
		select {
		case t := <-p.tasks:
			return t
		default:
		}
		if time.Since(start) > spinWait {
			return <-p.tasks
		}
		runtime.Gosched()
	}
}

// Workers is the number of threads that share a loop.
func (p *Pool) Workers() int { return p.workers }

// For calls fn over [0, n) split into chunks of at least grain items, one
// chunk per call, and returns when every chunk is done.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p.workers == 1 || n <= grain {
		fn(0, n)
		return
	}
	// Aim for a few chunks per worker so uneven chunks balance out.
	chunks := min((n+grain-1)/grain, 4*p.workers)
	size := (n + chunks - 1) / chunks
	t := &task{fn: fn, n: n, chunk: size, nchunks: int64((n + size - 1) / size), finish: make(chan struct{})}
	for range min(p.workers-1, int(t.nchunks)-1) {
		select {
		case p.tasks <- t:
		default: // workers busy (nested call): the caller does the work
		}
	}
	t.work()
	t.wait()
}

// wait returns when every chunk is done: it polls for spinWait, then
// sleeps until the last chunk closes finish.
func (t *task) wait() {
	start := time.Now()
	for t.done.Load() < t.nchunks {
		if time.Since(start) > spinWait {
			<-t.finish
			return
		}
		runtime.Gosched()
	}
}

// Run calls fn(i) for i in [0, n), each on some worker. Use it for a few
// coarse pieces of work (one per core).
func (p *Pool) Run(n int, fn func(i int)) {
	p.For(n, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			fn(i)
		}
	})
}

func (t *task) work() {
	for {
		c := t.next.Add(1) - 1
		if c >= t.nchunks {
			return
		}
		lo := int(c) * t.chunk
		t.fn(lo, min(lo+t.chunk, t.n))
		if t.done.Add(1) == t.nchunks {
			close(t.finish)
		}
	}
}

var (
	defaultOnce sync.Once
	defaultPool *Pool
)

// Default is the process-wide pool, sized to GOMAXPROCS or FERRY_THREADS.
func Default() *Pool {
	defaultOnce.Do(func() {
		n := runtime.GOMAXPROCS(0)
		if v, err := strconv.Atoi(os.Getenv("FERRY_THREADS")); err == nil && v > 0 {
			n = v
		}
		defaultPool = New(n)
	})
	return defaultPool
}
