package server

import (
	"bytes"
	"encoding/json"
	"ferry/media"
	"net/http"
	"strings"
	"testing"
	"time"

	"ferry/server/queue"
	"ferry/trace"
)

func TestJobLifecycle(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	t0 := time.Now()
	id := h.submit(tiny(`"outputs":["report","plan"]`))
	evs := h.events(id, 0)
	v := h.job(id)
	t.Logf("job took %s", time.Since(t0))
	if v.Status != queue.StatusCompleted || v.Progress != 100 || v.Measured == nil || v.Measured.Seconds <= 0 {
		t.Fatalf("job ended %+v", v)
	}
	if v.Predicted.DeviceBytes <= 0 || v.Attempts != 1 || v.Size != "32x32" {
		t.Fatalf("job fields %+v", v)
	}
	terminals, steps, layers, frames := 0, 0, 0, 0
	last := -1.0
	for i, e := range evs {
		if e.id != i+1 {
			t.Fatalf("event %d has id %d", i, e.id)
		}
		if isTerminal(e.typ) {
			terminals++
		}
		if e.typ == "progress" {
			if e.data.Progress < last {
				t.Fatalf("progress went back: %v after %v", e.data.Progress, last)
			}
			last = e.data.Progress
			switch {
			case e.data.Phase == "denoise" && e.data.Total > 0:
				steps++
			case e.data.Phase == "text" && e.data.Total > 0:
				layers++
			case e.data.Phase == "vae" && e.data.Total > 0:
				frames++
			}
		}
	}
	if terminals != 1 || evs[len(evs)-1].typ != "completed" {
		t.Fatalf("want one terminal event, last: got %d terminals, last %q", terminals, evs[len(evs)-1].typ)
	}
	if steps < 2 || layers < 1 || frames < 1 {
		t.Fatalf("progress events: %d steps, %d text layers, %d VAE frames", steps, layers, frames)
	}
	// Replay from the middle: the rest, ending in the one terminal event.
	mid := len(evs) / 2
	again := h.events(id, mid)
	if len(again) != len(evs)-mid || again[0].id != mid+1 || again[len(again)-1].typ != "completed" {
		t.Fatalf("replay after %d: %d events from %d", mid, len(again), again[0].id)
	}
	// Replay from the terminal event or past it: the stream ends at once.
	for _, after := range []int{len(evs), len(evs) + 5} {
		if again := h.events(id, after); len(again) != 0 {
			t.Fatalf("replay after %d: %d events", after, len(again))
		}
	}
	// mp4 where ffmpeg is installed, else AVI: the type says which.
	wantType, magic := "video/x-msvideo", "AVI "
	if media.CanWriteMP4() {
		wantType, magic = "video/mp4", "ftyp"
	}
	code, hdr, data := h.do("GET", "/v1/videos/"+id+"/content", "")
	if code != 200 || hdr.Get("Content-Type") != wantType || !bytes.Contains(data[:min(len(data), 64)], []byte(magic)) {
		t.Fatalf("content: %d %s, %d bytes (want %s)", code, hdr.Get("Content-Type"), len(data), wantType)
	}
	code, _, data = h.do("GET", "/v1/videos/"+id+"/content?variant=report", "")
	var rep map[string]any
	if code != 200 || json.Unmarshal(data, &rep) != nil || rep["plan"] == nil {
		t.Fatalf("report: %d %.200s", code, data)
	}
	if code, _, _ := h.do("GET", "/v1/videos/"+id+"/content?variant=trace", ""); code != http.StatusNotFound {
		t.Fatalf("a variant not asked for: %d, want 404", code)
	}
	// Listing, then delete.
	code, _, data = h.do("GET", "/v1/videos?limit=1", "")
	var list struct {
		Data    []videoJSON `json:"data"`
		HasMore bool        `json:"has_more"`
	}
	if code != 200 || json.Unmarshal(data, &list) != nil || len(list.Data) != 1 || list.Data[0].ID != id {
		t.Fatalf("list: %d %s", code, data)
	}
	if code, _, _ := h.do("DELETE", "/v1/videos/"+id, ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, _, data := h.do("GET", "/v1/videos/"+id, ""); code != 404 || errorCode(t, data) != "video_not_found" {
		t.Fatalf("after delete: %d %s", code, data)
	}
}

// A model kept resident across jobs gives each job its own trace and
// figures: the second job's trace holds its own two denoising steps, not
// the first job's too, its device counter starts from what stayed
// resident, and it read from disk only the prompt's embedding rows (the
// table stays on disk) where the first read every weight.
func TestTracePerJob(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	var traces []*trace.Chrome
	var reads []int64
	for i := range 2 {
		id := h.submit(tiny(`"outputs":["trace"],"plan":"resident"`))
		v := h.wait(id, 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job %d: %s %+v", i, v.Status, v.Error)
		}
		if v.Measured.Warm != (i == 1) {
			t.Errorf("job %d: warm %v", i, v.Measured.Warm)
		}
		reads = append(reads, v.Measured.DiskBytes)
		code, _, body := h.do("GET", "/v1/videos/"+id+"/content?variant=trace", "")
		if code != http.StatusOK {
			t.Fatalf("job %d trace: %d %s", i, code, body)
		}
		c, err := trace.ReadChrome(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, c)
	}
	if reads[0] < 1<<20 || reads[1] > reads[0]/1000 {
		t.Errorf("the jobs read %d and then %d bytes from disk: want the weights, then only embedding rows", reads[0], reads[1])
	}
	for i, c := range traces {
		steps := 0
		for _, s := range c.Spans {
			if s.Kind == trace.Phase && strings.HasPrefix(s.Name, "denoise step ") {
				steps++
			}
		}
		if steps != 2 {
			t.Errorf("job %d's trace holds %d denoising steps, want its own 2", i, steps)
		}
	}
	var first *trace.Sample
	for i, s := range traces[1].Samples {
		if s.Name == "device allocated" {
			first = &traces[1].Samples[i]
			break
		}
	}
	if first == nil || first.Value == 0 {
		t.Errorf("the second job's trace does not start from the resident weights' device bytes: %+v", first)
	}
}
