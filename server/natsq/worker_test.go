package natsq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ferry/server/queue"
)

// The worker process: the test binary re-run with these variables set.
const (
	workerEnv     = "NATSQ_TEST_WORKER_URL"
	workerNameEnv = "NATSQ_TEST_WORKER_NAME"
	workerHangEnv = "NATSQ_TEST_WORKER_HANG" // hang (alive, acking) in its Nth job
)

// workerMain runs jobs from the queue at $NATSQ_TEST_WORKER_URL until none
// came for a while, printing "leased ID", "completed ID" and "hang ID". A
// hanging worker keeps its lease alive (its stall timeout is long) until
// the test kills the process: only the death frees the job.
func workerMain() int {
	name := os.Getenv(workerNameEnv)
	hangAt, _ := strconv.Atoi(os.Getenv(workerHangEnv))
	cfg := fastConfig()
	cfg.StallTimeout = time.Minute
	ctx := context.Background()
	q, err := Connect(ctx, os.Getenv(workerEnv), name, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer q.Close()
	for n := 1; ; n++ {
		j, l, err := leaseWait(ctx, q, queue.Budget{Worker: name}, 10*time.Second)
		if errors.Is(err, queue.ErrNoJob) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println("leased", j.ID)
		if n == hangAt {
			q.Progress(ctx, l, queue.Update{Phase: queue.PhaseDenoise, Progress: 10})
			fmt.Println("hang", j.ID)
			select {}
		}
		if err := fakeRun(ctx, q, j, l, 4, 20*time.Millisecond); err != nil {
			fmt.Println("lost", j.ID, err)
			continue
		}
		fmt.Println("completed", j.ID)
	}
}

// workerProc is one running worker process and what it printed.
type workerProc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	hang  chan string
	done  chan struct{}
}

func startWorker(t *testing.T, url, name string, hangAt int) *workerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+url, workerNameEnv+"="+name, workerHangEnv+"="+strconv.Itoa(hangAt))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &workerProc{name: name, cmd: cmd, hang: make(chan string, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.lines = append(w.lines, line)
			w.mu.Unlock()
			if id, ok := strings.CutPrefix(line, "hang "); ok {
				w.hang <- id
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return w
}

// waitPrinted waits until the workers printed a completion for every id
// (a print follows the state write) and counts the completions per id.
func waitPrinted(ids []string, d time.Duration, ws ...*workerProc) map[string]int {
	deadline := time.Now().Add(d)
	for {
		counts := map[string]int{}
		for _, w := range ws {
			for _, id := range w.completed() {
				counts[id]++
			}
		}
		all := true
		for _, id := range ids {
			all = all && counts[id] > 0
		}
		if all || time.Now().After(deadline) {
			return counts
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// completed returns the ids this worker printed as completed.
func (w *workerProc) completed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for _, l := range w.lines {
		if id, ok := strings.CutPrefix(l, "completed "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestWorkerProcessKilled is the lost-worker scenario with real
// processes: an embedded server, two worker processes, 20 jobs; one worker
// is killed (SIGKILL) in the middle of its first job. Its job must be
// redelivered and complete on the other worker; no job is lost and none
// completes twice.
func TestWorkerProcessKilled(t *testing.T) {
	emb := startServer(t)
	ctx := context.Background()
	api, err := Open(ctx, mustConnectInProcess(t, emb), fastConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ids := submitN(t, api, 20)

	w1 := startWorker(t, emb.ClientURL(), "w1", 1)
	w2 := startWorker(t, emb.ClientURL(), "w2", 0)
	var killed string
	select {
	case killed = <-w1.hang:
	case <-time.After(20 * time.Second):
		t.Fatal("worker w1 never leased a job")
	}
	before, err := api.Get(ctx, killed)
	if err != nil {
		t.Fatal(err)
	}
	if before.Status != queue.StatusInProgress || before.Worker != "w1" {
		t.Fatalf("job %s before the kill: %s on %q, want in_progress on w1", killed, before.Status, before.Worker)
	}
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w1.cmd.Wait()

	states := waitTerminal(t, api, ids, 30*time.Second)
	counts := waitPrinted(ids, 5*time.Second, w1, w2)
	for _, id := range ids {
		j := states[id]
		if j.Status != queue.StatusCompleted {
			t.Errorf("job %s ended %s, want completed", id, j.Status)
		}
		if counts[id] != 1 {
			t.Errorf("job %s completed %d times by the workers, want once", id, counts[id])
		}
	}
	k := states[killed]
	if k.Worker != "w2" || k.Attempts != 2 {
		t.Errorf("killed job %s: completed by %q after %d runs, want w2 after 2", killed, k.Worker, k.Attempts)
	}
	for _, id := range w1.completed() {
		if id == killed {
			t.Errorf("the killed worker reports completing %s", killed)
		}
	}
	got, err := api.GetOutput(ctx, killed, "video")
	if err != nil || string(got) != string(videoOf(killed)) {
		t.Errorf("output of %s: %q, %v", killed, got, err)
	}
	if q, r, _ := api.Depth(ctx); q != 0 || r != 0 {
		t.Errorf("depth after all jobs: %d queued, %d running", q, r)
	}
}
