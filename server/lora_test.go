package server

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry/checkpoint"
	"ferry/hwprofile"
	"ferry/lora/loratest"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/server/queue"
)

// writeLoRA writes a rank-2 LoRA with random A and B (picked by seed) on
// every default target of the model's transformer.
func writeLoRA(t *testing.T, model, path string, seed uint64) {
	t.Helper()
	loratest.Write(t, path, loratest.Adapters(t, model, seed))
}

// videoTap collects every completed job's frames.
type videoTap struct {
	mu     sync.Mutex
	videos map[string][]float32
}

func newVideoTap() *videoTap { return &videoTap{videos: map[string][]float32{}} }

func (v *videoTap) put(id string, video []float32) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.videos[id] = slices.Clone(video)
}

func (v *videoTap) get(t *testing.T, id string) []float32 {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	out, ok := v.videos[id]
	if !ok {
		t.Fatalf("no video seen for %s", id)
	}
	return out
}

// referenceVideo runs the pipeline as `ferry generate --lora` does (a
// fresh runtime, every weight resident) on tiny()'s request.
func referenceVideo(t *testing.T, model string, loras map[string]float64) []float32 {
	t.Helper()
	return referenceVideoOf(t, model, 1, func(p *wan.Pipeline, r *wan.Request) {
		for file, scale := range loras {
			r.LoRAs = append(r.LoRAs, readLoRA(t, p, file, scale))
		}
	})
}

// referenceVideoOf is referenceVideo for tiny()'s request at guidance g,
// edited by edit (LoRAs, the low-noise expert's fields).
func referenceVideoOf(t *testing.T, model string, g float64, edit func(p *wan.Pipeline, r *wan.Request)) []float32 {
	t.Helper()
	f, err := checkpoint.OpenFolder(model)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := wan.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	r := wan.Request{Prompt: "a red fox", Height: 32, Width: 32, Frames: 5, Steps: 2, Guidance: g, Seed: 7}
	r.Defaults()
	edit(p, &r)
	// The dtype a request naming none gets: the server's hardware profile
	// decides it, as it does for the server (models.computeDType).
	hw, _, err := hwprofile.LoadOrDefault("")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := pipeline.NewRuntime(pipeline.Budget{}, nil, pipeline.Options{ComputeDType: pipeline.ComputeDTypeFor(hw.BF16Slower())})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := p.Register(rt.Exec); err != nil {
		t.Fatal(err)
	}
	out, err := p.Generate(rt, r, false)
	if err != nil {
		t.Fatal(err)
	}
	return out.Video
}

func readLoRA(t *testing.T, p *wan.Pipeline, file string, scale float64) wan.LoRA {
	t.Helper()
	l, err := p.LoadLoRA(file, scale)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// LoRA requests on one resident model: each job's adapters apply to that
// job only (a later job without, or with another LoRA, is not affected),
// the base weights stay resident, and a job with a LoRA gives exactly the
// video the pipeline gives `ferry generate --lora` on the same seed.
func TestLoRARequests(t *testing.T) {
	tinyDir := filepath.Join(modelRoot, "wan-tiny")
	loras := t.TempDir()
	writeLoRA(t, tinyDir, filepath.Join(loras, "fox.safetensors"), 1)
	writeLoRA(t, tinyDir, filepath.Join(loras, "birds", "owl.safetensors"), 2)
	tap := newVideoTap()
	h := start(t, Config{KeepAlive: -1, LoRADirs: []string{loras}, faults: &faults{onVideo: tap.put}})

	bodies := []string{
		tiny(""),
		tiny(`"lora":"fox.safetensors:0.5"`),
		tiny(`"lora":[{"path":"birds/owl.safetensors","scale":1}]`),
		tiny(`"lora":"fox.safetensors:0.5"`),
		tiny(""),
	}
	var ids []string
	for _, b := range bodies {
		ids = append(ids, h.submit(b))
	}
	for i, id := range ids {
		v := h.wait(id, 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job %d: %s %+v", i, v.Status, v.Error)
		}
		if i == 1 && (len(v.LoRA) != 1 || v.LoRA[0] != (loraRef{Path: "fox.safetensors", Scale: 0.5})) {
			t.Errorf("job %d shows lora %+v, want fox.safetensors at 0.5", i, v.LoRA)
		}
		if i > 0 && !v.Measured.Warm {
			t.Errorf("job %d reloaded the base weights (not warm): a LoRA must not replace them", i)
		}
	}
	base, fox, owl, fox2, base2 := tap.get(t, ids[0]), tap.get(t, ids[1]), tap.get(t, ids[2]), tap.get(t, ids[3]), tap.get(t, ids[4])
	if slices.Equal(base, fox) || slices.Equal(fox, owl) || slices.Equal(base, owl) {
		t.Fatal("a LoRA left the video unchanged, or two LoRAs gave the same video")
	}
	if !slices.Equal(fox, fox2) {
		t.Error("the same LoRA gave another video after a job with a different one: adapter state leaked")
	}
	if !slices.Equal(base, base2) {
		t.Error("a job without a LoRA after LoRA jobs differs from the first: adapters stayed on the transformer")
	}
	if ref := referenceVideo(t, tinyDir, map[string]float64{filepath.Join(loras, "fox.safetensors"): 0.5}); !slices.Equal(fox, ref) {
		t.Error("the served LoRA video differs from the pipeline's (ferry generate --lora) on the same seed")
	}
	if ref := referenceVideo(t, tinyDir, nil); !slices.Equal(base, ref) {
		t.Error("the served video without LoRA differs from the pipeline's")
	}
}

// LoRA names are confined to the server's LoRA folders: "..", absolute
// paths elsewhere, links leading out and missing files are 400s in the
// error shape, and nothing is queued.
func TestLoRAPathsConfined(t *testing.T) {
	tinyDir := filepath.Join(modelRoot, "wan-tiny")
	loras, outside := t.TempDir(), t.TempDir()
	inside := filepath.Join(loras, "fox.safetensors")
	writeLoRA(t, tinyDir, inside, 1)
	out := filepath.Join(outside, "secret.safetensors")
	writeLoRA(t, tinyDir, out, 2)
	if err := os.Symlink(out, filepath.Join(loras, "link.safetensors")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(loras, "junk.safetensors"), []byte("not a lora"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, Config{LoRADirs: []string{loras}})
	bad := []string{
		`"lora":"../` + filepath.Base(outside) + `/secret.safetensors"`,
		`"lora":"birds/../../secret.safetensors"`,
		`"lora":"` + out + `"`,
		`"lora":"/etc/passwd"`,
		`"lora":"link.safetensors"`,
		`"lora":"missing.safetensors"`,
		`"lora":"junk.safetensors"`,
		`"lora":""`,
		`"lora":42`,
		`"lora":{"path":"fox.safetensors","scale":"x"}`,
		`"lora":{"file":"fox.safetensors"}`,
		`"lora":"fox.safetensors:NaN"`,
	}
	for _, b := range bad {
		code, _, data := h.do("POST", "/v1/videos", tiny(b))
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", b, code, data)
			continue
		}
		errorCode(t, data)
		// The client's own words come back; the server's folders do not.
		if (strings.Contains(string(data), outside) && !strings.Contains(b, outside)) || strings.Contains(string(data), loras) {
			t.Errorf("%s: the error names a server path: %s", b, data)
		}
	}
	// An absolute path inside the folder is the same file as its name.
	for _, b := range []string{`"lora":"` + inside + `"`, `"lora":"fox.safetensors"`} {
		if code, _, data := h.do("POST", "/v1/videos", tiny(b)); code != http.StatusAccepted {
			t.Errorf("%s: %d %s, want 202", b, code, data)
		}
	}
	// Without LoRA folders, no name resolves.
	h2 := start(t, Config{})
	if code, _, data := h2.do("POST", "/v1/videos", tiny(`"lora":"fox.safetensors"`)); code != http.StatusBadRequest {
		t.Errorf("no --loras: %d %s, want 400", code, data)
	}
}

// A models folder's loras/ (or lora/) folder is a LoRA root too.
func TestLoRARootsOfModels(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "loras"), 0o755); err != nil {
		t.Fatal(err)
	}
	extra := t.TempDir()
	roots := loraRoots([]string{extra, filepath.Join(dir, "absent")}, []string{dir})
	if len(roots) != 2 || !strings.HasSuffix(roots[1], "loras") {
		t.Fatalf("roots %v: want the --loras folder and the models folder's loras/", roots)
	}
}

// A Wan 2.2 A14B model's low-noise expert takes its own fields, as
// `ferry generate --lora-2 --guidance-2` does: lora_2 and guidance_scale_2
// change the video to exactly the pipeline's, and a model with one
// transformer refuses them with a 400 naming the field.
func TestExpertFields(t *testing.T) {
	models, loras := synthFolder(t, "wan-tiny-moe", "wan-tiny-moe"), t.TempDir()
	moeDir := filepath.Join(models, "wan-tiny-moe")
	low := filepath.Join(loras, "low.safetensors")
	writeLoRA(t, moeDir, low, 5)
	tap := newVideoTap()
	h := start(t, Config{KeepAlive: -1, Models: []string{models, filepath.Join(modelRoot, "wan-tiny")}, LoRADirs: []string{loras}, faults: &faults{onVideo: tap.put}})

	moe := func(extra string) string {
		return strings.Replace(tiny(extra), `"model":"wan-tiny","prompt":"a red fox","size":"32x32","num_frames":5,"num_inference_steps":2,"guidance_scale":1`,
			`"model":"wan-tiny-moe","prompt":"a red fox","size":"32x32","num_frames":5,"num_inference_steps":2,"guidance_scale":2`, 1)
	}
	for _, c := range []struct{ body, field string }{
		{tiny(`"lora_2":"low.safetensors"`), "lora_2"},
		{tiny(`"guidance_scale_2":3`), "guidance_scale_2"},
		{moe(`"guidance_scale_2":-1`), "guidance_scale_2"},
		{moe(`"lora_2":"missing.safetensors"`), "lora_2"},
	} {
		code, _, body := h.do("POST", "/v1/videos", c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, code, body, c.field)
		}
	}

	plain, both := h.submit(moe("")), h.submit(moe(`"lora_2":"low.safetensors:0.5","guidance_scale_2":3`))
	for _, id := range []string{plain, both} {
		if v := h.wait(id, 2*time.Minute, terminal); v.Status != queue.StatusCompleted {
			t.Fatalf("%s: %s %+v", id, v.Status, v.Error)
		}
	}
	if v := h.job(both); len(v.LoRA2) != 1 || v.LoRA2[0] != (loraRef{Path: "low.safetensors", Scale: 0.5}) {
		t.Errorf("the job shows lora_2 %+v, want low.safetensors at 0.5", v.LoRA2)
	}
	if slices.Equal(tap.get(t, plain), tap.get(t, both)) {
		t.Fatal("lora_2 and guidance_scale_2 left the video unchanged")
	}
	g2 := 3.0
	ref := referenceVideoOf(t, moeDir, 2, func(p *wan.Pipeline, r *wan.Request) {
		r.LoRAs2 = append(r.LoRAs2, readLoRA(t, p, low, 0.5))
		r.Guidance2 = &g2
	})
	if !slices.Equal(tap.get(t, both), ref) {
		t.Error("the served video differs from the pipeline's (ferry generate --lora-2 --guidance-2) on the same seed")
	}
}
