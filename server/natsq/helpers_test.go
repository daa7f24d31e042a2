package natsq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"ferry/server/natsq/natstest"
	"ferry/server/queue"
)

// TestMain lets the test binary double as a worker process (see
// workerMain), so the tests can kill a real worker process.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// fastConfig keeps redeliveries quick: a dead worker's job comes back
// after about a second.
func fastConfig() Config {
	return Config{
		AckWait:       time.Second,
		StallTimeout:  300 * time.Millisecond,
		PollInterval:  50 * time.Millisecond,
		NotFitDelay:   200 * time.Millisecond,
		ProgressEvery: time.Millisecond,
		MaxReruns:     2,
	}
}

// startServer runs an embedded server listening on a free loopback port.
func startServer(t *testing.T) *Embedded {
	t.Helper()
	emb, err := StartEmbedded(EmbeddedOptions{StoreDir: natstest.StoreDir(t), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Shutdown)
	if emb.ClientURL() == "" {
		t.Fatal("embedded server has no client URL although it listens")
	}
	return emb
}

// mustConnectInProcess opens a socketless connection to emb.
func mustConnectInProcess(t *testing.T, emb *Embedded) *nats.Conn {
	t.Helper()
	nc, err := emb.Connect("test-api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// connect opens a queue over its own TCP connection, as another process
// would.
func connect(t *testing.T, url, name string, cfg Config) *Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := Connect(ctx, url, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// jobRun keeps job ids unique across tests sharing one server.
var jobRun atomic.Int64

func testJob(i int) queue.Job {
	return queue.Job{
		ID:        fmt.Sprintf("job-%d-%02d", jobRun.Add(1), i),
		Model:     "wan-tiny",
		Request:   []byte(fmt.Sprintf(`{"prompt":"clip %d"}`, i)),
		Predicted: queue.Peaks{DeviceBytes: 1 << 20, HostBytes: 2 << 20, Seconds: 0.1},
	}
}

func submitN(t *testing.T, q *Queue, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		j, _, err := q.Submit(context.Background(), testJob(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

// leaseWait leases a job for worker, waiting up to d for one.
func leaseWait(ctx context.Context, q *Queue, b queue.Budget, d time.Duration) (queue.Job, queue.Lease, error) {
	deadline := time.After(d)
	for {
		w := q.Wait()
		j, l, err := q.Lease(ctx, b)
		if !errors.Is(err, queue.ErrNoJob) {
			return j, l, err
		}
		select {
		case <-w:
		case <-deadline:
			return queue.Job{}, queue.Lease{}, queue.ErrNoJob
		case <-ctx.Done():
			return queue.Job{}, queue.Lease{}, ctx.Err()
		}
	}
}

// fakeRun is the job runner of the tests: a few progress reports, the
// output, then completion. It returns Complete's error.
func fakeRun(ctx context.Context, q *Queue, j queue.Job, l queue.Lease, steps int, step time.Duration) error {
	for i := range steps {
		if err := q.Progress(ctx, l, queue.Update{Phase: queue.PhaseDenoise, Progress: float64(100 * i / steps)}); err != nil {
			return err
		}
		time.Sleep(step)
	}
	if err := q.PutOutput(ctx, j.ID, "video", videoOf(j.ID)); err != nil {
		return err
	}
	return q.Complete(ctx, l, queue.Peaks{DeviceBytes: 1 << 20})
}

func videoOf(id string) []byte { return []byte("video bytes of " + id) }

// tally counts successful completions per job across workers.
type tally struct {
	mu sync.Mutex
	n  map[string]int
	by map[string]string
}

func newTally() *tally { return &tally{n: map[string]int{}, by: map[string]string{}} }

func (c *tally) add(id, worker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[id]++
	c.by[id] = worker
}

// waitTerminal waits until every job is terminal in q's bucket.
func waitTerminal(t *testing.T, q *Queue, ids []string, d time.Duration) map[string]queue.Job {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		out := map[string]queue.Job{}
		for _, id := range ids {
			j, err := q.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status.Terminal() {
				out[id] = j
			}
		}
		if len(out) == len(ids) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs ended within %s", len(out), len(ids), d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
