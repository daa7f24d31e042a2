package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"ferry/pipeline"
	"ferry/server/queue"
)

// componentView is one component's weights per tier.
type componentView struct {
	Name        string `json:"name"`
	DeviceBytes int64  `json:"device_bytes"`
	HostBytes   int64  `json:"host_bytes"`
	// DiskBytes are the blocks on neither tier (the checkpoint's mmap).
	DiskBytes int64 `json:"disk_bytes"`
	Blocks    int   `json:"blocks"`
	OnDevice  int   `json:"blocks_on_device"`
}

// modelView is one model in GET /v1/residency.
type modelView struct {
	Name        string          `json:"name"`
	Dir         string          `json:"dir"`
	Resident    bool            `json:"resident"`
	InUse       bool            `json:"in_use"`
	Plan        string          `json:"plan,omitempty"`
	KeepAlive   string          `json:"keep_alive,omitempty"`
	ExpiresAt   *int64          `json:"expires_at"`
	DeviceBytes int64           `json:"device_bytes"`
	HostBytes   int64           `json:"host_bytes"`
	Components  []componentView `json:"components"`
	// Shared names the shared components (GET /v1/residency's shared)
	// this model uses instead of its own copy.
	Shared []string `json:"shared,omitempty"`
}

type residencyView struct {
	Budgets struct {
		DeviceBytes int64 `json:"device_bytes"`
		HostBytes   int64 `json:"host_bytes"`
	} `json:"budgets"`
	Free struct {
		DeviceBytes int64 `json:"device_bytes"`
		HostBytes   int64 `json:"host_bytes"`
	} `json:"free"`
	Evictions int64       `json:"evictions"`
	Models    []modelView `json:"models"`
	// Shared are components held once for several models.
	Shared []sharedView `json:"shared"`
	// PromptCache is the prompt cache (prompts.go); its bytes count
	// against the host budget.
	PromptCache promptCacheView `json:"prompt_cache"`
}

// snapshot is the residency of every model now.
func (ms *models) snapshot() residencyView {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var v residencyView
	v.Budgets.DeviceBytes, v.Budgets.HostBytes = ms.device, ms.host
	v.Evictions = ms.evictions
	names := make([]string, 0, len(ms.byName))
	for n := range ms.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var dev, host int64
	for _, n := range names {
		m := ms.byName[n]
		mv := modelView{Name: m.name, Dir: m.dir, InUse: m.inUse, Resident: m.rt != nil, Components: []componentView{},
			Shared: sharedNote(m)}
		if m.rt != nil {
			mv.Plan = m.rt.Plan.Name
			mv.DeviceBytes, mv.HostBytes = m.deviceBytes(), m.hostBytes()
			dev += mv.DeviceBytes
			host += mv.HostBytes
			mv.KeepAlive = keepText(m.keep)
			if !m.expires.IsZero() {
				t := m.expires.Unix()
				mv.ExpiresAt = &t
			}
			mv.Components = componentsOf(m.rt)
		}
		v.Models = append(v.Models, mv)
	}
	v.Shared = []sharedView{}
	for _, sh := range ms.shared {
		sv := sh.view()
		dev += sv.DeviceBytes
		host += sv.HostBytes
		v.Shared = append(v.Shared, sv)
	}
	v.PromptCache = ms.prompts.view()
	host += v.PromptCache.Bytes
	if ms.device > 0 {
		v.Free.DeviceBytes = max(ms.device-dev, 0)
	}
	if ms.host > 0 {
		v.Free.HostBytes = max(ms.host-host, 0)
	}
	return v
}

func keepText(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return d.String()
}

// componentsOf groups a runtime's blocks by component.
func componentsOf(rt *pipeline.Runtime) []componentView {
	var out []componentView
	idx := map[string]int{}
	for _, r := range rt.Exec.Resident() {
		i, ok := idx[r.Component]
		if !ok {
			i = len(out)
			idx[r.Component] = i
			out = append(out, componentView{Name: r.Component})
		}
		c := &out[i]
		c.Blocks++
		switch {
		case r.OnHostCompute && r.DeviceBytes > 0:
			c.HostBytes += r.DeviceBytes
		case r.DeviceBytes > 0:
			c.DeviceBytes += r.DeviceBytes
			c.OnDevice++
		}
		c.HostBytes += r.HostBytes
		if r.DeviceBytes == 0 && r.HostBytes == 0 {
			c.DiskBytes += r.StoredBytes
		}
	}
	return out
}

func (s *Server) residency(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.models.snapshot())
}

// loadModel is POST /v1/models/{name}/load [{"keep_alive": ...}]: the
// worker loads the model's weights between jobs (a one-frame, one-step
// run), to stay for keep_alive (default: the server's).
func (s *Server) loadModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, ok := s.models.byName[name]; !ok {
		writeError(w, http.StatusNotFound, "model_not_found", "name", fmt.Sprintf("no model %q", name))
		return
	}
	var body struct {
		KeepAlive json.RawMessage `json:"keep_alive"`
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err == nil && len(bytes.TrimSpace(data)) > 0 {
		err = json.Unmarshal(data, &body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_value", "body", "want {\"keep_alive\": ...} or no body")
		return
	}
	req := warmReq{model: name, done: make(chan error, 1)}
	if len(body.KeepAlive) > 0 {
		d, err := parseKeepAlive(body.KeepAlive)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_value", "keep_alive", err.Error())
			return
		}
		req.keep = &d
	}
	if s.cfg.NoWorker {
		writeError(w, http.StatusConflict, "no_worker", "", "this node runs no jobs (role api): load models on a worker")
		return
	}
	select {
	case s.warm <- req:
	case <-r.Context().Done():
		return
	}
	select {
	case err = <-req.done:
	case <-r.Context().Done():
		return
	}
	if s.admissionError(w, err) {
		return
	}
	for _, m := range s.models.snapshot().Models {
		if m.Name == name {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
}

// unloadModel is POST /v1/models/{name}/unload: demotes its weights to
// disk now, unless a job is running on it (409).
func (s *Server) unloadModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	done, err := s.models.unload(name)
	if err != nil {
		writeError(w, http.StatusNotFound, "model_not_found", "name", fmt.Sprintf("no model %q", name))
		return
	}
	if !done {
		writeError(w, http.StatusConflict, "model_in_use", "name", "a job is running on this model; unload after it ends")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": name, "status": "unloaded"})
}

// metrics is Prometheus text exposition, written by hand.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	gauge := func(name, help string, v float64, labels ...string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		fmt.Fprintf(&b, "%s%s %g\n", name, labelText(labels), v)
	}
	queued, running, _ := s.q.Depth(r.Context())
	gauge("ferry_queue_depth", "Jobs waiting.", float64(queued))
	gauge("ferry_jobs_running", "Jobs running.", float64(running))
	s.stats.mu.Lock()
	fmt.Fprintf(&b, "# HELP ferry_jobs_finished_total Jobs that ended, by status.\n# TYPE ferry_jobs_finished_total counter\n")
	for _, st := range []queue.Status{queue.StatusCompleted, queue.StatusFailed, queue.StatusCancelled} {
		fmt.Fprintf(&b, "ferry_jobs_finished_total{status=%q} %d\n", st, s.stats.finished[st])
	}
	fmt.Fprintf(&b, "# HELP ferry_job_seconds Seconds of completed jobs.\n# TYPE ferry_job_seconds summary\n")
	fmt.Fprintf(&b, "ferry_job_seconds_sum %g\nferry_job_seconds_count %d\n", s.stats.jobSeconds, s.stats.jobCount)
	fmt.Fprintf(&b, "# HELP ferry_peak_ratio Measured over predicted device peak of completed jobs.\n# TYPE ferry_peak_ratio summary\n")
	fmt.Fprintf(&b, "ferry_peak_ratio_sum %g\nferry_peak_ratio_count %d\n", s.stats.peakRatioSum, s.stats.peakRatioN)
	s.stats.mu.Unlock()
	v := s.models.snapshot()
	fmt.Fprintf(&b, "# HELP ferry_evictions_total Demotions of resident weights.\n# TYPE ferry_evictions_total counter\nferry_evictions_total %d\n", v.Evictions)
	fmt.Fprintf(&b, "# HELP ferry_resident_bytes Bytes held by resident models, by tier.\n# TYPE ferry_resident_bytes gauge\n")
	var dev, host int64
	for _, m := range v.Models {
		dev += m.DeviceBytes
		host += m.HostBytes
	}
	for _, sh := range v.Shared {
		dev += sh.DeviceBytes
		host += sh.HostBytes
	}
	fmt.Fprintf(&b, "ferry_resident_bytes{tier=\"device\"} %d\nferry_resident_bytes{tier=\"host\"} %d\n", dev, host)
	gauge("ferry_prompt_cache_bytes", "Bytes of cached prompt embeddings (held in host memory, counted in its budget).", float64(v.PromptCache.Bytes))
	fmt.Fprintf(&b, "# HELP ferry_prompt_cache_lookups_total Jobs that looked up their prompts in the cache, by result.\n# TYPE ferry_prompt_cache_lookups_total counter\n")
	fmt.Fprintf(&b, "ferry_prompt_cache_lookups_total{result=\"hit\"} %d\nferry_prompt_cache_lookups_total{result=\"miss\"} %d\n", v.PromptCache.Hits, v.PromptCache.Misses)
	ready := 1.0
	if s.diskFull.Load() {
		ready = 0
	}
	gauge("ferry_ready", "1 when the server accepts work (disk not full).", ready)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write([]byte(b.String()))
}

func labelText(kv []string) string {
	if len(kv) == 0 {
		return ""
	}
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
