package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry/server/natsq/natstest"
)

func TestServeNATSFlagErrors(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	data := t.TempDir()
	base := []string{"serve", "--data-dir", data, "--models", model}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad role", []string{"--nats", "embedded", "--role", "boss"}, "want api, worker or both"},
		{"role without nats", []string{"--role", "worker"}, "need --nats"},
		{"bad url", []string{"--nats", "http://x:4222"}, "want 'embedded' or nats://HOST:4222"},
		{"listen with url", []string{"--nats", "nats://127.0.0.1:4222", "--nats-listen", "127.0.0.1:4222"}, "only apply to --nats embedded"},
		{"open nats listen", []string{"--nats", "embedded", "--nats-listen", "0.0.0.0:4222"}, "not a loopback address"},
		{"bad nats listen", []string{"--nats", "embedded", "--nats-listen", "4222"}, "want HOST:PORT"},
		{"replicas embedded", []string{"--nats", "embedded", "--nats-replicas", "3"}, "replicas need a cluster"},
		{"bad replicas", []string{"--nats", "nats://127.0.0.1:4222", "--nats-replicas", "0"}, "want 1 to 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			t.Setenv("FERRY_API_KEY", "")
			code := run(context.Background(), append(append([]string(nil), base...), c.args...), &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), c.want) || strings.Count(errb.String(), "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want 2 and %q on one line", code, errb.String(), c.want)
			}
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serveNode runs `ferry serve ARGS` until the test ends and waits for its
// /healthz; it returns the node's base URL.
func serveNode(t *testing.T, args ...string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	data := natstest.StoreDir(t) // removed after the node stops
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	errb := &syncBuffer{}
	go func() {
		done <- run(ctx, append([]string{"serve", "--listen", addr, "--data-dir", data}, args...), io.Discard, errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
	})
	base := "http://" + addr
	for range 500 {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return base
		}
		select {
		case code := <-done:
			t.Fatalf("serve %v exited %d: %s", args, code, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve %v: no /healthz: %s", args, errb.String())
	return ""
}

// TestServeNATSApiAndWorker: an API node with the embedded NATS server and
// a worker node that joins it; a job posted to the API runs on the worker
// and its state and video come back through JetStream; so does a remix
// of it.
func TestServeNATSApiAndWorker(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	natsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	api := serveNode(t, "--models", model, "--nats", "embedded", "--nats-listen", natsAddr, "--role", "api")
	serveNode(t, "--models", model, "--nats", "nats://"+natsAddr, "--role", "worker", "--worker-name", "w1")

	body := `{"model":"wan-tiny","prompt":"a red fox","size":"32x32","num_frames":5,"num_inference_steps":2,"guidance_scale":1,"seed":7}`
	id := postJob(t, api, body)
	events := make(chan []string, 1)
	go func() { events <- followEvents(t, api+"/v1/videos/"+id+"/events") }()
	waitCompleted(t, api, id)
	r, err := http.Get(api + "/v1/videos/" + id + "/content")
	if err != nil {
		t.Fatal(err)
	}
	video, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || len(video) == 0 {
		t.Fatalf("content: %d, %d bytes", r.StatusCode, len(video))
	}
	// The job ran on the worker; its events reached the API node.
	var evs []string
	select {
	case evs = <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream on the API node did not end after the job completed")
	}
	counts := map[string]int{}
	for _, e := range evs {
		counts[e]++
	}
	if counts["progress"] < 3 || counts["completed"] != 1 || evs[len(evs)-1] != "completed" {
		t.Fatalf("events on the API node: %v", evs)
	}
	// A remix: the API node reads the source's video from the object
	// store and stores it as the new job's input, which the worker reads.
	waitCompleted(t, api, postTo(t, api+"/v1/videos/"+id+"/remix", `{"prompt":"a blue bird","strength":1}`))
}

// TestServeNATSImageJob: an image-to-video job posted to the API node runs
// on a worker with its own data folder: the image travels through
// JetStream's object store with the job.
func TestServeNATSImageJob(t *testing.T) {
	model := tinyI2VMoE(t)
	natsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	api := serveNode(t, "--models", model, "--nats", "embedded", "--nats-listen", natsAddr, "--role", "api")
	serveNode(t, "--models", model, "--nats", "nats://"+natsAddr, "--role", "worker", "--worker-name", "w1")
	img, err := os.ReadFile(filepath.Join("..", "pipeline", "wan", "testdata", "wan21_i2v_pipeline", "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"i2v-moe","prompt":"a red fox","size":"32x32","num_frames":5,"num_inference_steps":2,"guidance_scale":1,"seed":7,` +
		`"input_reference":"data:image/png;base64,` + base64.StdEncoding.EncodeToString(img) + `"}`
	waitCompleted(t, api, postJob(t, api, body))
}

// nodeJob is the part of a job's JSON these tests read.
type nodeJob struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Error  json.RawMessage `json:"error"`
}

// postJob submits body to the API node and returns the job's id.
func postJob(t *testing.T, api, body string) string {
	t.Helper()
	return postTo(t, api+"/v1/videos", body)
}

// postTo posts body to a route that answers 202 with a new job (create,
// remix) and returns the job's id.
func postTo(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var job nodeJob
	json.NewDecoder(resp.Body).Decode(&job)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || job.ID == "" {
		t.Fatalf("POST %s: %d %+v", url, resp.StatusCode, job)
	}
	return job.ID
}

// waitCompleted polls a job until it completes, failing t if it ends
// otherwise or takes over a minute.
func waitCompleted(t *testing.T, api, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var job nodeJob
	for job.Status != "completed" {
		if job.Status == "failed" || job.Status == "cancelled" || time.Now().After(deadline) {
			t.Fatalf("job %s ended %q: %s", id, job.Status, job.Error)
		}
		time.Sleep(50 * time.Millisecond)
		r, err := http.Get(api + "/v1/videos/" + id)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(r.Body).Decode(&job)
		r.Body.Close()
	}
}

// followEvents reads a job's Server-Sent Events until the stream ends and
// returns their types.
func followEvents(t *testing.T, url string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			types = append(types, typ)
		}
	}
	return types
}

// syncBuffer is a bytes.Buffer safe for the serve goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
