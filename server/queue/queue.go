// Package queue defines the job queue that ferry serve runs on, and its
// local, journal-backed implementation. The same interface is implemented
// over NATS JetStream in server/natsq, so the API and the workers do not
// know which one is underneath.
//
// Interface rule: fields and methods may be added; anything else is
// announced with a CHANGED line here.
//
// CHANGED (server): max-queue counts jobs queued or in progress, not only
// queued ones (Submit's doc); Replay's argument is maxReruns (a running job
// is requeued while Attempts <= maxReruns).
package queue

import (
	"context"
	"errors"
	"time"
)

// Status is a job's coarse state, as the OpenAI videos API names it.
type Status string

// The job statuses.
const (
	StatusQueued     Status = "queued"
	StatusInProgress Status = "in_progress"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
	StatusCancelled  Status = "cancelled"
)

// Terminal reports whether no further transition can happen.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Phase is where a running job is: loading, text, denoise, vae, output.
type Phase string

// The phases of a running job.
const (
	PhaseNone    Phase = ""
	PhaseLoading Phase = "loading"
	PhaseText    Phase = "text"
	PhaseDenoise Phase = "denoise"
	PhaseVAE     Phase = "vae"
	PhaseOutput  Phase = "output"
)

// Error codes a job can fail with.
const (
	CodeInterrupted = "interrupted" // the process died while it ran, too often
	CodeOOM         = "oom"         // a runtime allocation failed
	CodeDiskFull    = "disk_full"   // an output could not be written
	CodeInternal    = "internal_error"
	CodeBadRequest  = "invalid_request"
)

// JobError is the {code, message} a failed job carries.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Peaks is a pair of memory peaks in bytes and a duration in seconds.
type Peaks struct {
	DeviceBytes int64   `json:"device_bytes"`
	HostBytes   int64   `json:"host_bytes"`
	Seconds     float64 `json:"seconds"`
	// Plan names the residency plan: predicted at admission (against the
	// whole budget); dispatched and measured, the one that ran (chosen
	// again at dispatch against what was resident then).
	Plan string `json:"plan,omitempty"`
	// LoadSeconds (predicted) is what loading the weights the plan keeps
	// resident costs a job that finds none of them loaded: what a warm job
	// saves.
	LoadSeconds float64 `json:"load_seconds,omitempty"`
	// Warm (measured) says the job found its model's runtime resident:
	// no checkpoint opened, no plan made. Weights demoted since may still
	// have been loaded again; DiskBytes says how many came from disk.
	// Warm (dispatched) says the job found every weight its model kept
	// after its last job still held: Seconds leaves LoadSeconds out.
	Warm bool `json:"warm,omitempty"`
	// DiskBytes (measured) is what the job read from the checkpoint: 0
	// when every weight it ran was in memory already.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
}

// Need is what a job asks of a worker, for leasing: the model and the
// planner's predicted peaks. A worker leases only jobs whose need fits.
type Need struct {
	Model       string `json:"model"`
	DeviceBytes int64  `json:"device_bytes"`
	HostBytes   int64  `json:"host_bytes"`
}

// Job is one request and its state. Request is the raw JSON body the API
// accepted (validated); the queue stores it opaquely.
type Job struct {
	ID        string    `json:"id"`
	Model     string    `json:"model"`
	Request   []byte    `json:"request"`
	Status    Status    `json:"status"`
	Phase     Phase     `json:"phase,omitempty"`
	Progress  float64   `json:"progress"`
	Error     *JobError `json:"error,omitempty"`
	Predicted Peaks     `json:"predicted"`
	// Dispatched is the prediction for the plan the job runs, chosen
	// again at dispatch against what other models hold then (Predicted is
	// admission's, against the whole budget); nil until then.
	Dispatched *Peaks    `json:"dispatched,omitempty"`
	Measured   Peaks     `json:"measured"`
	Attempts   int       `json:"attempts"`
	Worker     string    `json:"worker,omitempty"`
	Outputs    []string  `json:"outputs,omitempty"` // variant names stored
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at,omitempty"`
	EndedAt    time.Time `json:"ended_at,omitempty"`
	// CancelRequested is set by Cancel on a running job; the worker
	// holding the lease sees it on its next Progress call.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Seq orders jobs by submission; the position in the queue follows it.
	Seq int64 `json:"seq"`
}

// Need returns the job's leasing need.
func (j *Job) Need() Need {
	return Need{Model: j.Model, DeviceBytes: j.Predicted.DeviceBytes, HostBytes: j.Predicted.HostBytes}
}

// Budget is what a worker can take: it leases a job only if fits says so.
// Fits may be nil (anything fits).
type Budget struct {
	Worker string
	Fits   func(Need) bool
}

// Lease is a worker's hold on a running job.
type Lease struct {
	JobID   string
	Attempt int
	Worker  string
}

// Update is a progress report on a lease; it doubles as the heartbeat.
type Update struct {
	Phase    Phase
	Progress float64
	Measured *Peaks // optional: the peaks so far
	// Dispatched (optional) is the prediction for the plan chosen at
	// dispatch (Job.Dispatched); it is journaled as a phase change is.
	Dispatched *Peaks
}

// Page selects a slice of the job list, newest first.
type Page struct {
	After string // a job id: list the jobs older than it
	Limit int
}

// Errors the queue reports.
var (
	ErrNotFound  = errors.New("job not found")
	ErrQueueFull = errors.New("queue is full")
	ErrNoJob     = errors.New("no job available")
	ErrLeaseLost = errors.New("lease lost") // the job moved on without this worker
	ErrCancelled = errors.New("job cancelled")
	ErrNoOutput  = errors.New("output not found")
	ErrNoInput   = errors.New("input not found")
	ErrClosed    = errors.New("queue closed")
)

// Queue is the job store and work queue. Every transition is durable
// before the method returns.
type Queue interface {
	// Submit stores a new queued job (ID, Model, Request, Predicted set by
	// the caller) and returns it with its 0-based queue position. It
	// fails with ErrQueueFull when max-queue jobs are waiting or running
	// (counting running ones makes the limit exact under concurrency).
	Submit(ctx context.Context, j Job) (Job, int, error)
	// Lease hands the oldest queued job that fits b to the worker and marks
	// it in_progress (Attempts incremented). It returns ErrNoJob at once if
	// none fits; callers poll or wait on Wait.
	Lease(ctx context.Context, b Budget) (Job, Lease, error)
	// Wait returns a channel closed the next time a job is submitted or
	// released (a hint; Lease decides).
	Wait() <-chan struct{}
	// Progress records phase/progress on a lease and extends it. It returns
	// ErrCancelled when a cancel was requested, ErrLeaseLost if the lease
	// is no longer the job's.
	Progress(ctx context.Context, l Lease, u Update) error
	// Complete marks the job completed with its measured peaks; its outputs
	// must have been Put first.
	Complete(ctx context.Context, l Lease, measured Peaks) error
	// Fail marks the job failed with e.
	Fail(ctx context.Context, l Lease, e JobError, measured Peaks) error
	// Cancel cancels a queued job at once, or requests cancellation of a
	// running one (the worker acknowledges with Cancelled). Cancelling a
	// terminal job is a no-op. ErrNotFound for an unknown id.
	Cancel(ctx context.Context, id string) (Job, error)
	// Cancelled marks a leased job cancelled (the worker stopped).
	Cancelled(ctx context.Context, l Lease) error
	// Get returns a job's state.
	Get(ctx context.Context, id string) (Job, error)
	// List returns jobs newest first, and whether more follow.
	List(ctx context.Context, p Page) ([]Job, bool, error)
	// Delete removes a terminal job and its outputs (a non-terminal one is
	// cancelled first by the caller).
	Delete(ctx context.Context, id string) error
	// Position returns a queued job's 0-based position, -1 if not queued.
	Position(ctx context.Context, id string) (int, error)
	// Depth returns the number of queued and running jobs.
	Depth(ctx context.Context) (queued, running int, err error)
	// PutOutput stores an output variant for a job (atomically: a reader
	// sees all of it or nothing).
	PutOutput(ctx context.Context, id, variant string, data []byte) error
	// GetOutput returns a stored output variant, ErrNoOutput if absent.
	GetOutput(ctx context.Context, id, variant string) ([]byte, error)
	// PutInput stores an input a job's request names (an image), before
	// the job is submitted: atomically, where every worker can read it,
	// kept through re-runs until the job is deleted.
	PutInput(ctx context.Context, id, name string, data []byte) error
	// GetInput returns a stored input, ErrNoInput if absent.
	GetInput(ctx context.Context, id, name string) ([]byte, error)
	// DropInputs removes a job's inputs (its submission failed).
	DropInputs(ctx context.Context, id string) error
	// Replay restores state after a restart: queued jobs stay queued in
	// order; a job that was running goes back to queued (to re-run from
	// scratch) while it has re-run fewer than maxReruns times (Attempts <=
	// maxReruns), and fails with CodeInterrupted otherwise. It returns the
	// jobs it requeued or failed.
	Replay(ctx context.Context, maxReruns int) ([]Job, error)
	// Close releases the queue's files and connections.
	Close() error
}
