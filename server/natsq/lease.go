package natsq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ferry/server/queue"
)

const (
	// leaseScan bounds how many messages one Lease call looks at before it
	// reports that nothing fits.
	leaseScan = 8
	// orphanAge is how long a job message may wait for its state before it
	// is dropped as the leftover of a submit that died half way.
	orphanAge = 30 * time.Second
	// retryDelay is how soon a message is offered again after a transient
	// reason not to take it (state not written yet, contention).
	retryDelay = 100 * time.Millisecond
)

// lease is this process's hold on a running job: the job's message (to
// ack, and to extend with progress acks) and the revision of the job state
// it last wrote (to detect that the job moved on without it).
type lease struct {
	id   string
	key  string
	msg  jetstream.Msg
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	job     queue.Job
	rev     uint64
	touched time.Time // last Progress call
	acked   time.Time // last progress ack
	written time.Time // last state write
	outputs []string
}

func leaseKey(l queue.Lease) string { return fmt.Sprintf("%s#%d", l.JobID, l.Attempt) }

// end stops the lease's keeper.
func (ls *lease) end() { ls.once.Do(func() { close(ls.done) }) }

func (ls *lease) addOutput(variant string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, v := range ls.outputs {
		if v == variant {
			return
		}
	}
	ls.outputs = append(ls.outputs, variant)
}

// lost reports whether a job state no longer belongs to lease l.
func lost(j queue.Job, l queue.Lease) bool {
	return j.Status != queue.StatusInProgress || j.Attempts != l.Attempt || j.Worker != l.Worker
}

// Lease implements queue.Queue: it pulls job messages from the shared
// consumer until one is a job that fits b and can be claimed.
func (q *Queue) Lease(ctx context.Context, b queue.Budget) (queue.Job, queue.Lease, error) {
	if q.isClosed() {
		return queue.Job{}, queue.Lease{}, queue.ErrClosed
	}
	for range leaseScan {
		m, err := q.next()
		if err != nil {
			return queue.Job{}, queue.Lease{}, err
		}
		if m == nil {
			break
		}
		j, l, ok, err := q.consider(ctx, m, b)
		if err != nil || ok {
			return j, l, err
		}
	}
	return queue.Job{}, queue.Lease{}, queue.ErrNoJob
}

// next pulls one message if one is available now, nil if none.
func (q *Queue) next() (jetstream.Msg, error) {
	batch, err := q.cons.FetchNoWait(1)
	if err != nil {
		return nil, fmt.Errorf("natsq: pull job: %w", err)
	}
	var got jetstream.Msg
	for m := range batch.Messages() {
		got = m
	}
	if got == nil {
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("natsq: pull job: %w", err)
		}
	}
	return got, nil
}

// consider decides what to do with one delivered job message: claim it
// (ok), settle it, or hand it back.
func (q *Queue) consider(ctx context.Context, m jetstream.Msg, b queue.Budget) (queue.Job, queue.Lease, bool, error) {
	p, ok := parseJobMsg(m.Data())
	md, err := m.Metadata()
	if err != nil || !ok {
		m.Term() // not a ferry job message: nothing could ever run it
		return queue.Job{}, queue.Lease{}, false, nil
	}
	// The message carries the need, so a worker passes on what it cannot
	// fit without reading the job's state.
	if b.Fits != nil && !b.Fits(p.Need) {
		m.NakWithDelay(q.cfg.NotFitDelay)
		return queue.Job{}, queue.Lease{}, false, nil
	}
	for range casRetries {
		j, rev, err := q.get(ctx, p.ID)
		if errors.Is(err, queue.ErrNotFound) {
			q.dropOrWait(m, md)
			return queue.Job{}, queue.Lease{}, false, nil
		}
		if err != nil {
			m.Nak()
			return queue.Job{}, queue.Lease{}, false, err
		}
		if j.Seq != int64(md.Sequence.Stream) || j.Status.Terminal() {
			m.Ack() // a stray copy, or a job that ended (cancelled while queued)
			return queue.Job{}, queue.Lease{}, false, nil
		}
		if j.Status == queue.StatusInProgress && (j.CancelRequested || j.Attempts > q.reruns()) {
			// Its worker died; it was cancelled meanwhile, or ran too often.
			settleInterrupted(&j, q.reruns())
			if _, err := q.put(ctx, j, rev); isMismatch(err) {
				continue
			} else if err != nil {
				m.Nak()
				return queue.Job{}, queue.Lease{}, false, fmt.Errorf("natsq: settle job %s: %w", j.ID, err)
			}
			m.Ack()
			return queue.Job{}, queue.Lease{}, false, nil
		}
		claim(&j, b.Worker)
		nrev, err := q.put(ctx, j, rev)
		if isMismatch(err) {
			continue
		}
		if err != nil {
			m.Nak()
			return queue.Job{}, queue.Lease{}, false, fmt.Errorf("natsq: claim job %s: %w", j.ID, err)
		}
		l := queue.Lease{JobID: j.ID, Attempt: j.Attempts, Worker: b.Worker}
		if err := q.hold(l, m, j, nrev); err != nil {
			return queue.Job{}, queue.Lease{}, false, err
		}
		return j, l, true, nil
	}
	m.NakWithDelay(retryDelay)
	return queue.Job{}, queue.Lease{}, false, nil
}

// parseJobMsg reads a job message body; ok is false for anything ferry
// did not write.
func parseJobMsg(data []byte) (jobMsg, bool) {
	var p jobMsg
	if json.Unmarshal(data, &p) != nil || !validToken(p.ID) || p.Need.DeviceBytes < 0 || p.Need.HostBytes < 0 {
		return jobMsg{}, false
	}
	return p, true
}

// dropOrWait handles a message without a job state: the submit may still
// be writing it, or died half way (then the client never got the job).
func (q *Queue) dropOrWait(m jetstream.Msg, md *jetstream.MsgMetadata) {
	if time.Since(md.Timestamp) < orphanAge {
		m.NakWithDelay(retryDelay)
		return
	}
	m.Term()
}

func (q *Queue) reruns() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.maxReruns
}

// claim turns a job's state into a new run by worker.
func claim(j *queue.Job, worker string) {
	j.Status = queue.StatusInProgress
	j.Phase = queue.PhaseLoading
	j.Progress = 0
	j.Attempts++
	j.Dispatched = nil // this run's dispatch sets it again
	j.Worker = worker
	j.StartedAt = time.Now().UTC()
	j.Error = nil
}

// hold records a claimed lease and starts its keeper.
func (q *Queue) hold(l queue.Lease, m jetstream.Msg, j queue.Job, rev uint64) error {
	now := time.Now()
	ls := &lease{id: l.JobID, key: leaseKey(l), msg: m, done: make(chan struct{}),
		job: j, rev: rev, touched: now, acked: now, written: now}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		m.Nak()
		return queue.ErrClosed
	}
	q.held[ls.key] = ls
	q.wg.Add(1)
	q.mu.Unlock()
	m.InProgress()
	go q.keep(ls)
	return nil
}

// keep extends the lease's ack wait while the job reports progress. It
// stops when the job has been silent for StallTimeout, so a hung job's
// lease lapses and JetStream redelivers it; a dead process stops it too.
func (q *Queue) keep(ls *lease) {
	defer q.wg.Done()
	t := time.NewTicker(max(q.cfg.AckWait/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ls.done:
			return
		case <-q.bg.Done():
			return
		case <-t.C:
			ls.mu.Lock()
			stalled := time.Since(ls.touched) > q.cfg.StallTimeout
			ls.mu.Unlock()
			if stalled {
				return
			}
			ls.msg.InProgress()
			ls.mu.Lock()
			ls.acked = time.Now()
			ls.mu.Unlock()
		}
	}
}

// leaseOf returns this process's lease l, nil if it has none.
func (q *Queue) leaseOf(l queue.Lease) *lease {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[leaseKey(l)]
}

// holdsLocked reports whether this process runs job id; mu is held.
func (q *Queue) holdsLocked(id string) bool {
	for _, ls := range q.held {
		if ls.id == id {
			return true
		}
	}
	return false
}

// drop forgets a lease and stops its keeper.
func (q *Queue) drop(ls *lease) {
	q.mu.Lock()
	delete(q.held, ls.key)
	q.mu.Unlock()
	ls.end()
}

// Progress implements queue.Queue. Every call extends the ack wait (at
// most a few acks per ack wait); the state is written on a phase change
// and otherwise at most every ProgressEvery. Cancellation and a lost lease
// are seen through the watched view between writes.
func (q *Queue) Progress(ctx context.Context, l queue.Lease, u queue.Update) error {
	ls := q.leaseOf(l)
	if ls == nil {
		return queue.ErrLeaseLost
	}
	now := time.Now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.touched = now
	if now.Sub(ls.acked) >= q.cfg.AckWait/4 {
		ls.msg.InProgress()
		ls.acked = now
	}
	phaseChanged := u.Phase != "" && u.Phase != ls.job.Phase
	if !phaseChanged && u.Dispatched == nil && now.Sub(ls.written) < q.cfg.ProgressEvery {
		return q.checkView(ls, l)
	}
	j, err := q.writeLease(ctx, ls, l, func(j *queue.Job) {
		j.Progress = u.Progress
		if u.Phase != "" {
			j.Phase = u.Phase
		}
		if u.Measured != nil {
			j.Measured = *u.Measured
		}
		if u.Dispatched != nil {
			d := *u.Dispatched
			j.Dispatched = &d
		}
	})
	if err != nil {
		return err
	}
	ls.written = now
	if j.CancelRequested {
		return queue.ErrCancelled
	}
	return nil
}

// checkView looks for a newer state of the lease's job in the view: a
// cancel request, or another worker's claim. ls.mu is held.
func (q *Queue) checkView(ls *lease, l queue.Lease) error {
	m, ok := q.viewed(ls.id)
	switch {
	case !ok:
		q.drop(ls)
		return queue.ErrLeaseLost
	case m.rev <= ls.rev:
		return nil
	case lost(m.job, l):
		q.drop(ls)
		return queue.ErrLeaseLost
	case m.job.CancelRequested:
		return queue.ErrCancelled
	}
	return nil
}

// writeLease writes change onto the lease's job state with compare-and-set;
// on a conflict it rereads, and gives up with ErrLeaseLost when the job
// has moved on without this lease. ls.mu is held.
func (q *Queue) writeLease(ctx context.Context, ls *lease, l queue.Lease, change func(*queue.Job)) (queue.Job, error) {
	for range casRetries {
		n := ls.job
		change(&n)
		rev, err := q.put(ctx, n, ls.rev)
		if err == nil {
			ls.job, ls.rev = n, rev
			return n, nil
		}
		if !isMismatch(err) {
			return queue.Job{}, fmt.Errorf("natsq: update job %s: %w", ls.id, err)
		}
		j, rev, err := q.get(ctx, ls.id)
		if errors.Is(err, queue.ErrNotFound) || (err == nil && lost(j, l)) {
			q.drop(ls)
			return queue.Job{}, queue.ErrLeaseLost
		}
		if err != nil {
			return queue.Job{}, err
		}
		ls.job, ls.rev = j, rev
	}
	return queue.Job{}, fmt.Errorf("natsq: update job %s: too much contention", ls.id)
}

// finish ends a run: the terminal state is written first (the truth), the
// message acked second; if the ack is lost, the redelivered message finds
// a terminal state and is acked then.
func (q *Queue) finish(ctx context.Context, l queue.Lease, change func(*queue.Job, []string)) error {
	ls := q.leaseOf(l)
	if ls == nil {
		return queue.ErrLeaseLost
	}
	ls.mu.Lock()
	outputs := append([]string(nil), ls.outputs...)
	_, err := q.writeLease(ctx, ls, l, func(j *queue.Job) {
		change(j, outputs)
		j.EndedAt = time.Now().UTC()
	})
	ls.mu.Unlock()
	if err != nil {
		return err
	}
	q.drop(ls)
	ls.msg.DoubleAck(ctx) // an error here only delays the message's removal
	q.mu.Lock()
	q.notifyLocked()
	q.mu.Unlock()
	return nil
}

// Complete implements queue.Queue.
func (q *Queue) Complete(ctx context.Context, l queue.Lease, measured queue.Peaks) error {
	return q.finish(ctx, l, func(j *queue.Job, outputs []string) {
		j.Status = queue.StatusCompleted
		j.Progress = 100
		j.Measured = measured
		j.Outputs = mergeOutputs(j.Outputs, outputs)
	})
}

// Fail implements queue.Queue.
func (q *Queue) Fail(ctx context.Context, l queue.Lease, e queue.JobError, measured queue.Peaks) error {
	return q.finish(ctx, l, func(j *queue.Job, _ []string) {
		j.Status = queue.StatusFailed
		j.Error = &e
		j.Measured = measured
	})
}

// Cancelled implements queue.Queue; the job's outputs are removed.
func (q *Queue) Cancelled(ctx context.Context, l queue.Lease) error {
	err := q.finish(ctx, l, func(j *queue.Job, _ []string) {
		j.Status = queue.StatusCancelled
		j.Outputs = nil
	})
	if err != nil {
		return err
	}
	return q.removeOutputs(ctx, l.JobID)
}

func mergeOutputs(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range append(append([]string(nil), a...), b...) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}
