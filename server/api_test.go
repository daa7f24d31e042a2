package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"ferry/server/queue"
)

func TestAPIErrors(t *testing.T) {
	h := start(t, Config{NoWorker: true})
	big := strings.Repeat("x", maxBodyBytes)
	cases := []struct {
		name, method, path, body string
		code                     int
		errCode                  string
	}{
		{"not json", "POST", "/v1/videos", "{", 400, "invalid_value"},
		{"wrong type", "POST", "/v1/videos", `{"model":"wan-tiny","prompt":5,"size":"32x32"}`, 400, "invalid_value"},
		{"unknown field", "POST", "/v1/videos", tiny(`"colour":"red"`), 400, "invalid_value"},
		{"no prompt", "POST", "/v1/videos", `{"model":"wan-tiny","size":"32x32"}`, 400, "invalid_value"},
		{"size not WxH", "POST", "/v1/videos", strings.Replace(tiny(""), "32x32", "32by32", 1), 400, "invalid_value"},
		{"size not /16", "POST", "/v1/videos", strings.Replace(tiny(""), "32x32", "30x32", 1), 400, "invalid_value"},
		{"frames not 4k+1", "POST", "/v1/videos", strings.Replace(tiny(""), `"num_frames":5`, `"num_frames":6`, 1), 400, "invalid_value"},
		{"long prompt", "POST", "/v1/videos", strings.Replace(tiny(""), "a red fox", strings.Repeat("fox ", 25000), 1), 400, "invalid_value"},
		{"body too large", "POST", "/v1/videos", `{"prompt":"` + big + `"}`, 413, "request_too_large"},
		{"bad plan yaml", "POST", "/v1/videos", tiny(`"plan":"components: [oops"`), 400, "invalid_value"},
		{"unknown preset", "POST", "/v1/videos", tiny(`"plan":"warp-drive"`), 400, "invalid_value"},
		{"unknown model", "POST", "/v1/videos", strings.Replace(tiny(""), "wan-tiny", "wan-huge", 1), 404, "model_not_found"},
		{"does not fit", "POST", "/v1/videos", tiny(`"budgets":{"device_mem":"64KiB","host_mem":"64KiB"}`), 422, "insufficient_memory"},
		{"bad keep_alive", "POST", "/v1/videos", tiny(`"keep_alive":"soon"`), 400, "invalid_value"},
		{"bad variant", "GET", "/v1/videos/x/content?variant=gif", "", 404, "video_not_found"},
		{"unknown job", "GET", "/v1/videos/video_nope", "", 404, "video_not_found"},
		{"bad limit", "GET", "/v1/videos?limit=0", "", 400, "invalid_value"},
		{"no route", "GET", "/v2/things", "", 404, "not_found"},
		{"unknown model load", "POST", "/v1/models/nope/load", "", 404, "model_not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, data := h.do(c.method, c.path, c.body)
			if code != c.code {
				t.Fatalf("%d %s, want %d", code, data, c.code)
			}
			if got := errorCode(t, data); got != c.errCode {
				t.Fatalf("code %q, want %q", got, c.errCode)
			}
		})
	}
	// A job not yet complete has no content: 409.
	id := h.submit(tiny(""))
	if code, _, data := h.do("GET", "/v1/videos/"+id+"/content", ""); code != http.StatusConflict || errorCode(t, data) != "video_not_ready" {
		t.Fatalf("content before completion: %d %s", code, data)
	}
	if code, _, _ := h.do("GET", "/healthz", ""); code != 200 {
		t.Fatal("healthz not green after bad requests")
	}
	v := h.job(id)
	if v.Status != queue.StatusQueued || v.QueuePosition == nil || *v.QueuePosition != 0 || v.Predicted.DeviceBytes <= 0 {
		t.Fatalf("queued job %+v", v)
	}
}

func TestAuth(t *testing.T) {
	h := start(t, Config{NoWorker: true, APIKey: "sekret"})
	if code, _, _ := h.do("GET", "/healthz", ""); code != 200 {
		t.Fatal("healthz needs no key")
	}
	if code, _, data := h.do("GET", "/v1/videos", ""); code != 401 || errorCode(t, data) != "invalid_api_key" {
		t.Fatalf("no key: %d", code)
	}
	if code, _, _ := h.do("GET", "/v1/videos", "", "Authorization", "Bearer wrong"); code != 401 {
		t.Fatalf("wrong key: %d", code)
	}
	if code, _, _ := h.do("GET", "/v1/videos", "", "Authorization", "Bearer sekret"); code != 200 {
		t.Fatalf("right key: %d", code)
	}
}

// Every route answers in shape: metrics, residency, readiness.
func TestStatusRoutes(t *testing.T) {
	h := start(t, Config{KeepAlive: -1, DeviceBytes: 1 << 30, HostBytes: 1 << 30})
	h.wait(h.submit(tiny("")), 60*time.Second, terminal)
	code, _, data := h.do("GET", "/metrics", "")
	for _, want := range []string{"ferry_queue_depth 0", `ferry_jobs_finished_total{status="completed"} 1`, "ferry_job_seconds_count 1", "ferry_peak_ratio_count 1", `ferry_resident_bytes{tier="device"}`, "ferry_evictions_total"} {
		if code != 200 || !strings.Contains(string(data), want) {
			t.Fatalf("metrics lack %q:\n%s", want, data)
		}
	}
	v := h.s.models.snapshot()
	m := v.Models[0]
	if !m.Resident || m.DeviceBytes <= 0 || len(m.Components) != 3 || v.Free.DeviceBytes != 1<<30-m.DeviceBytes {
		t.Fatalf("residency %+v", v)
	}
	if code, _, _ := h.do("GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz %d", code)
	}
}

// A full disk fails the job with disk_full, leaves no file, and /readyz
// is false until space returns.
func TestDiskFull(t *testing.T) {
	h := start(t, Config{KeepAlive: -1, faults: &faults{diskFull: true}})
	id := h.submit(tiny(""))
	v := h.wait(id, 60*time.Second, terminal)
	if v.Status != queue.StatusFailed || v.Error == nil || v.Error.Code != queue.CodeDiskFull {
		t.Fatalf("job %s %+v", v.Status, v.Error)
	}
	if _, err := h.s.q.GetOutput(h.s.ctx, id, "video"); err == nil {
		t.Fatal("a failed job left an output")
	}
	if code, _, _ := h.do("GET", "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d while the disk is full", code)
	}
	h.s.cfg.faults = nil
	if code, _, _ := h.do("GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz %d once space returned", code)
	}
}

// FuzzCreate: any body is a 202 or a 4xx in the error shape, never a 5xx.
func FuzzCreate(f *testing.F) {
	for _, s := range []string{tiny(""), "{}", "[]", "null", `{"prompt":1}`, tiny(`"size":"9x9x9"`), tiny(`"plan":"a: [b"`),
		tiny(`"num_frames":-3`), tiny(`"seconds":1e308`), tiny(`"keep_alive":1e300`), tiny(`"budgets":{"device_mem":"-1"}`),
		tiny(`"guidance_scale":"NaN"`), `{"model":"wan-tiny","prompt":"x","width":4096000,"height":1}`} {
		f.Add(s)
	}
	h := start(f, Config{NoWorker: true})
	f.Fuzz(func(t *testing.T, body string) {
		h.t = t
		code, _, data := h.do("POST", "/v1/videos", body)
		if code == http.StatusAccepted {
			return
		}
		if code < 400 || code >= 500 {
			t.Fatalf("%d %s for %q", code, data, body)
		}
		errorCode(t, data)
	})
}

// TestSecondsAsString: seconds is a number or, as OpenAI's API types it,
// a string holding one.
func TestSecondsAsString(t *testing.T) {
	for _, c := range []struct {
		body string
		want float64
		bad  bool
	}{{`{"seconds":8}`, 8, false}, {`{"seconds":"8"}`, 8, false}, {`{"seconds":" 2.5 "}`, 2.5, false},
		{`{"seconds":"eight"}`, 0, true}, {`{"seconds":true}`, 0, true}} {
		r, err := decodeRequest([]byte(c.body))
		var fe *fieldError
		switch {
		case c.bad && (!errors.As(err, &fe) || fe.param != "seconds"):
			t.Errorf("%s: error %v, want one naming seconds", c.body, err)
		case !c.bad && (err != nil || float64(r.Seconds) != c.want):
			t.Errorf("%s: %v, %v; want %g", c.body, r.Seconds, err, c.want)
		}
	}
}

// FuzzDecodeForm: any multipart body decodes to a request or a field
// error, never a panic.
func FuzzDecodeForm(f *testing.F) {
	f.Add("--B\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\na fox\r\n--B--\r\n")
	f.Add("--B\r\nContent-Disposition: form-data; name=\"input_reference\"; filename=\"a.png\"\r\n\r\n\x89PNG\r\n--B--\r\n")
	f.Add("--B\r\nContent-Disposition: form-data; name=\"outputs\"\r\n\r\nplan\r\n--B\r\nContent-Disposition: form-data; name=\"outputs\"\r\n\r\nchart\r\n--B--\r\n")
	f.Fuzz(func(t *testing.T, body string) {
		_, err := decodeBody("multipart/form-data; boundary=B", []byte(body))
		var fe *fieldError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("error %v is no field error", err)
		}
	})
}
