// Package natsq implements ferry serve's job queue (queue.Queue) over NATS
// JetStream, so the API and its workers can run in many processes on many
// machines. NATS is the engine the project chose for scale-out: one small
// Go module that ferry can embed (`--nats embedded`: a single binary is a
// single-node cluster, no other service), or a client of an existing
// cluster (`--nats nats://HOST:4222`).
//
// Layout on JetStream (PREFIX is "ferry" unless configured):
//
//   - stream PREFIX_JOBS, work-queue retention, subjects PREFIX.jobs.KIND.ID:
//     one message per job, removed when the job ends. All workers share the
//     durable pull consumer PREFIX-workers. A job message carries the
//     planner's predicted peaks; a worker whose own planner says the job
//     does not fit its budgets naks it with a delay, and another worker takes
//     it. While a job runs, its worker extends the ack wait with progress
//     acks; when a worker dies (or stops reporting progress for
//     Config.StallTimeout) the ack wait lapses and JetStream redelivers the
//     job to another worker, which runs it from scratch. Runs are bounded
//     (Config.MaxReruns re-runs, counted in the job's state, then the job
//     fails "interrupted").
//   - key-value bucket PREFIX_jobs: one key per job id, the queue.Job as
//     JSON. It is the truth about a job: every transition is a
//     compare-and-set on the key's revision, so a worker that lost its lease
//     can neither complete nor fail the job. The API reads states from it.
//   - object store PREFIX_outputs: outputs, named ID/VARIANT, and the
//     inputs a request names (its images), named in/ID/NAME: stored before
//     the job's message, kept through re-runs until the job is deleted.
//
// See README.md for how KEDA scales workers on the stream's backlog.
package natsq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ferry/server/queue"
)

// Config tunes the JetStream queue; zero fields take the defaults.
type Config struct {
	// Prefix names the stream, consumer, bucket and object store, so two
	// ferry deployments can share a cluster. Default "ferry".
	Prefix string
	// MaxQueue bounds the queued (not running) jobs; 0 is unbounded. The
	// count comes from this process's view of the job bucket, so it is
	// exact with one API node and approximate with several.
	MaxQueue int
	// AckWait is how long a job may go without a progress ack before
	// JetStream redelivers it. Default 30s.
	AckWait time.Duration
	// StallTimeout stops a worker from extending a lease whose job has
	// reported no progress for this long, so a hung job is redelivered too.
	// Default 10m.
	StallTimeout time.Duration
	// MaxReruns bounds how often a job whose worker died re-runs; Replay
	// overrides it. Default 2.
	MaxReruns int
	// Replicas is the replication of the stream, bucket and object store
	// (1 on a single node, 3 on a typical cluster). Default 1.
	Replicas int
	// OutputTTL expires outputs in the object store; 0 keeps them.
	OutputTTL time.Duration
	// NotFitDelay is how long a job a worker cannot fit waits before it is
	// offered again. Default 2s.
	NotFitDelay time.Duration
	// PollInterval is the longest Wait goes without firing: a redelivery
	// changes no job state, so waiting workers poll. Default 1s.
	PollInterval time.Duration
	// ProgressEvery is the least time between two progress writes to the
	// bucket within one phase (a phase change is written at once).
	// Default 250ms.
	ProgressEvery time.Duration
	// Worker is this process's worker name (the Budget.Worker it leases
	// with); Replay uses it to find the jobs it ran before a restart.
	Worker string
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "ferry"
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 10 * time.Minute
	}
	if c.MaxReruns <= 0 {
		c.MaxReruns = 2
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.NotFitDelay <= 0 {
		c.NotFitDelay = 2 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 250 * time.Millisecond
	}
	return c
}

// Names of the JetStream objects for a prefix; README.md's KEDA example
// uses the defaults.
func streamName(prefix string) string   { return strings.ToUpper(prefix) + "_JOBS" }
func consumerName(prefix string) string { return prefix + "-workers" }
func bucketName(prefix string) string   { return prefix + "_jobs" }
func storeName(prefix string) string    { return prefix + "_outputs" }

// KindVideo is the job kind of a video generation. Each kind has its own
// subject (PREFIX.jobs.KIND.ID) so later kinds (training, model loads) can
// get consumers of their own without touching this one.
const KindVideo = "video"

// Queue is queue.Queue over JetStream. It is safe for concurrent use.
type Queue struct {
	cfg    Config
	nc     *nats.Conn
	own    bool      // Close closes nc
	emb    *Embedded // Close shuts it down, when set
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	kv     jetstream.KeyValue
	obs    jetstream.ObjectStore

	bg     context.Context // background goroutines' lifetime
	stop   context.CancelFunc
	wg     sync.WaitGroup
	submit sync.Mutex // serialises the max-queue check with the write

	mu        sync.Mutex
	jobs      map[string]mirrored // this process's view of the bucket
	wake      chan struct{}
	held      map[string]*lease // by leaseKey
	maxReruns int
	closed    bool
	originID  string // this instance in relayed events
}

// jobMsg is the body of a job's stream message: what a worker needs to
// decide whether it can take the job without reading its state.
type jobMsg struct {
	ID   string     `json:"id"`
	Need queue.Need `json:"need"`
}

// setupTimeout bounds creating the stream, consumer, bucket and store.
const setupTimeout = 30 * time.Second

// Open builds the queue on an open connection (creating the stream,
// consumer, bucket and object store if they are missing) and loads the
// current job states. The caller keeps ownership of nc.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if !validToken(cfg.Prefix) {
		return nil, fmt.Errorf("natsq: prefix %q: use letters, digits, - and _ only", cfg.Prefix)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsq: jetstream: %w", err)
	}
	q := &Queue{cfg: cfg, nc: nc, js: js, jobs: map[string]mirrored{}, wake: make(chan struct{}),
		held: map[string]*lease{}, maxReruns: cfg.MaxReruns, originID: newOrigin()}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if err := q.setup(sctx); err != nil {
		return nil, err
	}
	q.bg, q.stop = context.WithCancel(context.Background())
	if err := q.startMirror(sctx); err != nil {
		q.stop()
		return nil, err
	}
	q.wg.Add(1)
	go q.poll()
	return q, nil
}

// Connect dials a NATS server or cluster (nats://HOST:4222, or several
// URLs separated by commas) and opens the queue on it; Close closes the
// connection.
func Connect(ctx context.Context, url, name string, cfg Config) (*Queue, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("natsq: connect %s: %w (is a nats-server with JetStream running there?)", url, err)
	}
	q, err := Open(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	q.own = true
	return q, nil
}

// OpenEmbedded starts a NATS server in this process and opens the queue on
// it through an in-process connection; Close shuts the server down.
func OpenEmbedded(ctx context.Context, o EmbeddedOptions, cfg Config) (*Queue, error) {
	emb, err := StartEmbedded(o)
	if err != nil {
		return nil, err
	}
	nc, err := emb.Connect("ferry-serve")
	if err != nil {
		emb.Shutdown()
		return nil, err
	}
	q, err := Open(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		emb.Shutdown()
		return nil, err
	}
	q.own, q.emb = true, emb
	return q, nil
}

// Embedded is the in-process server OpenEmbedded started, nil otherwise.
func (q *Queue) Embedded() *Embedded { return q.emb }

// setup creates or updates the JetStream objects the queue lives in.
func (q *Queue) setup(ctx context.Context) error {
	p := q.cfg.Prefix
	var err error
	q.stream, err = q.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        streamName(p),
		Description: "ferry serve jobs, one message per job until it ends",
		Subjects:    []string{p + ".jobs.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    q.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("natsq: create stream %s: %w", streamName(p), err)
	}
	if err := q.setupConsumer(ctx); err != nil {
		return err
	}
	q.kv, err = q.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucketName(p),
		Description: "ferry serve job states",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    q.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("natsq: create bucket %s: %w", bucketName(p), err)
	}
	q.obs, err = q.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      storeName(p),
		Description: "ferry serve job outputs",
		Storage:     jetstream.FileStorage,
		Replicas:    q.cfg.Replicas,
		TTL:         q.cfg.OutputTTL,
	})
	if err != nil {
		return fmt.Errorf("natsq: create object store %s: %w", storeName(p), err)
	}
	return nil
}

// setupConsumer creates the shared durable pull consumer. MaxDeliver is
// unlimited on purpose: naks from workers a job does not fit count as
// deliveries too, so JetStream's own bound would fail jobs that merely
// waited for a big enough worker. Runs are bounded by the job's Attempts.
func (q *Queue) setupConsumer(ctx context.Context) error {
	p := q.cfg.Prefix
	cc := jetstream.ConsumerConfig{
		Durable:       consumerName(p),
		Description:   "ferry serve workers",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		FilterSubject: p + ".jobs.>",
		Replicas:      q.cfg.Replicas,
	}
	cons, err := q.js.CreateOrUpdateConsumer(ctx, streamName(p), cc)
	if err != nil {
		// An older server may refuse to change an existing consumer's
		// settings; the existing one still works.
		existing, gerr := q.js.Consumer(ctx, streamName(p), consumerName(p))
		if gerr != nil {
			return fmt.Errorf("natsq: create consumer %s: %w", consumerName(p), err)
		}
		cons = existing
	}
	q.cons = cons
	return nil
}

// poll fires Wait at least every PollInterval.
func (q *Queue) poll() {
	defer q.wg.Done()
	t := time.NewTicker(q.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-q.bg.Done():
			return
		case <-t.C:
			q.mu.Lock()
			q.notifyLocked()
			q.mu.Unlock()
		}
	}
}

// Wait implements queue.Queue.
func (q *Queue) Wait() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

func (q *Queue) notifyLocked() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// Close implements queue.Queue. Jobs this process still runs are nak'ed so
// other workers take them at once instead of after the ack wait.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	for k, ls := range q.held {
		ls.end()
		ls.msg.Nak()
		delete(q.held, k)
	}
	q.mu.Unlock()
	q.stop()
	q.wg.Wait()
	if q.nc.IsConnected() {
		q.nc.FlushTimeout(time.Second) // the naks above, before the connection goes
	}
	if q.own {
		q.nc.Close()
	}
	if q.emb != nil {
		q.emb.Shutdown()
	}
	return nil
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// validToken keeps ids usable as one subject token and as a bucket key.
func validToken(s string) bool { return tokenRE.MatchString(s) }

var variantRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$`)

func validVariant(s string) bool { return variantRE.MatchString(s) && s != ".." }

func (q *Queue) subject(id string) string {
	return q.cfg.Prefix + ".jobs." + KindVideo + "." + id
}

// encodeJob writes a job's state, refusing one the server cannot carry.
func (q *Queue) encodeJob(j queue.Job) ([]byte, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("natsq: encode job %s: %w", j.ID, err)
	}
	if limit := q.nc.MaxPayload(); limit > 0 && int64(len(b)) > limit-1024 {
		return nil, fmt.Errorf("natsq: job %s: its state is %d bytes, over the NATS server's max_payload (%d): raise max_payload to 4MB in the server's configuration", j.ID, len(b), limit)
	}
	return b, nil
}

func decodeJob(b []byte) (queue.Job, error) {
	var j queue.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return queue.Job{}, fmt.Errorf("natsq: decode job state: %w", err)
	}
	return j, nil
}

func isMismatch(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }

var _ queue.Queue = (*Queue)(nil)
