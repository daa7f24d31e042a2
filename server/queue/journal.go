package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Journal is the local Queue: every transition is one JSON line appended to
// DIR/journal.jsonl and fsync'd before the call returns; on Open the file is
// replayed (last record per job wins) and compacted. Outputs live in
// DIR/outputs/ID/VARIANT, written to a temp file and renamed.
type Journal struct {
	dir      string
	maxQueue int

	mu     sync.Mutex
	f      *os.File
	jobs   map[string]*Job
	seq    int64
	wake   chan struct{}
	closed bool
}

// record is one journal line: a job snapshot, or a deletion.
type record struct {
	Job     *Job   `json:"job,omitempty"`
	Deleted string `json:"deleted,omitempty"`
}

const journalName = "journal.jsonl"

// OpenJournal opens (or creates) the journal in dir. maxQueue bounds the
// number of jobs waiting or running (0: unbounded).
func OpenJournal(dir string, maxQueue int) (*Journal, error) {
	if err := os.MkdirAll(filepath.Join(dir, "outputs"), 0o755); err != nil {
		return nil, fmt.Errorf("journal: create data dir: %w", err)
	}
	q := &Journal{dir: dir, maxQueue: maxQueue, jobs: map[string]*Job{}, wake: make(chan struct{})}
	if err := q.load(); err != nil {
		return nil, err
	}
	if err := q.compact(); err != nil {
		return nil, err
	}
	return q, nil
}

// load reads the journal, tolerating a torn last line (a crash mid-append:
// that transition was never acknowledged).
func (q *Journal) load() error {
	f, err := os.Open(filepath.Join(q.dir, journalName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: open: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		if r.Deleted != "" {
			delete(q.jobs, r.Deleted)
			continue
		}
		if r.Job != nil && r.Job.ID != "" {
			q.jobs[r.Job.ID] = r.Job
			if r.Job.Seq > q.seq {
				q.seq = r.Job.Seq
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("journal: read: %w", err)
	}
	return nil
}

// compact rewrites the journal as one record per live job (temp + rename)
// and opens it for appending.
func (q *Journal) compact() error {
	path := filepath.Join(q.dir, journalName)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, j := range q.sorted() {
		b, _ := json.Marshal(record{Job: j})
		w.Write(append(b, '\n'))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	f.Close()
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	syncDir(q.dir)
	q.f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("journal: reopen: %w", err)
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// sorted returns the jobs in submission order.
func (q *Journal) sorted() []*Job {
	out := make([]*Job, 0, len(q.jobs))
	for _, j := range q.jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Seq < out[b].Seq })
	return out
}

// append writes r and fsyncs; the caller holds mu.
func (q *Journal) append(r record) error {
	if q.closed {
		return ErrClosed
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	if _, err := q.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("journal: append: %w", err)
	}
	if err := q.f.Sync(); err != nil {
		return fmt.Errorf("journal: fsync: %w", err)
	}
	return nil
}

// commit journals the new state of a job, then installs it. On a journal
// error the in-memory state is left as it was.
func (q *Journal) commit(j Job) error {
	if err := q.append(record{Job: &j}); err != nil {
		return err
	}
	q.jobs[j.ID] = &j
	return nil
}

// notify wakes every waiter; the caller holds mu.
func (q *Journal) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// Wait implements Queue.
func (q *Journal) Wait() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

func (q *Journal) queuedLocked() []*Job {
	var out []*Job
	for _, j := range q.sorted() {
		if j.Status == StatusQueued {
			out = append(out, j)
		}
	}
	return out
}

// Submit implements Queue.
func (q *Journal) Submit(_ context.Context, j Job) (Job, int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if j.ID == "" {
		return Job{}, 0, fmt.Errorf("journal: submit: empty job id")
	}
	if _, dup := q.jobs[j.ID]; dup {
		return Job{}, 0, fmt.Errorf("journal: submit: job %s exists", j.ID)
	}
	queued := q.queuedLocked()
	if q.maxQueue > 0 && len(queued)+q.runningLocked() >= q.maxQueue {
		return Job{}, 0, ErrQueueFull
	}
	q.seq++
	j.Seq = q.seq
	j.Status = StatusQueued
	if j.CreatedAt.IsZero() {
		j.CreatedAt = time.Now().UTC()
	}
	if err := q.commit(j); err != nil {
		return Job{}, 0, err
	}
	q.notify()
	return j, len(queued), nil
}

// runningLocked counts jobs in progress; the caller holds mu.
func (q *Journal) runningLocked() int {
	n := 0
	for _, j := range q.jobs {
		if j.Status == StatusInProgress {
			n++
		}
	}
	return n
}

// Lease implements Queue.
func (q *Journal) Lease(_ context.Context, b Budget) (Job, Lease, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, j := range q.queuedLocked() {
		if b.Fits != nil && !b.Fits(j.Need()) {
			continue
		}
		n := *j
		n.Status = StatusInProgress
		n.Phase = PhaseLoading
		n.Progress = 0
		n.Attempts++
		n.Dispatched = nil // this run's dispatch sets it again
		n.Worker = b.Worker
		n.StartedAt = time.Now().UTC()
		if err := q.commit(n); err != nil {
			return Job{}, Lease{}, err
		}
		return n, Lease{JobID: n.ID, Attempt: n.Attempts, Worker: b.Worker}, nil
	}
	return Job{}, Lease{}, ErrNoJob
}

// held returns the job a lease refers to, if the lease still holds it.
func (q *Journal) held(l Lease) (*Job, error) {
	j, ok := q.jobs[l.JobID]
	if !ok {
		return nil, ErrNotFound
	}
	if j.Status != StatusInProgress || j.Attempts != l.Attempt {
		return nil, ErrLeaseLost
	}
	return j, nil
}

// Progress implements Queue. Progress records are kept in memory only
// (they are advisory; losing them in a crash costs nothing), but a phase
// change is journaled so a restart knows where the job died.
func (q *Journal) Progress(_ context.Context, l Lease, u Update) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, err := q.held(l)
	if err != nil {
		return err
	}
	n := *j
	n.Progress = u.Progress
	if u.Measured != nil {
		n.Measured = *u.Measured
	}
	if u.Dispatched != nil {
		d := *u.Dispatched
		n.Dispatched = &d
	}
	phaseChanged := u.Phase != "" && u.Phase != j.Phase
	if u.Phase != "" {
		n.Phase = u.Phase
	}
	if phaseChanged || u.Dispatched != nil {
		if err := q.commit(n); err != nil {
			return err
		}
	} else {
		q.jobs[n.ID] = &n
	}
	if n.CancelRequested {
		return ErrCancelled
	}
	return nil
}

// finish moves a held job to a terminal status.
func (q *Journal) finish(l Lease, s Status, e *JobError, measured *Peaks) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, err := q.held(l)
	if err != nil {
		return err
	}
	n := *j
	n.Status = s
	n.Error = e
	if measured != nil {
		n.Measured = *measured
	}
	if s == StatusCompleted {
		n.Progress = 100
		n.Outputs = q.listOutputs(n.ID)
	}
	n.EndedAt = time.Now().UTC()
	if err := q.commit(n); err != nil {
		return err
	}
	q.notify()
	return nil
}

// Complete implements Queue.
func (q *Journal) Complete(_ context.Context, l Lease, measured Peaks) error {
	return q.finish(l, StatusCompleted, nil, &measured)
}

// Fail implements Queue.
func (q *Journal) Fail(_ context.Context, l Lease, e JobError, measured Peaks) error {
	return q.finish(l, StatusFailed, &e, &measured)
}

// Cancelled implements Queue.
func (q *Journal) Cancelled(_ context.Context, l Lease) error {
	err := q.finish(l, StatusCancelled, nil, nil)
	if err == nil {
		q.removeOutputs(l.JobID)
	}
	return err
}

// Cancel implements Queue.
func (q *Journal) Cancel(_ context.Context, id string) (Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[id]
	if !ok {
		return Job{}, ErrNotFound
	}
	n := *j
	switch {
	case n.Status.Terminal() || n.CancelRequested:
		return n, nil
	case n.Status == StatusQueued:
		n.Status = StatusCancelled
		n.EndedAt = time.Now().UTC()
	default:
		n.CancelRequested = true
	}
	if err := q.commit(n); err != nil {
		return Job{}, err
	}
	q.notify()
	return n, nil
}

// Get implements Queue.
func (q *Journal) Get(_ context.Context, id string) (Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[id]
	if !ok {
		return Job{}, ErrNotFound
	}
	return *j, nil
}

// List implements Queue.
func (q *Journal) List(_ context.Context, p Page) ([]Job, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	all := q.sorted()
	limit := p.Limit
	if limit <= 0 {
		limit = 20
	}
	var out []Job
	started := p.After == ""
	for i := len(all) - 1; i >= 0; i-- {
		j := all[i]
		if !started {
			started = j.ID == p.After
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, *j)
	}
	return out, false, nil
}

// Delete implements Queue.
func (q *Journal) Delete(_ context.Context, id string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[id]
	if !ok {
		return ErrNotFound
	}
	if !j.Status.Terminal() {
		return fmt.Errorf("journal: delete %s: job is %s", id, j.Status)
	}
	if err := q.append(record{Deleted: id}); err != nil {
		return err
	}
	delete(q.jobs, id)
	q.removeOutputs(id)
	q.removeInputs(id)
	return nil
}

// Position implements Queue.
func (q *Journal) Position(_ context.Context, id string) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, j := range q.queuedLocked() {
		if j.ID == id {
			return i, nil
		}
	}
	if _, ok := q.jobs[id]; !ok {
		return -1, ErrNotFound
	}
	return -1, nil
}

// Depth implements Queue.
func (q *Journal) Depth(_ context.Context) (int, int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var queued, running int
	for _, j := range q.jobs {
		switch j.Status {
		case StatusQueued:
			queued++
		case StatusInProgress:
			running++
		}
	}
	return queued, running, nil
}

// validName keeps ids and variants to one plain path element.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`) && len(s) < 200
}

func (q *Journal) outputDir(id string) string { return filepath.Join(q.dir, "outputs", id) }

// PutOutput implements Queue: temp file, fsync, rename, so a reader (or a
// restart) never sees a partial file.
func (q *Journal) PutOutput(_ context.Context, id, variant string, data []byte) error {
	return putFile(q.outputDir, "output", id, variant, data)
}

// putFile writes a job's file name under dir(id) atomically; what names
// it in errors ("output", "input").
func putFile(dir func(string) string, what, id, name string, data []byte) error {
	if !validName(id) || !validName(name) {
		return fmt.Errorf("journal: put %s: bad id or name %q/%q", what, id, name)
	}
	d := dir(id)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("journal: put %s: %w", what, err)
	}
	return WriteFileAtomic(filepath.Join(d, name), data)
}

// getFile reads a job's file name under dir(id); missing is returned
// where there is none.
func getFile(dir func(string) string, what, id, name string, missing error) ([]byte, error) {
	if !validName(id) || !validName(name) {
		return nil, missing
	}
	b, err := os.ReadFile(filepath.Join(dir(id), name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, missing
	}
	if err != nil {
		return nil, fmt.Errorf("journal: get %s: %w", what, err)
	}
	return b, nil
}

// WriteFileAtomic writes data to path through a temp file in the same
// directory, fsync'd and renamed; on any error the temp file is removed.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	syncDir(filepath.Dir(path))
	return nil
}

// GetOutput implements Queue.
func (q *Journal) GetOutput(_ context.Context, id, variant string) ([]byte, error) {
	return getFile(q.outputDir, "output", id, variant, ErrNoOutput)
}

func (q *Journal) inputDir(id string) string { return filepath.Join(q.dir, "inputs", id) }

// PutInput implements Queue, as PutOutput writes.
func (q *Journal) PutInput(_ context.Context, id, name string, data []byte) error {
	return putFile(q.inputDir, "input", id, name, data)
}

// GetInput implements Queue.
func (q *Journal) GetInput(_ context.Context, id, name string) ([]byte, error) {
	return getFile(q.inputDir, "input", id, name, ErrNoInput)
}

// DropInputs implements Queue.
func (q *Journal) DropInputs(_ context.Context, id string) error {
	q.removeInputs(id)
	return nil
}

func (q *Journal) removeInputs(id string) {
	if validName(id) {
		os.RemoveAll(q.inputDir(id))
	}
}

// listOutputs names the stored variants of a job.
func (q *Journal) listOutputs(id string) []string {
	ents, _ := os.ReadDir(q.outputDir(id))
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func (q *Journal) removeOutputs(id string) {
	if validName(id) {
		os.RemoveAll(q.outputDir(id))
	}
}

// Replay implements Queue. Temp files a crash left behind are removed, as
// are the outputs of jobs that did not complete and the inputs of jobs
// never submitted.
func (q *Journal) Replay(_ context.Context, maxReruns int) ([]Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var touched []Job
	for _, j := range q.sorted() {
		if j.Status != StatusCompleted {
			q.removeOutputs(j.ID)
		} else {
			q.removeTemps(j.ID)
		}
		if j.Status != StatusInProgress {
			continue
		}
		n := *j
		if n.CancelRequested {
			n.Status = StatusCancelled
			n.EndedAt = time.Now().UTC()
		} else if n.Attempts > maxReruns {
			n.Status = StatusFailed
			n.Error = &JobError{Code: CodeInterrupted, Message: fmt.Sprintf("the server stopped while this job ran, %d times", n.Attempts)}
			n.EndedAt = time.Now().UTC()
		} else {
			n.Status = StatusQueued
			n.Phase = PhaseNone
			n.Progress = 0
			n.Worker = ""
		}
		if err := q.commit(n); err != nil {
			return touched, err
		}
		touched = append(touched, n)
	}
	q.sweepInputs()
	q.notify()
	return touched, nil
}

// sweepInputs removes the inputs of jobs the journal does not know (a
// crash between PutInput and Submit) and temp files a crash left.
func (q *Journal) sweepInputs() {
	root := filepath.Join(q.dir, "inputs")
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if _, ok := q.jobs[e.Name()]; !ok {
			q.removeInputs(e.Name())
			continue
		}
		files, _ := os.ReadDir(filepath.Join(root, e.Name()))
		for _, f := range files {
			if strings.HasPrefix(f.Name(), ".tmp-") {
				os.Remove(filepath.Join(root, e.Name(), f.Name()))
			}
		}
	}
}

func (q *Journal) removeTemps(id string) {
	ents, _ := os.ReadDir(q.outputDir(id))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			os.Remove(filepath.Join(q.outputDir(id), e.Name()))
		}
	}
}

// Close implements Queue.
func (q *Journal) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	return q.f.Close()
}

var _ Queue = (*Journal)(nil)
