package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"ferry/hwprofile"
	"ferry/planner"
	"ferry/server/queue"
)

// Config sets up a Server.
type Config struct {
	// DataDir holds the journal and outputs (the local queue).
	DataDir string
	// DeviceBytes and HostBytes are the memory budgets every job and all
	// resident models share (0: unlimited).
	DeviceBytes, HostBytes int64
	// Models are pipeline folders, or folders of them.
	Models []string
	// LoRADirs hold the LoRA files requests may name (besides each models
	// folder's lora/ or loras/); no other file is ever read for a request.
	LoRADirs []string
	// MaxQueue bounds jobs waiting or running (0: unbounded).
	MaxQueue int
	// KeepAlive is how long a model stays resident after a job, unless the
	// request says otherwise (negative: forever, 0: unload at once).
	KeepAlive time.Duration
	// OutputTTL deletes finished jobs and their outputs this long after
	// they end (0: never).
	OutputTTL time.Duration
	// APIKey, when set, is required as a Bearer token on every route but
	// /healthz and /readyz.
	APIKey string
	// Queue replaces the local journal (the NATS queue); the server closes
	// it.
	Queue queue.Queue
	// Worker runs jobs in this process (default true through New's
	// callers; the NATS api role turns it off).
	NoWorker bool
	// WorkerName names this worker in leases.
	WorkerName string
	// MaxReruns is how often a job interrupted by a restart re-runs
	// (default 2).
	MaxReruns int
	// PromptCacheBytes bounds the prompt cache (prompts.go; 0: off).
	PromptCacheBytes int64
	// faults inject failures in tests.
	faults *faults
}

// faults are test hooks: fail a job's allocation in a phase, or its
// output write.
type faults struct {
	oomPhase  string // "text", "denoise" or "vae": the first block of it fails
	diskFull  bool
	slowBlock time.Duration // sleep after every block (cancel tests)
	// onVideo sees every completed job's frames before encoding (tests
	// compare them with the pipeline's, bit for bit).
	onVideo func(id string, video []float32)
}

// faultsFromEnv reads FERRY_SERVE_SLOW_BLOCK (a duration): the scripts in
// scripts/serve-*.sh slow every block (and each output write ten times as
// much) so that a kill lands in the phase they aim at. Unset in normal use.
func faultsFromEnv() *faults {
	v := os.Getenv("FERRY_SERVE_SLOW_BLOCK")
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return nil
	}
	return &faults{slowBlock: d}
}

// Server is ferry serve.
type Server struct {
	cfg    Config
	q      queue.Queue
	models *models
	events *hub

	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	runMu  sync.Mutex
	cancel map[string]context.CancelCauseFunc // running jobs

	diskFull atomic.Bool
	stats    stats
	warm     chan warmReq
}

// stats feed /metrics.
type stats struct {
	mu           sync.Mutex
	finished     map[queue.Status]int64
	jobSeconds   float64
	jobCount     int64
	peakRatioSum float64
	peakRatioN   int64
	lastRatio    float64
}

// New opens the queue, replays it and starts the worker.
func New(cfg Config) (*Server, error) {
	if cfg.MaxReruns == 0 {
		cfg.MaxReruns = 2
	}
	if cfg.WorkerName == "" {
		cfg.WorkerName = "local"
	}
	if cfg.faults == nil {
		cfg.faults = faultsFromEnv()
	}
	found, err := findModels(cfg.Models)
	if err != nil {
		return nil, err
	}
	hw, _, err := hwprofile.LoadOrDefault("")
	if err != nil {
		return nil, fmt.Errorf("hardware profile: %w (run ferry calibrate again)", err)
	}
	q := cfg.Queue
	if q == nil {
		if cfg.DataDir == "" {
			return nil, errors.New("--data-dir is required")
		}
		if q, err = queue.OpenJournal(cfg.DataDir, cfg.MaxQueue); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, q: q, events: newHub(), cancel: map[string]context.CancelCauseFunc{}, warm: make(chan warmReq),
		models: &models{byName: found, device: cfg.DeviceBytes, host: cfg.HostBytes, defaultKeep: cfg.KeepAlive, hw: hw,
			loraRoots: loraRoots(cfg.LoRADirs, cfg.Models), prompts: promptCache{max: cfg.PromptCacheBytes}}}
	s.models.shared = findShared(found)
	s.stats.finished = map[queue.Status]int64{}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if r, ok := q.(eventRelay); ok { // NATS: events cross processes
		s.events.relay = r.PublishEvent
		if _, err := r.SubscribeEvents(func(id, typ string, data []byte) { s.events.add(id, typ, data) }); err != nil {
			q.Close()
			return nil, err
		}
	}
	if !cfg.NoWorker {
		if _, err := q.Replay(s.ctx, cfg.MaxReruns); err != nil {
			q.Close()
			return nil, fmt.Errorf("replay journal: %w", err)
		}
		s.wg.Add(1)
		go s.work()
	}
	s.wg.Add(1)
	go s.janitor()
	return s, nil
}

// Close stops the worker (a running job stays in_progress in the journal
// and re-runs on the next start), frees the models and closes the queue.
func (s *Server) Close() error {
	s.stop()
	s.wg.Wait()
	s.models.closeAll()
	return s.q.Close()
}

// bodyReadTimeout bounds how long a client may take to send a body.
const bodyReadTimeout = 30 * time.Second

// errShutdown is the cancel cause of a job the server stops for shutdown.
var errShutdown = errors.New("server shutting down")

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/videos", s.create)
	mux.HandleFunc("GET /v1/videos", s.list)
	mux.HandleFunc("GET /v1/videos/{id}", s.get)
	mux.HandleFunc("DELETE /v1/videos/{id}", s.remove)
	mux.HandleFunc("POST /v1/videos/{id}/cancel", s.cancelJob)
	mux.HandleFunc("POST /v1/videos/{id}/remix", s.remix)
	mux.HandleFunc("GET /v1/videos/{id}/content", s.content)
	mux.HandleFunc("GET /v1/videos/{id}/events", s.stream)
	mux.HandleFunc("GET /v1/residency", s.residency)
	mux.HandleFunc("POST /v1/models/{name}/load", s.loadModel)
	mux.HandleFunc("POST /v1/models/{name}/unload", s.unloadModel)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /readyz", s.ready)
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return s.recoverer(s.auth(mux))
}

// auth requires the API key as a Bearer token except on health routes.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.APIKey != "" && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				writeError(w, http.StatusUnauthorized, "invalid_api_key", "", "missing or wrong API key: send Authorization: Bearer KEY")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a handler panic into a 500 so one bad request cannot
// take the server down.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, http.StatusInternalServerError, "internal_error", "", fmt.Sprintf("internal error: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// HTTPServer wraps the handler with timeouts fit for an API whose event
// streams run long: no write timeout, bounded headers and reads.
func (s *Server) HTTPServer(addr string) *http.Server {
	// No ReadTimeout either: its deadline stays on the connection and would
	// end event streams; create sets a read deadline for its body instead.
	hs := &http.Server{Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return s.ctx }}
	// Shutdown ends the event streams (their requests' context is the
	// server's) and stops the worker; the running job stays in the journal.
	hs.RegisterOnShutdown(s.stop)
	return hs
}

// videoJSON is a job in the OpenAI video object's shape, with ferry's
// fields.
type videoJSON struct {
	ID            string       `json:"id"`
	Object        string       `json:"object"`
	Model         string       `json:"model"`
	Status        queue.Status `json:"status"`
	Phase         queue.Phase  `json:"phase,omitempty"`
	Progress      float64      `json:"progress"`
	CreatedAt     int64        `json:"created_at"`
	CompletedAt   *int64       `json:"completed_at"`
	ExpiresAt     *int64       `json:"expires_at"`
	Size          string       `json:"size"`
	Seconds       string       `json:"seconds"`
	NumFrames     int          `json:"num_frames"`
	Prompt        string       `json:"prompt"`
	Error         *jobError    `json:"error"`
	QueuePosition *int         `json:"queue_position,omitempty"`
	Predicted     queue.Peaks  `json:"predicted"`
	Dispatched    *queue.Peaks `json:"dispatched,omitempty"`
	Measured      *queue.Peaks `json:"measured,omitempty"`
	Attempts      int          `json:"attempts"`
	Outputs       []string     `json:"outputs,omitempty"`
	CancelPending bool         `json:"cancel_requested,omitempty"`
	// LoRA lists the adapters the request named, as it named them.
	LoRA []loraRef `json:"lora,omitempty"`
	// LoRA2 lists the low-noise expert's adapters (lora_2).
	LoRA2 []loraRef `json:"lora_2,omitempty"`
	// RemixedFromVideoID is the video a remix was made from (OpenAI's
	// field), Strength how much of its schedule ran.
	RemixedFromVideoID string  `json:"remixed_from_video_id,omitempty"`
	Strength           float64 `json:"strength,omitempty"`
}

// predictedPeaks is what a job shows of a prediction: peaks, seconds, the
// plan and its load time.
func predictedPeaks(pred planner.Prediction) queue.Peaks {
	return queue.Peaks{DeviceBytes: pred.PeakDeviceReservedBytes, HostBytes: pred.PeakHostBytes, Seconds: pred.TotalS,
		Plan: pred.Plan, LoadSeconds: pred.LoadS}
}

func (s *Server) video(j queue.Job) videoJSON {
	var sp spec
	json.Unmarshal(j.Request, &sp)
	v := videoJSON{ID: j.ID, Object: "video", Model: j.Model, Status: j.Status, Phase: j.Phase, Progress: j.Progress,
		CreatedAt: j.CreatedAt.Unix(), Size: fmt.Sprintf("%dx%d", sp.Width, sp.Height), NumFrames: sp.Frames,
		Prompt: sp.Prompt, Predicted: j.Predicted, Dispatched: j.Dispatched, Attempts: j.Attempts, Outputs: j.Outputs, CancelPending: j.CancelRequested,
		LoRA: sp.LoRAs, LoRA2: sp.LoRAs2, RemixedFromVideoID: sp.RemixOf, Strength: sp.Strength}
	if sp.FPS > 0 {
		v.Seconds = strconv.FormatFloat(float64(sp.Frames)/sp.FPS, 'f', 2, 64)
	}
	if j.Error != nil {
		v.Error = &jobError{Code: j.Error.Code, Message: j.Error.Message}
	}
	if j.Status.Terminal() {
		t := j.EndedAt.Unix()
		v.CompletedAt = &t
		if s.cfg.OutputTTL > 0 {
			e := j.EndedAt.Add(s.cfg.OutputTTL).Unix()
			v.ExpiresAt = &e
		}
	}
	if j.Measured.Seconds > 0 {
		m := j.Measured
		v.Measured = &m
	}
	if j.Status == queue.StatusQueued {
		if p, err := s.q.Position(s.ctx, j.ID); err == nil && p >= 0 {
			v.QueuePosition = &p
		}
	}
	return v
}

// create is POST /v1/videos: validate, plan, queue.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxBodyBytes)
	if !ok {
		return
	}
	req, err := decodeBody(r.Header.Get("Content-Type"), body)
	var sp spec
	if err == nil {
		sp, err = req.toSpec()
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, "invalid_value", fe.param, fe.Error())
		return
	}
	pred, err := s.models.admit(&sp)
	if s.admissionError(w, err) {
		return
	}
	s.enqueue(w, r, sp, pred)
}

// enqueue stores an admitted spec's inputs, queues it and answers 202.
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request, sp spec, pred planner.Prediction) {
	raw, _ := json.Marshal(sp)
	j := queue.Job{ID: newID(), Model: sp.Model, Request: raw,
		Predicted: predictedPeaks(pred)}
	// The inputs first: a worker may take the job as soon as it is queued.
	id := j.ID
	if err := s.putInputs(r.Context(), id, sp); err != nil {
		s.q.DropInputs(context.Background(), id)
		if errors.Is(err, syscall.ENOSPC) {
			s.diskFull.Store(true) // /readyz says so until space returns
			writeError(w, http.StatusInsufficientStorage, "disk_full", "", "no room to store the request's inputs: "+err.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	j, _, err := s.q.Submit(r.Context(), j)
	if err != nil {
		s.q.DropInputs(context.Background(), id)
	}
	if errors.Is(err, queue.ErrQueueFull) {
		w.Header().Set("Retry-After", strconv.Itoa(s.retryAfter()))
		writeError(w, http.StatusServiceUnavailable, "queue_full", "", fmt.Sprintf("the queue is full (%d jobs); retry later", s.cfg.MaxQueue))
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	s.events.publish(j.ID, "queued", eventData{ID: j.ID, Status: string(j.Status)})
	writeJSON(w, http.StatusAccepted, s.video(j))
}

// readBody reads a request body of at most limit bytes within
// bodyReadTimeout, answering 413 or 400 (false) when it cannot.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "", fmt.Sprintf("request body over %d bytes", limit))
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "", "could not read the body: "+err.Error())
		return nil, false
	}
	return body, true
}

// admissionError answers a planning failure; false when err is nil.
func (s *Server) admissionError(w http.ResponseWriter, err error) bool {
	var fe *fieldError
	var ie *errInsufficient
	switch {
	case err == nil:
		return false
	case errors.Is(err, errUnknownModel):
		writeError(w, http.StatusNotFound, "model_not_found", "model", "unknown model (GET /v1/residency lists the models served)")
	case errors.As(err, &ie):
		writeError(w, http.StatusUnprocessableEntity, "insufficient_memory", "", ie.Error())
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, "invalid_value", fe.param, fe.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
	}
	return true
}

// retryAfter estimates seconds until a slot frees: the mean job time.
func (s *Server) retryAfter() int {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	if s.stats.jobCount == 0 {
		return 5
	}
	return max(1, int(s.stats.jobSeconds/float64(s.stats.jobCount)+0.5))
}

var idCounter atomic.Int64

// newID is "video_" and a time-ordered unique suffix.
func newID() string {
	return fmt.Sprintf("video_%x%04x", time.Now().UnixNano(), idCounter.Add(1)&0xffff)
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (queue.Job, bool) {
	j, err := s.q.Get(r.Context(), r.PathValue("id"))
	if errors.Is(err, queue.ErrNotFound) {
		writeError(w, http.StatusNotFound, "video_not_found", "id", fmt.Sprintf("no video %q", r.PathValue("id")))
		return j, false
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return j, false
	}
	return j, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	if j, ok := s.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, s.video(j))
	}
}

// list is GET /v1/videos?after=ID&limit=N, newest first.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, "invalid_value", "limit", "limit: want 1..100")
			return
		}
		limit = n
	}
	jobs, more, err := s.q.List(r.Context(), queue.Page{After: r.URL.Query().Get("after"), Limit: limit})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	data := make([]videoJSON, 0, len(jobs))
	for _, j := range jobs {
		data = append(data, s.video(j))
	}
	out := map[string]any{"object": "list", "data": data, "has_more": more}
	if len(data) > 0 {
		out["first_id"], out["last_id"] = data[0].ID, data[len(data)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

// remove is DELETE /v1/videos/{id}: a running or queued job is cancelled
// first.
func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookup(w, r)
	if !ok {
		return
	}
	if !j.Status.Terminal() {
		s.doCancel(r.Context(), j.ID)
		if !s.waitTerminal(r.Context(), j.ID, 30*time.Second) {
			writeError(w, http.StatusConflict, "video_running", "id", "the job is still stopping; retry the delete")
			return
		}
	}
	if err := s.q.Delete(r.Context(), j.ID); err != nil && !errors.Is(err, queue.ErrNotFound) {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	s.events.forget(j.ID)
	writeJSON(w, http.StatusOK, map[string]any{"id": j.ID, "object": "video.deleted", "deleted": true})
}

// waitTerminal polls until the job ends or the wait runs out.
func (s *Server) waitTerminal(ctx context.Context, id string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		j, err := s.q.Get(ctx, id)
		if err != nil || j.Status.Terminal() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// cancelJob is POST /v1/videos/{id}/cancel: idempotent; a queued job is
// cancelled at once, a running one stops at its next block boundary.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.doCancel(r.Context(), r.PathValue("id"))
	if errors.Is(err, queue.ErrNotFound) {
		// Idempotent for ids that never existed too: nothing runs.
		writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "object": "video", "status": "not_found"})
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.video(j))
}

func (s *Server) doCancel(ctx context.Context, id string) (queue.Job, error) {
	j, err := s.q.Cancel(ctx, id)
	if err != nil {
		return j, err
	}
	if j.Status == queue.StatusCancelled {
		s.events.publish(id, "cancelled", eventData{ID: id, Status: string(queue.StatusCancelled)})
	}
	s.runMu.Lock()
	if c, ok := s.cancel[id]; ok {
		c(errCancelRequested)
	}
	s.runMu.Unlock()
	return j, nil
}

var errCancelRequested = errors.New("cancelled by request")

// content is GET /v1/videos/{id}/content?variant=...: 409 until the job
// completed.
func (s *Server) content(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookup(w, r)
	if !ok {
		return
	}
	variant := r.URL.Query().Get("variant")
	if variant == "" {
		variant = "video"
	}
	ctype, known := variants[variant]
	source := variant
	if dt, ok := derived[variant]; ok {
		ctype, known, source = dt, true, "video"
	}
	if !known {
		writeError(w, http.StatusBadRequest, "invalid_value", "variant", fmt.Sprintf("variant %q: want video, thumbnail, spritesheet, report, trace, chart or plan", variant))
		return
	}
	if j.Status != queue.StatusCompleted {
		writeError(w, http.StatusConflict, "video_not_ready", "id", fmt.Sprintf("the video is %s; content is available once it completed", j.Status))
		return
	}
	data, err := s.q.GetOutput(r.Context(), j.ID, source)
	if err == nil && source != variant {
		data, err = deriveContent(variant, data)
	}
	if errors.Is(err, queue.ErrNoOutput) {
		writeError(w, http.StatusNotFound, "variant_not_found", "variant", fmt.Sprintf("variant %q was not produced (ask for it in outputs)", variant))
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", "", err.Error())
		return
	}
	if variant == "video" {
		ctype = videoType(data)
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}

// stream is GET /v1/videos/{id}/events: Server-Sent Events from
// Last-Event-ID on, ending after the one terminal event. Closing it never
// cancels the job.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	j, ok := s.lookup(w, r)
	if !ok {
		return
	}
	after := 0
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "invalid_value", "Last-Event-ID", "Last-Event-ID: want an event number")
			return
		}
		after = n
	}
	// A job that ended before this process started has no log: its
	// terminal event is rebuilt from its state.
	if j.Status.Terminal() {
		d := eventData{ID: j.ID, Status: string(j.Status), Progress: j.Progress}
		if j.Error != nil {
			d.Error = &jobError{Code: j.Error.Code, Message: j.Error.Message}
		}
		s.events.publish(j.ID, string(j.Status), d)
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	seen := j
	for {
		evs, ended, wake := s.events.since(j.ID, after)
		if ended && len(evs) == 0 {
			return // the client has seen the terminal event already
		}
		for _, e := range evs {
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, e.Data)
			after = e.ID
			if isTerminal(e.Type) {
				if fl != nil {
					fl.Flush()
				}
				return
			}
		}
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
		case <-poll.C:
			seen = s.pollState(seen)
		}
	}
}

// pollState publishes what the queue knows of a job that no worker in
// this process runs (another node's, with the NATS queue): its progress as
// it changes and its terminal state. A terminal event the local worker
// published already wins; the hub keeps one.
func (s *Server) pollState(prev queue.Job) queue.Job {
	j, err := s.q.Get(s.ctx, prev.ID)
	if err != nil {
		return prev
	}
	s.runMu.Lock()
	_, local := s.cancel[j.ID]
	s.runMu.Unlock()
	switch {
	case j.Status.Terminal():
		d := eventData{ID: j.ID, Status: string(j.Status), Progress: j.Progress}
		if j.Error != nil {
			d.Error = &jobError{Code: j.Error.Code, Message: j.Error.Message}
		}
		s.events.publish(j.ID, string(j.Status), d)
	case !local && j.Status == queue.StatusInProgress && (j.Phase != prev.Phase || j.Progress != prev.Progress):
		s.events.publish(j.ID, "progress", eventData{ID: j.ID, Status: string(j.Status), Phase: string(j.Phase), Progress: j.Progress})
	}
	return j
}

// ready is /readyz: false while the disk is full (until space returns)
// or the queue is unavailable.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.diskFull.Load() && !s.cfg.faultsDiskFull() && diskHasRoom(s.cfg.DataDir) {
		s.diskFull.Store(false)
	}
	if s.diskFull.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "disk_full"})
		return
	}
	if _, _, err := s.q.Depth(r.Context()); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "queue_unavailable", "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (c Config) faultsDiskFull() bool { return c.faults != nil && c.faults.diskFull }

// videoType is the media type of an encoded video: the server writes mp4,
// or AVI (a RIFF file) where ffmpeg is missing.
func videoType(data []byte) string {
	if len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "AVI " {
		return "video/x-msvideo"
	}
	return "video/mp4"
}

// Hardware is the hardware profile the server plans with (its Note says
// whether a saved profile was set aside).
func (s *Server) Hardware() hwprofile.Profile { return s.models.hw }
