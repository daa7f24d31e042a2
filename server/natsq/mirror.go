package natsq

import (
	"context"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"ferry/server/queue"
)

// mirrored is one job of this process's view of the bucket, with the
// bucket revision it came from; a deleted job stays as a tombstone so a
// late, older update cannot bring it back.
type mirrored struct {
	job     queue.Job
	rev     uint64
	deleted bool
}

// startMirror loads every job state and keeps the view current by watching
// the bucket. Listing, positions and depth read the view: eventually
// consistent across processes (a watch delivery behind), exact for this
// process's own writes, which are applied to it at once.
func (q *Queue) startMirror(ctx context.Context) error {
	w, err := q.kv.WatchAll(q.bg)
	if err != nil {
		return fmt.Errorf("natsq: watch job states: %w", err)
	}
	for loaded := false; !loaded; {
		select {
		case e := <-w.Updates():
			if e == nil {
				loaded = true
				break
			}
			q.applyEntry(e)
		case <-ctx.Done():
			w.Stop()
			return fmt.Errorf("natsq: load job states: %w", ctx.Err())
		}
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		defer w.Stop()
		for {
			select {
			case <-q.bg.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					q.applyEntry(e)
				}
			}
		}
	}()
	return nil
}

// applyEntry folds one watched bucket entry into the view.
func (q *Queue) applyEntry(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		q.forget(e.Key(), e.Revision())
		return
	}
	j, err := decodeJob(e.Value())
	if err != nil {
		return // not a job written by ferry: nothing to show
	}
	q.apply(j, e.Revision())
}

// apply installs a job state unless the view already holds a newer one.
func (q *Queue) apply(j queue.Job, rev uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := q.jobs[j.ID]
	if ok && cur.rev >= rev {
		return
	}
	q.jobs[j.ID] = mirrored{job: j, rev: rev}
	// Wake waiting workers on a status change only: progress writes are
	// frequent and never make a job available.
	if !ok || cur.deleted || cur.job.Status != j.Status {
		q.notifyLocked()
	}
}

// forget marks a job deleted as of rev.
func (q *Queue) forget(id string, rev uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cur, ok := q.jobs[id]; ok && cur.rev >= rev {
		return
	}
	q.jobs[id] = mirrored{rev: rev, deleted: true}
}

// forgetNow marks a job deleted by this process; the watch delivers the
// purge's own revision later.
func (q *Queue) forgetNow(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.jobs[id] = mirrored{rev: q.jobs[id].rev + 1, deleted: true}
}

// viewed returns a job from the view.
func (q *Queue) viewed(id string) (mirrored, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	m, ok := q.jobs[id]
	return m, ok && !m.deleted
}

// sortedLocked returns the live jobs by submission order; mu is held.
func (q *Queue) sortedLocked() []queue.Job {
	out := make([]queue.Job, 0, len(q.jobs))
	for _, m := range q.jobs {
		if !m.deleted {
			out = append(out, m.job)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Seq < out[b].Seq })
	return out
}

// queuedBefore counts queued jobs submitted before seq (all queued jobs
// for seq < 0).
func (q *Queue) queuedBefore(seq int64) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, m := range q.jobs {
		if !m.deleted && m.job.Status == queue.StatusQueued && (seq < 0 || m.job.Seq < seq) {
			n++
		}
	}
	return n
}

// List implements queue.Queue: newest first, from the view.
func (q *Queue) List(_ context.Context, p queue.Page) ([]queue.Job, bool, error) {
	q.mu.Lock()
	all := q.sortedLocked()
	q.mu.Unlock()
	limit := p.Limit
	if limit <= 0 {
		limit = 20
	}
	var out []queue.Job
	started := p.After == ""
	for i := len(all) - 1; i >= 0; i-- {
		if !started {
			started = all[i].ID == p.After
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, all[i])
	}
	return out, false, nil
}

// Position implements queue.Queue.
func (q *Queue) Position(ctx context.Context, id string) (int, error) {
	m, ok := q.viewed(id)
	if !ok {
		// The view may be a watch delivery behind another API node.
		j, err := q.Get(ctx, id)
		if err != nil {
			return -1, err
		}
		m.job = j
	}
	if m.job.Status != queue.StatusQueued {
		return -1, nil
	}
	return q.queuedBefore(m.job.Seq), nil
}

// Depth implements queue.Queue.
func (q *Queue) Depth(context.Context) (int, int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var queued, running int
	for _, m := range q.jobs {
		if m.deleted {
			continue
		}
		switch m.job.Status {
		case queue.StatusQueued:
			queued++
		case queue.StatusInProgress:
			running++
		}
	}
	return queued, running, nil
}
