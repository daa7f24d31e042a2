package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"ferry/chart"
	"ferry/media"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/planner"
	"ferry/residency"
	"ferry/server/queue"
	"ferry/tensor"
)

// work leases jobs one at a time and runs them until the server stops.
// One job at a time: a job already has the whole device budget it was
// planned for, and the CPU backend uses every core.
func (s *Server) work() {
	defer s.wg.Done()
	for s.ctx.Err() == nil {
		select {
		case w := <-s.warm:
			w.done <- s.warmUp(w)
			continue
		default:
		}
		wake := s.q.Wait()
		j, l, err := s.q.Lease(s.ctx, queue.Budget{Worker: s.cfg.WorkerName, Fits: s.fits})
		if err == nil {
			s.runJob(j, l)
			continue
		}
		if !errors.Is(err, queue.ErrNoJob) {
			fmt.Fprintf(os.Stderr, "ferry serve: lease: %v\n", err)
		}
		select {
		case <-s.ctx.Done():
		case <-wake:
		case w := <-s.warm:
			w.done <- s.warmUp(w)
		case <-time.After(time.Second):
		}
	}
}

// warmReq asks the worker to load a model's weights between jobs.
type warmReq struct {
	model string
	keep  *time.Duration
	done  chan error
}

// warmUp loads a model by running the smallest request through it (one
// frame, one step; grey images for an image-to-video model): the weights
// its plan keeps stay resident for keep (or the default keep-alive), and a
// later request at another shape keeps them when the plan still fits.
func (s *Server) warmUp(w warmReq) error {
	// The resident preset where it fits: loading is asking for the weights
	// to stay (auto might stream them for so small a request).
	sp := spec{Prompt: "warm-up", Model: w.model, Width: 32, Height: 32, Frames: 1, Steps: 1, Guidance: 1, FPS: defaultFPS, Plan: "resident"}
	m, err := s.models.opened(w.model)
	if err != nil {
		return err
	}
	if err := warmImages(m, &sp); err != nil {
		return err
	}
	m, _, err = s.models.acquire(&sp)
	var ie *errInsufficient
	if errors.As(err, &ie) {
		sp.Plan = ""
		m, _, err = s.models.acquire(&sp)
	}
	if err != nil {
		return err
	}
	m.ctx.use(s.ctx, nil)
	_, err = m.runPipe.Generate(m.rt, wanRequest(sp), false)
	m.ctx.use(nil, nil)
	s.models.release(m, err != nil, w.keep, 0)
	return err
}

// fits says whether this worker's budgets can run a job predicted to need
// n (the NATS queue asks; the local one only holds jobs admitted here).
func (s *Server) fits(n queue.Need) bool {
	if _, ok := s.models.byName[n.Model]; !ok {
		return false
	}
	return (s.cfg.DeviceBytes == 0 || n.DeviceBytes <= s.cfg.DeviceBytes) &&
		(s.cfg.HostBytes == 0 || n.HostBytes <= s.cfg.HostBytes)
}

// jobRun is one job's progress state.
type jobRun struct {
	s      *Server
	id     string
	lease  queue.Lease
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	phase  queue.Phase
	prog   float64
	text   int // text-encoder blocks run
	blocks int // text-encoder blocks in all
}

// Progress bands of the phases: loading and text up to 15, denoise to
// 90, VAE to 99, outputs to 100.
var bands = map[queue.Phase][2]float64{
	queue.PhaseLoading: {0, 2}, queue.PhaseText: {2, 15}, queue.PhaseDenoise: {15, 90},
	queue.PhaseVAE: {90, 99}, queue.PhaseOutput: {99, 100},
}

// report publishes a progress event and records it on the lease; a cancel
// requested elsewhere (another API node) stops the job.
func (r *jobRun) report(phase queue.Phase, done, total int) {
	r.mu.Lock()
	b := bands[phase]
	p := b[0]
	if total > 0 {
		p = b[0] + (b[1]-b[0])*float64(done)/float64(total)
	}
	p = max(p, r.prog)
	if phase != r.phase {
		p = max(b[0], p)
	}
	r.phase, r.prog = phase, p
	r.mu.Unlock()
	r.s.events.publish(r.id, "progress", eventData{ID: r.id, Status: string(queue.StatusInProgress), Phase: string(phase), Progress: p, Done: done, Total: total})
	r.heard(r.s.q.Progress(r.s.ctx, r.lease, queue.Update{Phase: phase, Progress: p}))
}

// dispatched records the prediction for the plan the job runs, chosen at
// dispatch (Job.Dispatched).
func (r *jobRun) dispatched(p queue.Peaks) {
	r.mu.Lock()
	phase, prog := r.phase, r.prog
	r.mu.Unlock()
	r.heard(r.s.q.Progress(r.s.ctx, r.lease, queue.Update{Phase: phase, Progress: prog, Dispatched: &p}))
}

// heard acts on the queue's answer to a progress record: a cancel request
// or a lost lease stops the job.
func (r *jobRun) heard(err error) {
	if errors.Is(err, queue.ErrCancelled) {
		r.cancel(errCancelRequested)
	} else if errors.Is(err, queue.ErrLeaseLost) {
		r.cancel(errLeaseLost)
	}
}

var errLeaseLost = errors.New("lease lost")

// onBlock turns executor blocks into progress: each text-encoder layer,
// and the start of denoising and decoding (steps and frames come from the
// pipeline's hooks).
func (r *jobRun) onBlock(comp, _ string) {
	if f := r.s.cfg.faults; f != nil && f.slowBlock > 0 {
		time.Sleep(f.slowBlock)
	}
	switch comp {
	case wan.TextEncoder:
		r.mu.Lock()
		r.text++
		done, total := r.text, r.blocks
		r.mu.Unlock()
		r.report(queue.PhaseText, done, total)
	case wan.Transformer:
		if r.currentPhase() != queue.PhaseDenoise {
			r.report(queue.PhaseDenoise, 0, 0)
		}
	case wan.VAE:
		if r.currentPhase() != queue.PhaseVAE {
			r.report(queue.PhaseVAE, 0, 0)
		}
	}
	r.injectOOM(comp)
}

// injectOOM fails the job as a runtime allocation failure would, in the
// phase a test asked for.
func (r *jobRun) injectOOM(comp string) {
	f := r.s.cfg.faults
	if f == nil || f.oomPhase == "" {
		return
	}
	phase := map[string]string{wan.TextEncoder: "text", wan.Transformer: "denoise", wan.VAE: "vae"}[comp]
	if phase == f.oomPhase {
		r.cancel(fmt.Errorf("injected: %w", tensor.ErrOutOfMemory))
	}
}

func (r *jobRun) currentPhase() queue.Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// runJob runs one leased job to a terminal state (or leaves it
// in_progress when the server shuts down, to re-run on restart).
func (s *Server) runJob(j queue.Job, l queue.Lease) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	run := &jobRun{s: s, id: j.ID, lease: l, cancel: cancel}
	s.runMu.Lock()
	s.cancel[j.ID] = cancel
	s.runMu.Unlock()
	defer func() {
		s.runMu.Lock()
		delete(s.cancel, j.ID)
		s.runMu.Unlock()
	}()
	if j.CancelRequested {
		cancel(errCancelRequested)
	}
	start := time.Now()
	run.report(queue.PhaseLoading, 0, 0)
	if f := s.cfg.faults; f != nil && f.slowBlock > 0 {
		time.Sleep(10 * f.slowBlock)
	}
	var sp spec
	if err := json.Unmarshal(j.Request, &sp); err != nil {
		s.finish(run, queue.StatusFailed, &queue.JobError{Code: queue.CodeBadRequest, Message: "stored request unreadable: " + err.Error()}, queue.Peaks{})
		return
	}
	err := s.loadImages(ctx, j.ID, &sp)
	if err == nil {
		err = s.loadVideo(ctx, j.ID, &sp)
	}
	if err != nil {
		s.finish(run, queue.StatusFailed, &queue.JobError{Code: queue.CodeInternal, Message: err.Error()}, queue.Peaks{})
		return
	}
	m, pred, err := s.models.acquire(&sp)
	if err != nil {
		code := queue.CodeInternal
		var ie *errInsufficient
		var fe *fieldError
		switch {
		case errors.As(err, &ie):
			code = "insufficient_memory"
		case errors.As(err, &fe):
			code = queue.CodeBadRequest // a LoRA removed since admission
		}
		s.finish(run, queue.StatusFailed, &queue.JobError{Code: code, Message: err.Error()}, queue.Peaks{})
		return
	}
	run.dispatched(s.models.dispatchedPeaks(m, pred))
	outs, measured, runErr := s.generate(ctx, run, m, sp, pred)
	measured.Seconds = time.Since(start).Seconds()
	cause := context.Cause(ctx)
	s.models.release(m, runErr != nil, sp.KeepAlive, measured.Seconds)
	switch {
	case runErr == nil:
		run.report(queue.PhaseOutput, 0, 0)
		if err := s.store(ctx, j.ID, outs); err != nil {
			runErr = err
			cause = context.Cause(ctx)
		}
	}
	switch {
	case errors.Is(cause, errShutdown) || s.ctx.Err() != nil:
		return // stays in_progress in the journal: re-runs on restart
	case errors.Is(cause, errCancelRequested):
		s.finish(run, queue.StatusCancelled, nil, measured)
	case runErr == nil:
		s.observe(pred.PeakDeviceReservedBytes, measured)
		s.finish(run, queue.StatusCompleted, nil, measured)
	default:
		s.finish(run, queue.StatusFailed, classify(runErr, cause), measured)
	}
}

// classify names a job's failure.
func classify(err, cause error) *queue.JobError {
	var be *residency.BudgetError
	switch {
	case errors.Is(err, tensor.ErrOutOfMemory) || errors.Is(cause, tensor.ErrOutOfMemory):
		if cause != nil && errors.Is(cause, tensor.ErrOutOfMemory) {
			err = cause
		}
		return &queue.JobError{Code: queue.CodeOOM, Message: err.Error()}
	case errors.As(err, &be):
		return &queue.JobError{Code: queue.CodeOOM, Message: err.Error()}
	case errors.Is(err, syscall.ENOSPC):
		return &queue.JobError{Code: queue.CodeDiskFull, Message: err.Error()}
	}
	return &queue.JobError{Code: queue.CodeInternal, Message: err.Error()}
}

// finish journals a terminal state and publishes its one terminal event.
func (s *Server) finish(run *jobRun, st queue.Status, e *queue.JobError, m queue.Peaks) {
	// Counted before the terminal state is recorded, so that /metrics
	// never lags what GET /v1/videos/{id} shows (taken back if the record
	// fails).
	s.countFinished(st, 1)
	var err error
	switch st {
	case queue.StatusCompleted:
		err = s.q.Complete(s.ctx, run.lease, m)
	case queue.StatusCancelled:
		err = s.q.Cancelled(s.ctx, run.lease)
	default:
		err = s.q.Fail(s.ctx, run.lease, *e, m)
	}
	if err != nil {
		s.countFinished(st, -1)
		fmt.Fprintf(os.Stderr, "ferry serve: job %s: record %s: %v\n", run.id, st, err)
		return
	}
	d := eventData{ID: run.id, Status: string(st)}
	if st == queue.StatusCompleted {
		d.Progress = 100
	}
	if e != nil {
		d.Error = &jobError{Code: e.Code, Message: e.Message}
	}
	s.events.publish(run.id, string(st), d)
}

// countFinished adds n to the finished jobs of status st (/metrics).
func (s *Server) countFinished(st queue.Status, n int64) {
	s.stats.mu.Lock()
	s.stats.finished[st] += n
	s.stats.mu.Unlock()
}

// observe records a completed job's time and peak ratio for /metrics.
func (s *Server) observe(predicted int64, m queue.Peaks) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	s.stats.jobSeconds += m.Seconds
	s.stats.jobCount++
	if predicted > 0 {
		r := float64(m.DeviceBytes) / float64(predicted)
		s.stats.lastRatio = r
		s.stats.peakRatioSum += r
		s.stats.peakRatioN++
	}
}

// output is one variant's bytes.
type output struct {
	variant string
	data    []byte
}

// generate runs the pipeline on m's resident runtime and renders the
// outputs in memory; nothing is stored yet.
func (s *Server) generate(ctx context.Context, run *jobRun, m *model, sp spec, pred planner.Prediction) ([]output, queue.Peaks, error) {
	rt := m.rt
	// Shared components run on their own runtimes: their blocks report
	// progress and honour cancel through their contexts as m's do.
	var others []*pipeline.Runtime
	for _, sh := range m.shared {
		if m.runPipe.Shared[sh.component] == nil {
			continue // a remix's VAE runs in m's runtime (videoMode)
		}
		sh.ctx.use(ctx, run.onBlock)
		defer sh.ctx.use(nil, nil)
		others = append(others, sh.rt)
	}
	textRT := rt
	if st := m.runPipe.Shared[wan.TextEncoder]; st != nil {
		textRT = st.Runtime
	}
	run.blocks = textRT.Exec.Blocks(wan.TextEncoder)
	m.ctx.use(ctx, run.onBlock)
	m.runPipe.OnStep = func(done, total int) { run.report(queue.PhaseDenoise, done, total) }
	m.runPipe.OnFrame = func(done, total int) { run.report(queue.PhaseVAE, done, total) }
	defer func() {
		m.ctx.use(nil, nil)
		m.runPipe.OnStep, m.runPipe.OnFrame = nil, nil
	}()
	// A job that runs in shared components' runtimes besides m's stays
	// within its budgets across them all, and its peaks are those of the
	// sum (reserved bytes, as predicted: what the budgets cap).
	rts := append([]*pipeline.Runtime{rt}, others...)
	if len(others) > 0 {
		defer pipeline.Cap(s.models.jobRoom(m, rt.Budget), rts...)()
	}
	devPeak, hostPeak := pipeline.NewMeter(), pipeline.NewMeter()
	for _, r := range rts {
		r.NewRequest()
		r.Join(devPeak, hostPeak)
		defer r.Join(nil, nil)
	}
	req := wanRequest(sp)
	out, err := m.runPipe.Generate(rt, req, false)
	job := rt.Measure()
	peaks := queue.Peaks{DeviceBytes: devPeak.Peak(), HostBytes: hostPeak.Peak(),
		Plan: planLabel(rt.Plan, m.prof.ComponentNames()), Warm: m.warm, DiskBytes: job.BytesReadDisk}
	for _, o := range others {
		peaks.DiskBytes += o.Measure().BytesReadDisk
	}
	if err != nil {
		return nil, peaks, err
	}
	s.models.remember(sp, out)
	if f := s.cfg.faults; f != nil && f.onVideo != nil {
		f.onVideo(run.id, out.Video)
	}
	if err := ctx.Err(); err != nil {
		return nil, peaks, err
	}
	outs, err := s.render(sp, req, rt, out, pred, job)
	return outs, peaks, err
}

// render encodes the video and the asked-for variants.
func (s *Server) render(sp spec, req wan.Request, rt *pipeline.Runtime, out *wan.Output, pred planner.Prediction, m pipeline.Measured) ([]output, error) {
	tmpDir := filepath.Join(s.cfg.DataDir, "tmp")
	if s.cfg.DataDir == "" {
		tmpDir = os.TempDir()
	}
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	// mp4 where ffmpeg is installed, else MJPEG AVI (no external encoder);
	// videoType serves either with its media type.
	ext := ".avi"
	if media.CanWriteMP4() {
		ext = ".mp4"
	}
	f, err := os.CreateTemp(tmpDir, "video-*"+ext)
	if err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	if err := media.Write(path, out.Video, out.Frames, out.H, out.W, sp.FPS); err != nil {
		return nil, fmt.Errorf("encode video: %w", err)
	}
	video, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encode video: %w", err)
	}
	outs := []output{{"video", video}}
	for _, v := range sp.Outputs {
		var data []byte
		switch v {
		case "report":
			rep := pipeline.Report{Model: sp.Model, Request: req, Plan: rt.Plan, Budget: rt.Budget, Measured: m, Predicted: pred}
			data, err = json.MarshalIndent(rep, "", "  ")
		case "plan":
			data, err = rt.Plan.YAML()
		case "trace":
			var buf bytes.Buffer
			err = rt.Trace.WriteChrome(&buf)
			data = buf.Bytes()
		case "chart":
			var buf bytes.Buffer
			info := chart.Info{Title: sp.Model, Subtitle: "plan " + rt.Plan.Name, DeviceBudget: rt.Budget.DeviceBytes,
				HostBudget: rt.Budget.HostBytes, PredictedDevicePeak: pred.PeakDeviceBytes, PredictedHostPeak: pred.PeakHostBytes}
			err = chart.Render(&buf, chart.FromRecorder(rt.Trace, info), chart.SVG)
			data = buf.Bytes()
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", v, err)
		}
		outs = append(outs, output{v, data})
	}
	return outs, nil
}

// store writes the outputs (each atomically). A cancel that arrives
// meanwhile wins: Cancelled removes what was written. A full disk marks
// the server not ready.
func (s *Server) store(ctx context.Context, id string, outs []output) error {
	for _, o := range outs {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if f := s.cfg.faults; f != nil && f.slowBlock > 0 {
			time.Sleep(10 * f.slowBlock)
		}
		if f := s.cfg.faults; f != nil && f.diskFull {
			err = fmt.Errorf("write %s: %w", o.variant, syscall.ENOSPC)
		} else {
			err = s.q.PutOutput(ctx, id, o.variant, o.data)
		}
		if errors.Is(err, syscall.ENOSPC) {
			s.diskFull.Store(true)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// diskHasRoom reports whether dir's filesystem has at least 64 MiB free.
func diskHasRoom(dir string) bool {
	if dir == "" {
		return true
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return int64(st.Bavail)*int64(st.Bsize) >= 64<<20
}

// janitor expires keep-alives and old outputs.
func (s *Server) janitor() {
	defer s.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastTTL := time.Now()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-tick.C:
			s.models.expire(now)
			if s.cfg.OutputTTL > 0 && now.Sub(lastTTL) > time.Minute {
				lastTTL = now
				s.expireOutputs(now)
			}
		}
	}
}

// expireOutputs deletes jobs that ended more than OutputTTL ago (listed
// first, deleted after, so the paging cursor stays valid).
func (s *Server) expireOutputs(now time.Time) {
	var old []string
	after := ""
	for range 1000 {
		jobs, more, err := s.q.List(s.ctx, queue.Page{After: after, Limit: 100})
		if err != nil || len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			if j.Status.Terminal() && now.Sub(j.EndedAt) > s.cfg.OutputTTL {
				old = append(old, j.ID)
			}
		}
		if !more {
			break
		}
		after = jobs[len(jobs)-1].ID
	}
	for _, id := range old {
		s.q.Delete(s.ctx, id)
		s.events.forget(id)
	}
}
