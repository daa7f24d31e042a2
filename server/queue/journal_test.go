package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

var ctx = context.Background()

func open(t *testing.T, dir string, max int) *Journal {
	t.Helper()
	q, err := OpenJournal(dir, max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func submit(t *testing.T, q *Journal, id string) {
	t.Helper()
	if _, _, err := q.Submit(ctx, Job{ID: id, Model: "m", Request: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

func TestJournalOrderAndPositions(t *testing.T) {
	q := open(t, t.TempDir(), 0)
	for _, id := range []string{"a", "b", "c"} {
		submit(t, q, id)
	}
	if p, _ := q.Position(ctx, "c"); p != 2 {
		t.Fatalf("position of c: %d", p)
	}
	j, l, err := q.Lease(ctx, Budget{Worker: "w", Fits: func(n Need) bool { return true }})
	if err != nil || j.ID != "a" || j.Status != StatusInProgress || j.Attempts != 1 {
		t.Fatalf("lease: %+v %v", j, err)
	}
	if p, _ := q.Position(ctx, "c"); p != 1 {
		t.Fatalf("position of c after a lease: %d", p)
	}
	// A worker whose budget fits nothing gets nothing.
	if _, _, err := q.Lease(ctx, Budget{Fits: func(Need) bool { return false }}); !errors.Is(err, ErrNoJob) {
		t.Fatalf("lease with no room: %v", err)
	}
	if err := q.PutOutput(ctx, "a", "video", []byte("mp4")); err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, l, Peaks{Seconds: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, l, Peaks{}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second complete: %v", err)
	}
	got, _ := q.Get(ctx, "a")
	if got.Status != StatusCompleted || got.Progress != 100 || len(got.Outputs) != 1 {
		t.Fatalf("completed job %+v", got)
	}
	jobs, more, _ := q.List(ctx, Page{Limit: 2})
	if len(jobs) != 2 || !more || jobs[0].ID != "c" {
		t.Fatalf("list %v more %v", jobs, more)
	}
	jobs, more, _ = q.List(ctx, Page{After: "b", Limit: 2})
	if len(jobs) != 1 || more || jobs[0].ID != "a" {
		t.Fatalf("list after b: %v more %v", jobs, more)
	}
}

func TestJournalQueueFull(t *testing.T) {
	q := open(t, t.TempDir(), 2)
	submit(t, q, "a")
	submit(t, q, "b")
	if _, _, err := q.Submit(ctx, Job{ID: "c"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third submit: %v", err)
	}
	// A running job still counts; a cancelled one frees its place.
	q.Lease(ctx, Budget{})
	if _, err := q.Cancel(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	submit(t, q, "c")
}

func TestJournalCancel(t *testing.T) {
	q := open(t, t.TempDir(), 0)
	submit(t, q, "a")
	submit(t, q, "b")
	_, l, _ := q.Lease(ctx, Budget{})
	for range 2 {
		if j, err := q.Cancel(ctx, "b"); err != nil || j.Status != StatusCancelled {
			t.Fatalf("cancel queued: %+v %v", j, err)
		}
		if j, err := q.Cancel(ctx, "a"); err != nil || j.Status != StatusInProgress || !j.CancelRequested {
			t.Fatalf("cancel running: %+v %v", j, err)
		}
	}
	if _, err := q.Cancel(ctx, "zzz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
	if err := q.Progress(ctx, l, Update{Phase: PhaseDenoise, Progress: 50}); !errors.Is(err, ErrCancelled) {
		t.Fatalf("progress after cancel: %v", err)
	}
	q.PutOutput(ctx, "a", "video", []byte("partial"))
	if err := q.Cancelled(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetOutput(ctx, "a", "video"); !errors.Is(err, ErrNoOutput) {
		t.Fatalf("a cancelled job's output: %v", err)
	}
}

// A job running when the process died re-runs from scratch at most twice,
// then fails interrupted; queued jobs keep their order; a torn last line
// (a crash mid-append, never acknowledged) is ignored.
func TestJournalReplay(t *testing.T) {
	dir := t.TempDir()
	q, _ := OpenJournal(dir, 0)
	submit(t, q, "a")
	submit(t, q, "b")
	_, l, _ := q.Lease(ctx, Budget{})
	if err := q.Progress(ctx, l, Update{Phase: PhaseText, Dispatched: &Peaks{Plan: "auto: x", Seconds: 2}}); err != nil {
		t.Fatal(err)
	}
	q.PutOutput(ctx, "a", "video", []byte("half"))
	q.Close()
	q, _ = OpenJournal(dir, 0)
	if a, _ := q.Get(ctx, "a"); a.Dispatched == nil || a.Dispatched.Plan != "auto: x" {
		t.Fatalf("the dispatched prediction was not journaled: %+v", a.Dispatched)
	}
	q.Close()
	f, _ := os.OpenFile(filepath.Join(dir, journalName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"job":{"id":"torn","sta`)
	f.Close()

	for run := 1; run <= 3; run++ {
		q, err := OpenJournal(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Replay(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Get(ctx, "torn"); !errors.Is(err, ErrNotFound) {
			t.Fatal("a torn record was replayed")
		}
		a, _ := q.Get(ctx, "a")
		if _, err := q.GetOutput(ctx, "a", "video"); err == nil {
			t.Fatal("a partial output survived the restart")
		}
		if run == 3 {
			if a.Status != StatusFailed || a.Error == nil || a.Error.Code != CodeInterrupted {
				t.Fatalf("third restart: %+v", a)
			}
			q.Close()
			break
		}
		if a.Status != StatusQueued {
			t.Fatalf("restart %d: a is %s", run, a.Status)
		}
		j, _, err := q.Lease(ctx, Budget{})
		if err != nil || j.ID != "a" || j.Attempts != run+1 || j.Dispatched != nil {
			t.Fatalf("restart %d: leased %+v %v (a new run has no dispatched prediction yet)", run, j, err)
		}
		q.Close() // dies again while a runs
	}
	q = open(t, dir, 0)
	q.Replay(ctx, 2)
	if j, _, err := q.Lease(ctx, Budget{}); err != nil || j.ID != "b" {
		t.Fatalf("the queued job after the replays: %+v %v", j, err)
	}
}

func TestOutputNames(t *testing.T) {
	q := open(t, t.TempDir(), 0)
	for _, bad := range [][2]string{{"../x", "video"}, {"a", "../../etc"}, {"", "video"}, {"a", ".."}} {
		if err := q.PutOutput(ctx, bad[0], bad[1], nil); err == nil {
			t.Fatalf("PutOutput(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestJournalInputs: a job's inputs are stored before it is submitted,
// survive a restart and a re-run (outputs do not), and go with the job;
// the inputs of a job never submitted are swept at the restart.
func TestJournalInputs(t *testing.T) {
	dir := t.TempDir()
	q, _ := OpenJournal(dir, 0)
	if err := q.PutInput(ctx, "a", "image", []byte("first")); err != nil {
		t.Fatal(err)
	}
	submit(t, q, "a")
	if err := q.PutInput(ctx, "orphan", "image", []byte("never submitted")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Lease(ctx, Budget{}); err != nil {
		t.Fatal(err)
	}
	q.PutOutput(ctx, "a", "video", []byte("half"))
	q.Close() // dies while a runs
	q = open(t, dir, 0)
	if _, err := q.Replay(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got, err := q.GetInput(ctx, "a", "image"); err != nil || string(got) != "first" {
		t.Fatalf("a's input after the restart: %q, %v", got, err)
	}
	if _, err := q.GetOutput(ctx, "a", "video"); err == nil {
		t.Fatal("a's partial output survived the restart")
	}
	if _, err := q.GetInput(ctx, "orphan", "image"); !errors.Is(err, ErrNoInput) {
		t.Fatalf("the input of a job never submitted: %v, want ErrNoInput", err)
	}
	_, l, err := q.Lease(ctx, Budget{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, l, Peaks{}); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetInput(ctx, "a", "image"); !errors.Is(err, ErrNoInput) {
		t.Fatalf("a deleted job's input: %v, want ErrNoInput", err)
	}
	for _, bad := range [][2]string{{"../x", "image"}, {"a", "../../etc"}, {"", "image"}} {
		if err := q.PutInput(ctx, bad[0], bad[1], nil); err == nil {
			t.Fatalf("PutInput(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
