package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ferry/pipeline/wan"
	"ferry/server/queue"
)

// remixBody posts a remix of id and returns the new job, failing the test
// unless it is accepted.
func (h *harness) remix(id, body string) videoJSON {
	h.t.Helper()
	code, _, data := h.do("POST", "/v1/videos/"+id+"/remix", body)
	if code != 202 {
		h.t.Fatalf("remix of %s: %d %s", id, code, data)
	}
	var v videoJSON
	if err := json.Unmarshal(data, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// TestRemix: a remix runs the pipeline's video to video on the source's
// stored video under the new prompt, bit for bit, from the step its
// strength starts at; on a model whose VAE is shared (decoder only) it
// encodes with a VAE of its own, and the model's next text-to-video job,
// and the other model sharing the VAE, run as before.
func TestRemix(t *testing.T) {
	dir := sharedModels(t) // tiny-a and tiny-c share a VAE
	tap := newVideoTap()
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, faults: &faults{onVideo: tap.put}})
	body := func(model string) string { return strings.Replace(tiny(""), "wan-tiny", model, 1) }

	src := h.wait(h.submit(body("tiny-a")), 2*time.Minute, terminal)
	if src.Status != queue.StatusCompleted {
		t.Fatalf("source: %s %+v", src.Status, src.Error)
	}
	v := h.remix(src.ID, `{"prompt":"a blue bird","num_inference_steps":4,"strength":0.5}`)
	if v.RemixedFromVideoID != src.ID || v.Strength != 0.5 || v.Prompt != "a blue bird" || v.Size != "32x32" || v.NumFrames != 5 {
		t.Errorf("remix job %+v: want remixed_from_video_id %s, strength 0.5, the new prompt, the source's size and frames", v, src.ID)
	}
	v = h.wait(v.ID, 2*time.Minute, terminal)
	if v.Status != queue.StatusCompleted {
		t.Fatalf("remix: %s %+v", v.Status, v.Error)
	}

	// The source video as stored, which the remix stored as its input.
	code, _, stored := h.do("GET", "/v1/videos/"+src.ID+"/content", "")
	if code != 200 {
		t.Fatalf("source content: %d", code)
	}
	input, err := h.s.q.GetInput(context.Background(), v.ID, inputVideo)
	if err != nil || !slices.Equal(input, stored) {
		t.Fatalf("the remix's stored input (err %v) is not the source's video", err)
	}
	c, err := decodeClip(stored, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := referenceVideoOf(t, filepath.Join(dir, "tiny-a"), 1, func(p *wan.Pipeline, r *wan.Request) {
		if err := p.SetVideoMode(true); err != nil {
			t.Fatal(err)
		}
		r.Prompt, r.Steps, r.Video, r.Strength = "a blue bird", 4, c.frames, 0.5
	})
	if !slices.Equal(tap.get(t, v.ID), want) {
		t.Error("the remix's video differs from the pipeline's video to video")
	}
	steps := 0
	for _, e := range h.events(v.ID, 0) {
		if e.data.Phase == string(queue.PhaseDenoise) && e.data.Total > 0 {
			steps = e.data.Total
		}
	}
	if steps != 2 {
		t.Errorf("the remix reported %d denoising steps, want 2 (4 steps at strength 0.5)", steps)
	}

	// Text to video again on both models sharing the VAE.
	for _, model := range []string{"tiny-a", "tiny-c", "tiny-a"} {
		j := h.wait(h.submit(body(model)), 2*time.Minute, terminal)
		if j.Status != queue.StatusCompleted {
			t.Fatalf("%s after the remix: %s %+v", model, j.Status, j.Error)
		}
		ref := referenceVideoOf(t, filepath.Join(dir, model), 1, func(*wan.Pipeline, *wan.Request) {})
		if !slices.Equal(tap.get(t, j.ID), ref) {
			t.Errorf("%s after the remix: the video differs from text to video's", model)
		}
	}
	if got := tap.get(t, src.ID); !slices.Equal(got, referenceVideoOf(t, filepath.Join(dir, "tiny-a"), 1, func(*wan.Pipeline, *wan.Request) {})) {
		t.Error("the source video differs from text to video's")
	}
}

// TestRemixPeaksPredicted: on a model that shares nothing, a remix's
// device peak is the dispatched prediction's, exactly (the VAE's encoder
// and the steps the strength runs priced), and so is the next text-to-video
// job's after the runtime switches back.
func TestRemixPeaksPredicted(t *testing.T) {
	h := start(t, Config{KeepAlive: -1})
	src := h.wait(h.submit(tiny("")), 2*time.Minute, terminal)
	if src.Status != queue.StatusCompleted {
		t.Fatalf("source: %s %+v", src.Status, src.Error)
	}
	h.dispatchedRan(src)
	var predicted []float64
	for _, body := range []string{`{"prompt":"a blue bird","num_inference_steps":4,"strength":0.25}`, `{"prompt":"a blue bird","num_inference_steps":4,"strength":1}`} {
		v := h.wait(h.remix(src.ID, body).ID, 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("remix %s: %s %+v", body, v.Status, v.Error)
		}
		h.dispatchedRan(v)
		predicted = append(predicted, v.Predicted.Seconds)
	}
	if !(predicted[0] < predicted[1]) {
		t.Errorf("predicted %g s for 1 step of 4 (strength 0.25), %g s for all 4: the steps that run are not priced", predicted[0], predicted[1])
	}
	after := h.wait(h.submit(tiny("")), 2*time.Minute, terminal)
	h.dispatchedRan(after)
}

// TestRemixRefused: each refusal in OpenAI's error shape, naming the field,
// and nothing queued.
func TestRemixRefused(t *testing.T) {
	dir := imageModels(t)
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1})
	t2v := strings.Replace(tiny(""), "wan-tiny", "t2v", 1)
	src := h.wait(h.submit(t2v), 2*time.Minute, terminal)
	img := base64.StdEncoding.EncodeToString(testPNG(t, 40, 24, 1))
	i2v := h.wait(h.submit(strings.Replace(tiny(`"input_reference":"`+img+`"`), "wan-tiny", "i2v", 1)), 2*time.Minute, terminal)
	if src.Status != queue.StatusCompleted || i2v.Status != queue.StatusCompleted {
		t.Fatalf("sources: %s %+v, %s %+v", src.Status, src.Error, i2v.Status, i2v.Error)
	}
	before := h.count()
	for _, tc := range []struct {
		id, body     string
		code         int
		errCode, arg string
	}{
		{"video_none", `{"prompt":"x"}`, 404, "video_not_found", "id"},
		{src.ID, `{}`, 400, "invalid_value", "prompt"},
		{src.ID, `{"prompt":"  "}`, 400, "invalid_value", "prompt"},
		{src.ID, `{"prompt":"x","strength":0}`, 400, "invalid_value", "strength"},
		{src.ID, `{"prompt":"x","strength":1.5}`, 400, "invalid_value", "strength"},
		{src.ID, `{"prompt":"x","strength":"high"}`, 400, "invalid_value", "strength"},
		// tiny()'s 2 steps at 0.3: int(0.6) runs none.
		{src.ID, `{"prompt":"x","strength":0.3}`, 400, "invalid_value", "strength"},
		{src.ID, `{"prompt":"x","model":"i2v"}`, 400, "invalid_value", "body"},
		{src.ID, `{"prompt":"x","outputs":["gif"]}`, 400, "invalid_value", "outputs"},
		{src.ID, `{"prompt":"x"} {}`, 400, "invalid_value", "body"},
		{i2v.ID, `{"prompt":"x"}`, 400, "invalid_value", "id"},
	} {
		code, _, data := h.do("POST", "/v1/videos/"+tc.id+"/remix", tc.body)
		var e apiError
		json.Unmarshal(data, &e)
		if code != tc.code || e.Error.Code != tc.errCode || e.Error.Param == nil || *e.Error.Param != tc.arg {
			t.Errorf("remix %s %s: %d %s; want %d %s naming %s", tc.id, tc.body, code, data, tc.code, tc.errCode, tc.arg)
		}
	}
	if after := h.count(); after != before {
		t.Errorf("refused remixes changed the jobs: %d, then %d", before, after)
	}
	h.do("DELETE", "/v1/videos/"+src.ID, "")
	if code, _, data := h.do("POST", "/v1/videos/"+src.ID+"/remix", `{"prompt":"x"}`); code != 404 {
		t.Errorf("remix of a deleted video: %d %s; want 404", code, data)
	}
}

// TestRemixNotReady: a video still queued or running is a 409.
func TestRemixNotReady(t *testing.T) {
	// Every block sleeps: the job runs for seconds.
	h := start(t, Config{KeepAlive: -1, faults: &faults{slowBlock: 100 * time.Millisecond}})
	id := h.submit(tiny(""))
	code, _, data := h.do("POST", "/v1/videos/"+id+"/remix", `{"prompt":"x"}`)
	if st := h.job(id).Status; st.Terminal() {
		t.Fatalf("the slowed job ended (%s) before the check", st)
	}
	if code != 409 || errorCode(t, data) != "video_not_ready" {
		t.Errorf("remix of an unfinished video: %d %s; want 409 video_not_ready", code, data)
	}
	h.do("POST", "/v1/videos/"+id+"/cancel", "")
	h.wait(id, 2*time.Minute, terminal)
}

// count is how many jobs the server lists.
func (h *harness) count() int {
	h.t.Helper()
	_, _, data := h.do("GET", "/v1/videos?limit=100", "")
	var l struct{ Data []videoJSON }
	if err := json.Unmarshal(data, &l); err != nil {
		h.t.Fatal(err)
	}
	return len(l.Data)
}

// FuzzRemixSpec: any body gives a field error or a video-to-video spec
// that runs at least one step, never a panic.
func FuzzRemixSpec(f *testing.F) {
	for _, b := range []string{`{"prompt":"x"}`, `{"prompt":"x","strength":0.5,"seed":3}`, `{"prompt":"","strength":-1}`,
		`{"prompt":"x","num_inference_steps":1,"strength":0.9}`, `{"prompt":"x","outputs":["report","video"],"keep_alive":"5m"}`, `[]`, `{"prompt":"x","guidance_scale":1e309}`} {
		f.Add([]byte(b))
	}
	base := spec{Prompt: "a red fox", Model: "wan-tiny", Width: 32, Height: 32, Frames: 5, Steps: 2, Guidance: 1, FPS: 16, Outputs: []string{"video"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		sp, err := remixSpec(body, "video_src", base)
		if err != nil {
			var fe *fieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%q: %v is not a field error", body, err)
			}
			return
		}
		steps := wanRequest(sp).Steps
		switch {
		case strings.TrimSpace(sp.Prompt) == "", sp.RemixOf != "video_src":
			t.Fatalf("%q: spec %+v", body, sp)
		case !(sp.Strength > 0 && sp.Strength <= 1), wan.StepsRun(steps, sp.Strength) < 1:
			t.Fatalf("%q: strength %g runs %d of %d steps", body, sp.Strength, wan.StepsRun(steps, sp.Strength), steps)
		}
	})
}
