package natsq

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"ferry/server/queue"
)

// twoWorkers is the lost-worker scenario in goroutines, against any NATS
// server at url: 20 jobs, workers A and B with their own connections; A
// stops reporting progress in the middle of its second job (it hangs). Its
// lease lapses after the stall timeout plus the ack wait, and the job must
// complete on B; when A wakes up, its lease is lost. No job is lost, none
// completes twice.
func twoWorkers(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := connect(t, url, "api", fastConfig())
	ids := submitN(t, api, 20)
	done := newTally()
	var wg sync.WaitGroup
	hung := make(chan struct {
		job queue.Job
		l   queue.Lease
	}, 1)
	stop := make(chan struct{})

	wg.Add(2)
	go func() { // worker A: hangs in its second job, then leases no more
		defer wg.Done()
		qa := connect(t, url, "A", fastConfig())
		for n := 1; ; n++ {
			j, l, err := leaseWait(ctx, qa, queue.Budget{Worker: "A"}, 10*time.Second)
			if err != nil {
				t.Errorf("worker A: lease: %v", err)
				return
			}
			if n == 2 {
				qa.Progress(ctx, l, queue.Update{Phase: queue.PhaseDenoise, Progress: 10})
				hung <- struct {
					job queue.Job
					l   queue.Lease
				}{j, l}
				<-stop
				// Awake again: the job moved on without A.
				if err := qa.Progress(ctx, l, queue.Update{Progress: 50}); !errors.Is(err, queue.ErrLeaseLost) {
					t.Errorf("worker A: progress after its lease lapsed: %v, want ErrLeaseLost", err)
				}
				if err := qa.Complete(ctx, l, queue.Peaks{}); !errors.Is(err, queue.ErrLeaseLost) {
					t.Errorf("worker A: complete after its lease lapsed: %v, want ErrLeaseLost", err)
				}
				return
			}
			if err := fakeRun(ctx, qa, j, l, 4, 10*time.Millisecond); err != nil {
				t.Errorf("worker A: run %s: %v", j.ID, err)
				return
			}
			done.add(j.ID, "A")
		}
	}()
	go func() { // worker B: runs until stopped
		defer wg.Done()
		qb := connect(t, url, "B", fastConfig())
		for {
			j, l, err := leaseWait(ctx, qb, queue.Budget{Worker: "B"}, 200*time.Millisecond)
			select {
			case <-stop:
				return
			default:
			}
			if errors.Is(err, queue.ErrNoJob) {
				continue
			}
			if err != nil {
				t.Errorf("worker B: lease: %v", err)
				return
			}
			if err := fakeRun(ctx, qb, j, l, 4, 10*time.Millisecond); err != nil {
				t.Errorf("worker B: run %s: %v", j.ID, err)
				return
			}
			done.add(j.ID, "B")
		}
	}()

	var h struct {
		job queue.Job
		l   queue.Lease
	}
	select {
	case h = <-hung:
	case <-ctx.Done():
		t.Fatal("worker A never reached its second job")
	}
	states := waitTerminal(t, api, ids, 20*time.Second)
	close(stop)
	wg.Wait()

	for _, id := range ids {
		if states[id].Status != queue.StatusCompleted {
			t.Errorf("job %s ended %s, want completed", id, states[id].Status)
		}
		if done.n[id] != 1 {
			t.Errorf("job %s completed %d times, want once", id, done.n[id])
		}
		if got, err := api.GetOutput(ctx, id, "video"); err != nil || string(got) != string(videoOf(id)) {
			t.Errorf("output of %s: %q, %v", id, got, err)
		}
	}
	k := states[h.job.ID]
	if done.by[h.job.ID] != "B" || k.Worker != "B" || k.Attempts != 2 {
		t.Errorf("hung job %s: completed by %q (state says %q) after %d runs, want B after 2",
			h.job.ID, done.by[h.job.ID], k.Worker, k.Attempts)
	}
}

func TestTwoWorkersOneHangsEmbedded(t *testing.T) {
	twoWorkers(t, startServer(t).ClientURL())
}

// TestSeparateNATSServer runs the same code against a nats-server process
// (Debian's package), to show the cluster path is the embedded one.
func TestSeparateNATSServer(t *testing.T) {
	url := startNATSServer(t)
	t.Run("two workers", func(t *testing.T) { twoWorkers(t, url) })
	t.Run("rerun bound", func(t *testing.T) { rerunBound(t, url) })
}

// natsServerBinary finds a standalone nats-server; Debian puts it in
// /usr/sbin, which may not be on a user's PATH.
func natsServerBinary() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

// startNATSServer runs nats-server with JetStream on a free loopback port.
func startNATSServer(t *testing.T) string {
	t.Helper()
	bin := natsServerBinary()
	if bin == "" {
		t.Skip("nats-server is not installed: run scripts/ensure-nats-server.sh (apt-get install nats-server) to test against a separate NATS process")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server at %s did not come up: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rerunBound: a job whose worker goes away mid-run is run again at most
// MaxReruns times; the delivery after that fails it "interrupted".
func rerunBound(t *testing.T, url string) {
	ctx := context.Background()
	api := connect(t, url, "api", fastConfig())
	id := submitN(t, api, 1)[0]
	for run := 1; run <= 3; run++ {
		w := connect(t, url, "w", fastConfig())
		j, l, err := leaseWait(ctx, w, queue.Budget{Worker: "w"}, 5*time.Second)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if j.ID != id || l.Attempt != run || j.Attempts != run {
			t.Fatalf("run %d: leased %s attempt %d (state %d)", run, j.ID, l.Attempt, j.Attempts)
		}
		w.Close() // the worker goes away; its job is handed back
	}
	w := connect(t, url, "w", fastConfig())
	if _, _, err := leaseWait(ctx, w, queue.Budget{Worker: "w"}, time.Second); !errors.Is(err, queue.ErrNoJob) {
		t.Fatalf("fourth lease: %v, want ErrNoJob", err)
	}
	j, err := api.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != queue.StatusFailed || j.Error == nil || j.Error.Code != queue.CodeInterrupted || j.Attempts != 3 {
		t.Fatalf("after 3 lost runs: %s %+v attempts %d, want failed interrupted after 3", j.Status, j.Error, j.Attempts)
	}
	if q, r, _ := api.Depth(ctx); q != 0 || r != 0 {
		t.Errorf("depth: %d queued, %d running, want none", q, r)
	}
}

func TestRerunBoundEmbedded(t *testing.T) {
	rerunBound(t, startServer(t).ClientURL())
}
