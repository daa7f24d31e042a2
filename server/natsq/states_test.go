package natsq

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"ferry/server/natsq/natstest"
	"ferry/server/queue"
)

// openInProcess opens a queue on an embedded server that does not listen
// at all (the `--nats embedded` single-process case).
func openInProcess(t *testing.T, cfg Config) *Queue {
	t.Helper()
	q, err := OpenEmbedded(context.Background(), EmbeddedOptions{StoreDir: natstest.StoreDir(t)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if q.Embedded().ClientURL() != "" {
		t.Fatalf("in-process server listens at %s", q.Embedded().ClientURL())
	}
	return q
}

// TestStateTransitions follows one job through the bucket: queued,
// in_progress with phases, cancel requested, cancelled; and a second one
// to completed and a third to failed.
func TestStateTransitions(t *testing.T) {
	ctx := context.Background()
	q := openInProcess(t, fastConfig())
	ids := submitN(t, q, 3)
	want := func(id string, s queue.Status, phase queue.Phase) queue.Job {
		t.Helper()
		j, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != s || j.Phase != phase {
			t.Fatalf("job %s: %s/%q, want %s/%q", id, j.Status, j.Phase, s, phase)
		}
		return j
	}
	for i, id := range ids {
		if j := want(id, queue.StatusQueued, queue.PhaseNone); j.Seq == 0 || j.Model != "wan-tiny" || string(j.Request) == "" {
			t.Fatalf("queued job %s lost fields: %+v", id, j)
		}
		if p, err := q.Position(ctx, id); err != nil || p != i {
			t.Fatalf("position of %s: %d, %v, want %d", id, p, err, i)
		}
	}
	if qd, r, _ := q.Depth(ctx); qd != 3 || r != 0 {
		t.Fatalf("depth: %d queued %d running, want 3, 0", qd, r)
	}

	// First job: leased, progresses, is cancelled while running.
	j, l, err := q.Lease(ctx, queue.Budget{Worker: "w"})
	if err != nil || j.ID != ids[0] {
		t.Fatalf("lease: %s, %v, want the oldest, %s", j.ID, err, ids[0])
	}
	if got := want(ids[0], queue.StatusInProgress, queue.PhaseLoading); got.Attempts != 1 || got.Worker != "w" || got.StartedAt.IsZero() {
		t.Fatalf("leased state: %+v", got)
	}
	if p, _ := q.Position(ctx, ids[1]); p != 0 {
		t.Fatalf("position of the next job once the first runs: %d", p)
	}
	measured := queue.Peaks{DeviceBytes: 7, HostBytes: 9}
	if err := q.Progress(ctx, l, queue.Update{Phase: queue.PhaseDenoise, Progress: 40, Measured: &measured}); err != nil {
		t.Fatal(err)
	}
	if got := want(ids[0], queue.StatusInProgress, queue.PhaseDenoise); got.Progress != 40 || got.Measured != measured {
		t.Fatalf("progress state: %+v", got)
	}
	// The dispatched prediction is written at once, though the phase stays.
	d := queue.Peaks{Plan: "auto: x", Seconds: 3}
	if err := q.Progress(ctx, l, queue.Update{Phase: queue.PhaseDenoise, Progress: 41, Dispatched: &d}); err != nil {
		t.Fatal(err)
	}
	if got := want(ids[0], queue.StatusInProgress, queue.PhaseDenoise); got.Dispatched == nil || *got.Dispatched != d {
		t.Fatalf("dispatched prediction: %+v, want %+v", got.Dispatched, d)
	}
	if err := q.PutOutput(ctx, ids[0], "video", []byte("partial")); err != nil {
		t.Fatal(err)
	}
	if c, err := q.Cancel(ctx, ids[0]); err != nil || !c.CancelRequested || c.Status != queue.StatusInProgress {
		t.Fatalf("cancel running: %+v, %v", c, err)
	}
	if err := q.Progress(ctx, l, queue.Update{Progress: 50}); !errors.Is(err, queue.ErrCancelled) {
		t.Fatalf("progress after cancel: %v, want ErrCancelled", err)
	}
	if err := q.Cancelled(ctx, l); err != nil {
		t.Fatal(err)
	}
	want(ids[0], queue.StatusCancelled, queue.PhaseDenoise)
	if _, err := q.GetOutput(ctx, ids[0], "video"); !errors.Is(err, queue.ErrNoOutput) {
		t.Fatalf("output of a cancelled job: %v, want ErrNoOutput", err)
	}
	if c, err := q.Cancel(ctx, ids[0]); err != nil || c.Status != queue.StatusCancelled {
		t.Fatalf("cancel again: %+v, %v (must be a no-op)", c, err)
	}

	// Second job: completes with its outputs listed.
	j, l, err = q.Lease(ctx, queue.Budget{Worker: "w"})
	if err != nil || j.ID != ids[1] {
		t.Fatalf("second lease: %s, %v", j.ID, err)
	}
	if err := fakeRun(ctx, q, j, l, 2, 0); err != nil {
		t.Fatal(err)
	}
	if got := want(ids[1], queue.StatusCompleted, queue.PhaseDenoise); got.Progress != 100 || len(got.Outputs) != 1 || got.Outputs[0] != "video" || got.EndedAt.IsZero() {
		t.Fatalf("completed state: %+v", got)
	}
	if err := q.Complete(ctx, l, queue.Peaks{}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("second complete: %v, want ErrLeaseLost", err)
	}

	// Third job: fails with a code.
	_, l, err = q.Lease(ctx, queue.Budget{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Fail(ctx, l, queue.JobError{Code: queue.CodeOOM, Message: "allocation failed"}, queue.Peaks{}); err != nil {
		t.Fatal(err)
	}
	if got := want(ids[2], queue.StatusFailed, queue.PhaseLoading); got.Error == nil || got.Error.Code != queue.CodeOOM {
		t.Fatalf("failed state: %+v", got)
	}
	if _, _, err := q.Lease(ctx, queue.Budget{Worker: "w"}); !errors.Is(err, queue.ErrNoJob) {
		t.Fatalf("lease with nothing queued: %v", err)
	}

	// Deleting: terminal jobs only, outputs and state gone.
	if err := q.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Get(ctx, ids[1]); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := q.GetOutput(ctx, ids[1], "video"); !errors.Is(err, queue.ErrNoOutput) {
		t.Fatalf("output of deleted: %v", err)
	}
	if _, err := q.Cancel(ctx, "no-such-job"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
}

// TestCancelQueued: a job cancelled before it runs is never leased.
func TestCancelQueued(t *testing.T) {
	ctx := context.Background()
	q := openInProcess(t, fastConfig())
	ids := submitN(t, q, 2)
	if c, err := q.Cancel(ctx, ids[0]); err != nil || c.Status != queue.StatusCancelled {
		t.Fatalf("cancel queued: %+v, %v", c, err)
	}
	j, _, err := q.Lease(ctx, queue.Budget{Worker: "w"})
	if err != nil || j.ID != ids[1] {
		t.Fatalf("lease after cancelling the first: %s, %v, want %s", j.ID, err, ids[1])
	}
	if _, _, err := q.Lease(ctx, queue.Budget{Worker: "w"}); !errors.Is(err, queue.ErrNoJob) {
		t.Fatalf("lease: %v, want ErrNoJob", err)
	}
}

// TestFits: a worker leases only what its budget fits; a bigger worker
// takes what the small one handed back.
func TestFits(t *testing.T) {
	ctx := context.Background()
	q := openInProcess(t, fastConfig())
	big := testJob(0)
	big.Predicted.DeviceBytes = 8 << 30
	small := testJob(1)
	for _, j := range []queue.Job{big, small} {
		if _, _, err := q.Submit(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	fits := func(limit int64) func(queue.Need) bool {
		return func(n queue.Need) bool { return n.DeviceBytes <= limit && n.Model == "wan-tiny" }
	}
	j, _, err := q.Lease(ctx, queue.Budget{Worker: "small", Fits: fits(1 << 30)})
	if err != nil || j.ID != small.ID {
		t.Fatalf("small worker leased %s, %v, want %s", j.ID, err, small.ID)
	}
	if _, _, err := q.Lease(ctx, queue.Budget{Worker: "small", Fits: fits(1 << 30)}); !errors.Is(err, queue.ErrNoJob) {
		t.Fatalf("small worker again: %v, want ErrNoJob", err)
	}
	if got, _ := q.Get(ctx, big.ID); got.Status != queue.StatusQueued || got.Attempts != 0 {
		t.Fatalf("the big job after the small worker passed: %s attempts %d", got.Status, got.Attempts)
	}
	j, _, err = leaseWait(ctx, q, queue.Budget{Worker: "big", Fits: fits(16 << 30)}, 3*time.Second)
	if err != nil || j.ID != big.ID || j.Worker != "big" {
		t.Fatalf("big worker leased %s on %q, %v, want %s", j.ID, j.Worker, err, big.ID)
	}
}

// TestMaxQueueAndList: the queued bound, and newest-first paging.
func TestMaxQueueAndList(t *testing.T) {
	ctx := context.Background()
	cfg := fastConfig()
	cfg.MaxQueue = 3
	q := openInProcess(t, cfg)
	ids := submitN(t, q, 3)
	if _, _, err := q.Submit(ctx, testJob(3)); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("fourth submit: %v, want ErrQueueFull", err)
	}
	if _, _, err := q.Lease(ctx, queue.Budget{Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	// A running job does not count against the bound.
	extra, pos, err := q.Submit(ctx, testJob(4))
	if err != nil || pos != 2 {
		t.Fatalf("submit after one started: position %d, %v, want 2", pos, err)
	}
	if _, _, err := q.Submit(ctx, testJob(5)); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("submit over the bound: %v", err)
	}
	if _, _, err := q.Submit(ctx, queue.Job{ID: "bad.id"}); err == nil {
		t.Fatal("a job id with a dot was accepted")
	}
	all := append(ids, extra.ID)
	page1, more, err := q.List(ctx, queue.Page{Limit: 3})
	if err != nil || !more || len(page1) != 3 || page1[0].ID != all[3] || page1[2].ID != all[1] {
		t.Fatalf("first page: %v more=%v err=%v", jobIDs(page1), more, err)
	}
	page2, more, err := q.List(ctx, queue.Page{After: page1[2].ID, Limit: 3})
	if err != nil || more || len(page2) != 1 || page2[0].ID != all[0] {
		t.Fatalf("second page: %v more=%v err=%v", jobIDs(page2), more, err)
	}
}

func jobIDs(js []queue.Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

// TestOutputsRoundTrip: outputs of several object-store chunks come back
// byte for byte; a rewrite replaces; bad names are refused.
func TestOutputsRoundTrip(t *testing.T) {
	ctx := context.Background()
	q := openInProcess(t, fastConfig())
	rng := rand.New(rand.NewSource(1))
	cases := []struct {
		variant string
		size    int
	}{{"video", 300 << 10}, {"report", 1}, {"trace.json", 0}, {"chart", 128 << 10}}
	for _, c := range cases {
		data := make([]byte, c.size)
		rng.Read(data)
		if err := q.PutOutput(ctx, "job-out", c.variant, data); err != nil {
			t.Fatalf("%s: %v", c.variant, err)
		}
		got, err := q.GetOutput(ctx, "job-out", c.variant)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: got %d bytes, %v, want %d bytes", c.variant, len(got), err, len(data))
		}
	}
	if err := q.PutOutput(ctx, "job-out", "video", []byte("second take")); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.GetOutput(ctx, "job-out", "video"); string(got) != "second take" {
		t.Fatalf("rewritten output: %q", got)
	}
	if _, err := q.GetOutput(ctx, "job-out", "plan"); !errors.Is(err, queue.ErrNoOutput) {
		t.Fatalf("missing variant: %v", err)
	}
	for _, bad := range []struct{ id, variant string }{{"job-out", "../x"}, {"job/out", "video"}, {"job-out", ""}, {"job-out", ".."}} {
		if err := q.PutOutput(ctx, bad.id, bad.variant, nil); err == nil {
			t.Errorf("put output %q/%q was accepted", bad.id, bad.variant)
		}
	}
}

// TestInputsRoundTrip: a job's inputs come back whole, outlive the
// removal of its outputs (a re-run's, a cancel's), and DropInputs removes
// them.
func TestInputsRoundTrip(t *testing.T) {
	ctx := context.Background()
	q := openInProcess(t, fastConfig())
	data := make([]byte, 700<<10)
	rand.New(rand.NewSource(2)).Read(data)
	if err := q.PutInput(ctx, "job-in", "image", data); err != nil {
		t.Fatal(err)
	}
	if err := q.PutOutput(ctx, "job-in", "video", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := q.removeOutputs(ctx, "job-in"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetOutput(ctx, "job-in", "video"); !errors.Is(err, queue.ErrNoOutput) {
		t.Fatalf("output after removeOutputs: %v", err)
	}
	got, err := q.GetInput(ctx, "job-in", "image")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("input after the outputs went: %d bytes, %v, want %d", len(got), err, len(data))
	}
	if err := q.DropInputs(ctx, "job-in"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetInput(ctx, "job-in", "image"); !errors.Is(err, queue.ErrNoInput) {
		t.Fatalf("input after DropInputs: %v, want ErrNoInput", err)
	}
	if err := q.PutInput(ctx, "job/in", "image", nil); err == nil {
		t.Error("an input with a bad id was accepted")
	}
}

// TestReplayAfterRestart: a worker process that restarts under the same
// name settles the job it was running: back to queued, or failed
// "interrupted" past the bound; the store on disk survives the restart.
func TestReplayAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := natstest.StoreDir(t)
	cfg := fastConfig()
	cfg.Worker = "node-1"
	open := func() *Queue {
		q, err := OpenEmbedded(ctx, EmbeddedOptions{StoreDir: dir}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := open()
	id := submitN(t, q, 1)[0]
	for run := 1; run <= 3; run++ {
		j, _, err := leaseWait(ctx, q, queue.Budget{Worker: "node-1"}, 5*time.Second)
		if err != nil || j.ID != id || j.Attempts != run {
			t.Fatalf("run %d: leased %s attempts %d, %v", run, j.ID, j.Attempts, err)
		}
		q.emb.srv.Shutdown() // the whole process dies: no nak, no state change
		q.Close()
		q = open()
		touched, err := q.Replay(ctx, 2)
		if err != nil || len(touched) != 1 {
			t.Fatalf("replay after run %d: %d jobs, %v", run, len(touched), err)
		}
		want := queue.StatusQueued
		if run == 3 {
			want = queue.StatusFailed
		}
		if got := touched[0]; got.Status != want || got.Attempts != run {
			t.Fatalf("after run %d: %s attempts %d, want %s", run, got.Status, got.Attempts, want)
		}
	}
	defer q.Close()
	if j, _ := q.Get(ctx, id); j.Error == nil || j.Error.Code != queue.CodeInterrupted {
		t.Fatalf("final state: %+v", j)
	}
}

// TestLargeRequest: a job whose request is as large as the API accepts
// (1 MiB) is stored whole on the embedded server.
func TestLargeRequest(t *testing.T) {
	ctx := context.Background()
	q := openInProcess(t, fastConfig())
	j := testJob(0)
	j.Request = bytes.Repeat([]byte("x"), 1<<20)
	if _, _, err := q.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	got, err := q.Get(ctx, j.ID)
	if err != nil || !bytes.Equal(got.Request, j.Request) {
		t.Fatalf("request back: %d bytes, %v", len(got.Request), err)
	}
}
