package natsq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ferry/server/queue"
)

// casRetries bounds compare-and-set retries on one job; contention on a
// job is two or three parties at most (API, worker, a redelivery).
const casRetries = 16

// Submit implements queue.Queue. The job message is published first and
// the state written second, so the state's Seq is the message's stream
// sequence (submission order) and a worker that sees a message before its
// state retries for a moment; a message whose state never came (the API
// died in between, and the client never got a 202) is dropped by age.
func (q *Queue) Submit(ctx context.Context, j queue.Job) (queue.Job, int, error) {
	if !validToken(j.ID) {
		return queue.Job{}, 0, fmt.Errorf("natsq: submit: job id %q: use letters, digits, - and _ only", j.ID)
	}
	q.submit.Lock()
	defer q.submit.Unlock()
	if q.isClosed() {
		return queue.Job{}, 0, queue.ErrClosed
	}
	if _, err := q.kv.Get(ctx, j.ID); err == nil {
		return queue.Job{}, 0, fmt.Errorf("natsq: submit: job %s exists", j.ID)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return queue.Job{}, 0, fmt.Errorf("natsq: submit %s: %w", j.ID, err)
	}
	if q.cfg.MaxQueue > 0 && q.queuedBefore(-1) >= q.cfg.MaxQueue {
		return queue.Job{}, 0, queue.ErrQueueFull
	}
	body, err := json.Marshal(jobMsg{ID: j.ID, Need: j.Need()})
	if err != nil {
		return queue.Job{}, 0, fmt.Errorf("natsq: submit %s: %w", j.ID, err)
	}
	ack, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: q.subject(j.ID), Data: body})
	if err != nil {
		return queue.Job{}, 0, fmt.Errorf("natsq: submit %s: publish: %w", j.ID, err)
	}
	j.Seq = int64(ack.Sequence)
	j.Status = queue.StatusQueued
	if j.CreatedAt.IsZero() {
		j.CreatedAt = time.Now().UTC()
	}
	b, err := q.encodeJob(j)
	if err != nil {
		return queue.Job{}, 0, err
	}
	rev, err := q.kv.Create(ctx, j.ID, b)
	if err != nil {
		q.stream.DeleteMsg(ctx, ack.Sequence) // best effort: else dropped by age
		return queue.Job{}, 0, fmt.Errorf("natsq: submit %s: store state: %w", j.ID, err)
	}
	q.apply(j, rev)
	return j, q.queuedBefore(j.Seq), nil
}

func (q *Queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// get reads a job's state and its revision from the bucket.
func (q *Queue) get(ctx context.Context, id string) (queue.Job, uint64, error) {
	if !validToken(id) {
		return queue.Job{}, 0, queue.ErrNotFound
	}
	e, err := q.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return queue.Job{}, 0, queue.ErrNotFound
	}
	if err != nil {
		return queue.Job{}, 0, fmt.Errorf("natsq: read job %s: %w", id, err)
	}
	j, err := decodeJob(e.Value())
	if err != nil {
		return queue.Job{}, 0, err
	}
	q.apply(j, e.Revision())
	return j, e.Revision(), nil
}

// Get implements queue.Queue; it reads the bucket, not the view.
func (q *Queue) Get(ctx context.Context, id string) (queue.Job, error) {
	j, _, err := q.get(ctx, id)
	return j, err
}

// put writes a job's new state if the key is still at rev.
func (q *Queue) put(ctx context.Context, j queue.Job, rev uint64) (uint64, error) {
	b, err := q.encodeJob(j)
	if err != nil {
		return 0, err
	}
	nrev, err := q.kv.Update(ctx, j.ID, b, rev)
	if err != nil {
		return 0, err
	}
	q.apply(j, nrev)
	return nrev, nil
}

// modify applies change to a job's state with compare-and-set, rereading
// on conflict. change reports whether there is anything to write.
func (q *Queue) modify(ctx context.Context, id string, change func(*queue.Job) bool) (queue.Job, error) {
	for range casRetries {
		j, rev, err := q.get(ctx, id)
		if err != nil {
			return queue.Job{}, err
		}
		if !change(&j) {
			return j, nil
		}
		_, err = q.put(ctx, j, rev)
		if isMismatch(err) {
			continue
		}
		if err != nil {
			return queue.Job{}, fmt.Errorf("natsq: update job %s: %w", id, err)
		}
		return j, nil
	}
	return queue.Job{}, fmt.Errorf("natsq: update job %s: too much contention", id)
}

// Cancel implements queue.Queue. A queued job's message is deleted too, so
// the backlog KEDA scales on drops at once (a worker that still gets it
// sees the state and acks it away).
func (q *Queue) Cancel(ctx context.Context, id string) (queue.Job, error) {
	var wasQueued bool
	j, err := q.modify(ctx, id, func(j *queue.Job) bool {
		wasQueued = false
		switch {
		case j.Status.Terminal() || j.CancelRequested:
			return false
		case j.Status == queue.StatusQueued:
			wasQueued = true
			j.Status = queue.StatusCancelled
			j.EndedAt = time.Now().UTC()
		default:
			j.CancelRequested = true
		}
		return true
	})
	if err != nil {
		return queue.Job{}, err
	}
	if wasQueued && j.Seq > 0 {
		q.stream.DeleteMsg(ctx, uint64(j.Seq))
	}
	return j, nil
}

// Delete implements queue.Queue: the outputs first, then the state.
func (q *Queue) Delete(ctx context.Context, id string) error {
	j, err := q.Get(ctx, id)
	if err != nil {
		return err
	}
	if !j.Status.Terminal() {
		return fmt.Errorf("natsq: delete %s: job is %s", id, j.Status)
	}
	if err := q.removeOutputs(ctx, id); err != nil {
		return err
	}
	if err := q.DropInputs(ctx, id); err != nil {
		return err
	}
	if err := q.kv.Purge(ctx, id); err != nil {
		return fmt.Errorf("natsq: delete %s: %w", id, err)
	}
	q.forgetNow(id)
	return nil
}

func outputName(id, variant string) string { return id + "/" + variant }

// PutOutput implements queue.Queue. The object store makes it atomic: the
// object's description is written after all its chunks, and readers go
// through the description.
func (q *Queue) PutOutput(ctx context.Context, id, variant string, data []byte) error {
	if !validToken(id) || !validVariant(variant) {
		return fmt.Errorf("natsq: put output: bad id or variant %q/%q", id, variant)
	}
	if _, err := q.obs.PutBytes(ctx, outputName(id, variant), data); err != nil {
		return fmt.Errorf("natsq: put output %s/%s: %w", id, variant, err)
	}
	var mine []*lease
	q.mu.Lock()
	for _, ls := range q.held {
		if ls.id == id {
			mine = append(mine, ls)
		}
	}
	q.mu.Unlock()
	for _, ls := range mine {
		ls.addOutput(variant) // outside q.mu: the lock order is ls.mu, then q.mu
	}
	return nil
}

// GetOutput implements queue.Queue.
func (q *Queue) GetOutput(ctx context.Context, id, variant string) ([]byte, error) {
	if !validToken(id) || !validVariant(variant) {
		return nil, queue.ErrNoOutput
	}
	return q.getObject(ctx, outputName(id, variant), queue.ErrNoOutput)
}

// getObject reads an object; missing is returned where there is none.
func (q *Queue) getObject(ctx context.Context, name string, missing error) ([]byte, error) {
	b, err := q.obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, missing
	}
	if err != nil {
		return nil, fmt.Errorf("natsq: get %s: %w", name, err)
	}
	return b, nil
}

// inputName is an input's object: under "in/", apart from the outputs
// (id/variant), which a re-run or a cancel removes.
func inputName(id, name string) string { return "in/" + id + "/" + name }

// PutInput implements queue.Queue: an object, atomic as PutOutput's.
func (q *Queue) PutInput(ctx context.Context, id, name string, data []byte) error {
	if !validToken(id) || !validVariant(name) {
		return fmt.Errorf("natsq: put input: bad id or name %q/%q", id, name)
	}
	if _, err := q.obs.PutBytes(ctx, inputName(id, name), data); err != nil {
		return fmt.Errorf("natsq: put input %s/%s: %w", id, name, err)
	}
	return nil
}

// GetInput implements queue.Queue.
func (q *Queue) GetInput(ctx context.Context, id, name string) ([]byte, error) {
	if !validToken(id) || !validVariant(name) {
		return nil, queue.ErrNoInput
	}
	return q.getObject(ctx, inputName(id, name), queue.ErrNoInput)
}

// DropInputs implements queue.Queue.
func (q *Queue) DropInputs(ctx context.Context, id string) error {
	return q.removeObjects(ctx, inputName(id, ""))
}

// removeOutputs deletes every stored variant of a job.
func (q *Queue) removeOutputs(ctx context.Context, id string) error {
	return q.removeObjects(ctx, id+"/")
}

// removeObjects deletes the objects whose names start with prefix.
func (q *Queue) removeObjects(ctx context.Context, prefix string) error {
	infos, err := q.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("natsq: list objects %s: %w", prefix, err)
	}
	for _, in := range infos {
		if !strings.HasPrefix(in.Name, prefix) {
			continue
		}
		if err := q.obs.Delete(ctx, in.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("natsq: delete object %s: %w", in.Name, err)
		}
	}
	return nil
}

// Replay implements queue.Queue. JetStream redelivers the jobs a dead
// worker held by itself, and queued jobs simply stay in the stream; what is
// left is to set the run bound and to settle the jobs this worker (by its
// Config.Worker name) was running when it stopped, so they do not show as
// running until their ack wait lapses.
func (q *Queue) Replay(ctx context.Context, maxReruns int) ([]queue.Job, error) {
	q.mu.Lock()
	q.maxReruns = maxReruns
	var mine []string
	for id, m := range q.jobs {
		if !m.deleted && m.job.Status == queue.StatusInProgress && q.cfg.Worker != "" && m.job.Worker == q.cfg.Worker && !q.holdsLocked(id) {
			mine = append(mine, id)
		}
	}
	q.mu.Unlock()
	var touched []queue.Job
	for _, id := range mine {
		j, err := q.modify(ctx, id, func(j *queue.Job) bool {
			if j.Status != queue.StatusInProgress || j.Worker != q.cfg.Worker {
				return false
			}
			settleInterrupted(j, maxReruns)
			return true
		})
		if err != nil {
			return touched, err
		}
		touched = append(touched, j)
	}
	return touched, nil
}

// settleInterrupted moves a job whose run was lost back to queued, or to
// its end when it was cancelled or has re-run maxReruns times already.
func settleInterrupted(j *queue.Job, maxReruns int) {
	switch {
	case j.CancelRequested:
		j.Status = queue.StatusCancelled
		j.EndedAt = time.Now().UTC()
	case j.Attempts > maxReruns:
		j.Status = queue.StatusFailed
		j.Error = &queue.JobError{Code: queue.CodeInterrupted,
			Message: fmt.Sprintf("the worker running this job stopped, %d times", j.Attempts)}
		j.EndedAt = time.Now().UTC()
	default:
		j.Status = queue.StatusQueued
		j.Phase = queue.PhaseNone
		j.Progress = 0
		j.Worker = ""
	}
}
