package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"ferry/dtype"
	"ferry/pipeline"
	"ferry/server/queue"
	"ferry/synth"
)

// modelRoot holds wan-tiny, written once per test binary.
var modelRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-serve-test-")
	if err != nil {
		panic(err)
	}
	a, err := synth.Lookup("wan-tiny")
	if err == nil {
		err = synth.Write(filepath.Join(dir, "wan-tiny"), a, synth.Options{Seed: 1, DType: dtype.BF16})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth wan-tiny:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	modelRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness is a server on a loopback test listener.
type harness struct {
	t   testing.TB
	s   *Server
	ts  *httptest.Server
	dir string
}

func start(t testing.TB, cfg Config) *harness {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Models == nil {
		cfg.Models = []string{modelRoot}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: s, ts: httptest.NewServer(s.Handler()), dir: cfg.DataDir}
	t.Cleanup(h.close)
	return h
}

func (h *harness) close() {
	if h.ts != nil {
		h.ts.CloseClientConnections()
		h.ts.Close()
		h.s.Close()
		h.ts = nil
	}
}

// tiny is a small, fast wan-tiny request body.
func tiny(extra string) string {
	b := `{"model":"wan-tiny","prompt":"a red fox","size":"32x32","num_frames":5,"num_inference_steps":2,"guidance_scale":1,"seed":7`
	if extra != "" {
		b += "," + extra
	}
	return b + "}"
}

func (h *harness) do(method, path, body string, hdr ...string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// submit posts a body and returns the new job's id.
func (h *harness) submit(body string) string {
	h.t.Helper()
	code, _, data := h.do("POST", "/v1/videos", body)
	if code != http.StatusAccepted {
		h.t.Fatalf("submit: %d %s", code, data)
	}
	var v videoJSON
	if err := json.Unmarshal(data, &v); err != nil {
		h.t.Fatal(err)
	}
	return v.ID
}

func (h *harness) job(id string) videoJSON {
	h.t.Helper()
	code, _, data := h.do("GET", "/v1/videos/"+id, "")
	if code != http.StatusOK {
		h.t.Fatalf("get %s: %d %s", id, code, data)
	}
	var v videoJSON
	if err := json.Unmarshal(data, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// wait polls until the job's status satisfies ok, for at most d.
func (h *harness) wait(id string, d time.Duration, ok func(videoJSON) bool) videoJSON {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		v := h.job(id)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s: still %s (phase %q) after %s", id, v.Status, v.Phase, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func terminal(v videoJSON) bool { return v.Status.Terminal() }

func running(v videoJSON) bool { return v.Status == queue.StatusInProgress }

// sse is one parsed event.
type sse struct {
	id   int
	typ  string
	data eventData
}

// events reads a job's event stream to its end.
func (h *harness) events(id string, lastID int) []sse {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.ts.URL+"/v1/videos/"+id+"/events", nil)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		h.t.Fatalf("events: content type %q", ct)
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.typ != "" {
				out = append(out, cur)
			}
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.Atoi(line[4:])
		case strings.HasPrefix(line, "event: "):
			cur.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &cur.data); err != nil {
				h.t.Fatalf("event data %q: %v", line, err)
			}
		}
	}
	return out
}

// deviceAllocated is the resident runtime's allocated device bytes.
func (h *harness) deviceAllocated(model string) int64 {
	return h.allocatedAfter(model, func(*pipeline.Runtime) {})
}

// beyondWeights demotes every block of model's runtime off the device and
// returns what is still allocated there: 0 when the device held weights
// and nothing else (no activation, context or adapter left behind).
func (h *harness) beyondWeights(model string) int64 {
	return h.allocatedAfter(model, func(rt *pipeline.Runtime) {
		for _, b := range rt.Exec.Resident() {
			rt.Exec.DemoteDevice(b.Block)
		}
	})
}

// allocatedAfter runs fn on model's resident runtime under the models
// lock and returns the device bytes allocated then (0: no runtime).
func (h *harness) allocatedAfter(model string, fn func(rt *pipeline.Runtime)) int64 {
	h.s.models.mu.Lock()
	defer h.s.models.mu.Unlock()
	m := h.s.models.byName[model]
	if m.rt == nil {
		return 0
	}
	fn(m.rt)
	return m.rt.Device.Stats().Allocated
}

func (h *harness) resident(model string) bool {
	h.s.models.mu.Lock()
	defer h.s.models.mu.Unlock()
	return h.s.models.byName[model].rt != nil
}

func errorCode(t testing.TB, data []byte) string {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(data, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error body: %s", data)
	}
	return e.Error.Code
}

var _ = bytes.NewReader
