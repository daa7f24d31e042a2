package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry/server/queue"
)

// Ten jobs back to back: the device bytes resident after each equal the
// first's (nothing accumulates between requests), and the model is not
// reloaded (a warm job reads nothing from disk).
func TestBackToBackMemoryFlat(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	var first int64
	for i := range 10 {
		// Alternate the shape: the same model at a new shape keeps its
		// weights.
		size := []string{"32x32", "48x32"}[i%2]
		id := h.submit(strings.Replace(tiny(""), "32x32", size, 1))
		v := h.wait(id, 60*time.Second, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job %d: %s %+v", i, v.Status, v.Error)
		}
		got := h.deviceAllocated("wan-tiny")
		if i == 0 {
			first = got
			if first == 0 {
				t.Fatal("nothing resident after the first job (keep_alive -1)")
			}
			continue
		}
		if got != first {
			t.Fatalf("job %d: %d device bytes resident, the first left %d", i, got, first)
		}
	}
	if ev := h.s.models.snapshot().Evictions; ev != 0 {
		t.Fatalf("%d evictions: a new shape reloaded the model", ev)
	}
}

// max-queue + 2 submitted at once: exactly 2 get 503 with Retry-After.
func TestQueueFull(t *testing.T) {
	const maxQ, extra = 3, 2
	h := start(t, Config{MaxQueue: maxQ, KeepAlive: -1, faults: &faults{slowBlock: 50 * time.Millisecond}})
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range maxQ + extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, hdr, data := h.do("POST", "/v1/videos", tiny(""))
			if code == http.StatusServiceUnavailable && (hdr.Get("Retry-After") == "" || errorCode(t, data) != "queue_full") {
				t.Errorf("503 without Retry-After or code: %v %s", hdr, data)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusServiceUnavailable] != extra || codes[http.StatusAccepted] != maxQ {
		t.Fatalf("codes %v: want %d×202 and %d×503", codes, maxQ, extra)
	}
}

// Cancel a queued job, a running one, a finished one and an unknown id:
// 200 every time, twice; the running one stops, publishes nothing, and
// memory returns to the resident set.
func TestCancel(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	done := h.submit(tiny(""))
	h.wait(done, 60*time.Second, terminal)
	resident := h.deviceAllocated("wan-tiny")

	h.s.cfg.faults = &faults{slowBlock: 20 * time.Millisecond}
	run := h.submit(tiny(`"num_inference_steps":20`))
	queued := h.submit(tiny(""))
	h.wait(run, 30*time.Second, func(v videoJSON) bool { return v.Phase == queue.PhaseDenoise })
	for _, id := range []string{queued, run, done, "video_nope"} {
		for range 2 {
			if code, _, data := h.do("POST", "/v1/videos/"+id+"/cancel", ""); code != 200 {
				t.Fatalf("cancel %s: %d %s", id, code, data)
			}
		}
	}
	t0 := time.Now()
	v := h.wait(run, 10*time.Second, terminal)
	if v.Status != queue.StatusCancelled || time.Since(t0) > 2*time.Second {
		t.Fatalf("running job: %s after %s", v.Status, time.Since(t0))
	}
	if v := h.job(queued); v.Status != queue.StatusCancelled {
		t.Fatalf("queued job: %s", v.Status)
	}
	if v := h.job(done); v.Status != queue.StatusCompleted {
		t.Fatalf("finished job changed to %s", v.Status)
	}
	if code, _, _ := h.do("GET", "/v1/videos/"+run+"/content", ""); code != http.StatusConflict {
		t.Fatalf("content of a cancelled job: %d, want 409", code)
	}
	if _, err := h.s.q.GetOutput(h.s.ctx, run, "video"); err == nil {
		t.Fatal("a cancelled job has an output")
	}
	evs := h.events(run, 0)
	if last := evs[len(evs)-1]; last.typ != "cancelled" {
		t.Fatalf("last event %q", last.typ)
	}
	if got := h.deviceAllocated("wan-tiny"); got != resident && got != 0 {
		t.Fatalf("%d device bytes after the cancel, resident set %d", got, resident)
	}
	// The server goes on.
	h.s.cfg.faults = nil
	if v := h.wait(h.submit(tiny("")), 60*time.Second, terminal); v.Status != queue.StatusCompleted {
		t.Fatalf("next job: %s", v.Status)
	}
}

// A forced allocation failure fails that job with oom; the next succeeds.
func TestOOMFailsOneJob(t *testing.T) {
	h := start(t, Config{KeepAlive: -1, faults: &faults{oomPhase: "denoise"}})
	v := h.wait(h.submit(tiny("")), 60*time.Second, terminal)
	if v.Status != queue.StatusFailed || v.Error == nil || v.Error.Code != queue.CodeOOM {
		t.Fatalf("job: %s %+v", v.Status, v.Error)
	}
	h.s.cfg.faults = nil
	if v := h.wait(h.submit(tiny("")), 60*time.Second, terminal); v.Status != queue.StatusCompleted {
		t.Fatalf("next job: %s %+v", v.Status, v.Error)
	}
}

// keep_alive 0 demotes at once, 1s within 2s (expires_at right), -1 never.
func TestKeepAlive(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	h.wait(h.submit(tiny(`"keep_alive":0`)), 60*time.Second, terminal)
	if h.resident("wan-tiny") {
		t.Fatal("keep_alive 0: still resident")
	}
	end := time.Now()
	h.wait(h.submit(tiny(`"keep_alive":"1s"`)), 60*time.Second, terminal)
	end = time.Now()
	v := h.s.models.snapshot()
	if !v.Models[0].Resident || v.Models[0].ExpiresAt == nil {
		t.Fatalf("keep_alive 1s: %+v", v.Models[0])
	}
	if exp := time.Unix(*v.Models[0].ExpiresAt, 0); exp.Before(end.Add(-2*time.Second)) || exp.After(end.Add(2*time.Second)) {
		t.Fatalf("expires_at %s, job ended %s", exp, end)
	}
	deadline := time.Now().Add(3 * time.Second)
	for h.resident("wan-tiny") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if h.resident("wan-tiny") || time.Since(end) > 2200*time.Millisecond {
		t.Fatalf("keep_alive 1s: demoted %s after the job (resident %v)", time.Since(end), h.resident("wan-tiny"))
	}
	h.wait(h.submit(tiny(`"keep_alive":-1`)), 60*time.Second, terminal)
	time.Sleep(1500 * time.Millisecond)
	if v := h.s.models.snapshot().Models[0]; !v.Resident || v.ExpiresAt != nil || v.KeepAlive != "-1" {
		t.Fatalf("keep_alive -1: %+v", v)
	}
	// unload demotes on request.
	if code, _, _ := h.do("POST", "/v1/models/wan-tiny/unload", ""); code != 200 || h.resident("wan-tiny") {
		t.Fatalf("unload: %d, resident %v", code, h.resident("wan-tiny"))
	}
	// load warms it again, for as long as it says.
	code, _, data := h.do("POST", "/v1/models/wan-tiny/load", `{"keep_alive":"1h"}`)
	if code != 200 || !h.resident("wan-tiny") || h.deviceAllocated("wan-tiny") == 0 {
		t.Fatalf("load: %d %s", code, data)
	}
	if v := h.s.models.snapshot().Models[0]; v.KeepAlive != "1h0m0s" || v.ExpiresAt == nil {
		t.Fatalf("after load: %+v", v)
	}
}

// A restart replays the journal: the job that was running re-runs from
// scratch and the queued one runs after it.
func TestRestartReplays(t *testing.T) {
	dir := t.TempDir()
	h := start(t, Config{DataDir: dir, KeepAlive: -1, faults: &faults{slowBlock: 20 * time.Millisecond}})
	first := h.submit(tiny(`"num_inference_steps":20`))
	second := h.submit(tiny(""))
	h.wait(first, 30*time.Second, func(v videoJSON) bool { return v.Phase == queue.PhaseDenoise })
	h.close() // the running job stays in_progress in the journal

	h2 := start(t, Config{DataDir: dir, KeepAlive: -1})
	a := h2.wait(first, 60*time.Second, terminal)
	b := h2.wait(second, 60*time.Second, terminal)
	if a.Status != queue.StatusCompleted || a.Attempts != 2 || b.Status != queue.StatusCompleted || b.Attempts != 1 {
		t.Fatalf("after restart: first %s ×%d, second %s ×%d", a.Status, a.Attempts, b.Status, b.Attempts)
	}
	if *a.CompletedAt > *b.CompletedAt {
		t.Fatal("the queued job ran before the interrupted one")
	}
}

// A running job cancelled in each phase stops within a block's time (the
// slowed block is 20 ms; the bound allows for a loaded machine), leaves
// no output, and the memory returns to the resident set: the device holds
// the weights the model's runtime keeps (a runtime made for the job keeps
// those it loaded before the cancel) and nothing else.
func TestCancelEachPhase(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	h.wait(h.submit(tiny("")), 60*time.Second, terminal)
	if kept, left := h.deviceAllocated("wan-tiny"), h.beyondWeights("wan-tiny"); kept == 0 || left != 0 {
		t.Fatalf("after a job: %d device bytes, %d of them not weights", kept, left)
	}
	h.s.cfg.faults = &faults{slowBlock: 20 * time.Millisecond}
	for _, phase := range []queue.Phase{queue.PhaseLoading, queue.PhaseText, queue.PhaseDenoise, queue.PhaseVAE} {
		id := h.submit(tiny(`"num_inference_steps":4`))
		h.wait(id, 30*time.Second, func(v videoJSON) bool { return v.Phase == phase || terminal(v) })
		t0 := time.Now()
		if code, _, data := h.do("POST", "/v1/videos/"+id+"/cancel", ""); code != 200 {
			t.Fatalf("%s: cancel %d %s", phase, code, data)
		}
		v := h.wait(id, 10*time.Second, terminal)
		if v.Status != queue.StatusCancelled || time.Since(t0) > time.Second {
			t.Fatalf("%s: %s after %s", phase, v.Status, time.Since(t0))
		}
		if _, err := h.s.q.GetOutput(h.s.ctx, id, "video"); err == nil {
			t.Fatalf("%s: a cancelled job has an output", phase)
		}
		if left := h.beyondWeights("wan-tiny"); left != 0 {
			t.Fatalf("%s: %d device bytes after the cancel beside the weights the runtime keeps", phase, left)
		}
	}
}
