package server

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ferry/pipeline/wan"
	"ferry/server/queue"
)

// sharedModels is a folder of three wan-tiny: tiny-a and tiny-b with
// different transformers and VAEs but the same text encoder (tiny-a's,
// copied), and tiny-c with its own.
func sharedModels(t *testing.T) string {
	t.Helper()
	dir := synthFolder(t, "wan-tiny", "tiny-a", "tiny-b", "tiny-c")
	src, dst := filepath.Join(dir, "tiny-a", wan.TextEncoder), filepath.Join(dir, "tiny-b", wan.TextEncoder)
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	copyDir(t, src, dst)
	return dir
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
}

// textLoads is how many text-encoder blocks the shared runtime loaded.
func (h *harness) textLoads(id string) (loads int, found bool) {
	h.s.models.mu.Lock()
	defer h.s.models.mu.Unlock()
	for _, sh := range h.s.models.shared {
		if sh.id == id && sh.rt != nil {
			return sh.rt.Exec.Stats().Loads, true
		}
	}
	return 0, false
}

// Two folders with byte-identical text encoders share one: it is loaded
// once, held once (GET /v1/residency lists it under shared with both
// names, and neither model lists its own), and each model's video is
// exactly what the pipeline gives on that folder alone.
func TestSharedTextEncoder(t *testing.T) {
	dir := sharedModels(t)
	tap := newVideoTap()
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, faults: &faults{onVideo: tap.put}})
	body := func(m string) string { return strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", m, 1) }

	var snap residencyView
	if code, _, data := h.do("GET", "/v1/residency", ""); code != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("residency: %d %s", code, data)
	}
	if len(snap.Shared) != 1 || !slices.Equal(snap.Shared[0].Models, []string{"tiny-a", "tiny-b"}) || snap.Shared[0].Component != wan.TextEncoder {
		t.Fatalf("shared components %+v: want one text_encoder for tiny-a and tiny-b", snap.Shared)
	}
	id := snap.Shared[0].ID

	ids := map[string]string{}
	loads := map[string]int{}
	for _, m := range []string{"tiny-a", "tiny-b", "tiny-c", "tiny-a"} {
		v := h.wait(h.submit(body(m)), 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job on %s: %s %+v", m, v.Status, v.Error)
		}
		ids[m] = v.ID
		n, ok := h.textLoads(id)
		if !ok {
			t.Fatalf("after a job on %s the shared encoder is not resident", m)
		}
		loads[m] = n
	}
	if loads["tiny-a"] == 0 || loads["tiny-b"] != loads["tiny-a"] {
		t.Errorf("text-encoder block loads: %d after tiny-a, %d after tiny-b: want them loaded once", loads["tiny-a"], loads["tiny-b"])
	}

	if code, _, data := h.do("GET", "/v1/residency", ""); code != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("residency: %d %s", code, data)
	}
	sh := snap.Shared[0]
	if !sh.Resident || sh.DeviceBytes+sh.HostBytes == 0 || len(sh.Components) != 1 || sh.Components[0].Name != wan.TextEncoder {
		t.Fatalf("shared entry %+v: want the resident text encoder", sh)
	}
	for _, mv := range snap.Models {
		var own bool
		for _, c := range mv.Components {
			own = own || c.Name == wan.TextEncoder
		}
		shared := slices.Contains(mv.Shared, id)
		if want := mv.Name == "tiny-c"; own != want || shared == want {
			t.Errorf("%s: own text encoder %v, shared %v %v", mv.Name, own, shared, mv.Shared)
		}
	}
	for _, m := range []string{"tiny-a", "tiny-b", "tiny-c"} {
		ref := referenceVideo(t, filepath.Join(dir, m), nil)
		if !slices.Equal(tap.get(t, ids[m]), ref) {
			t.Errorf("%s: the served video differs from the pipeline's on that folder alone", m)
		}
	}
	if slices.Equal(tap.get(t, ids["tiny-a"]), tap.get(t, ids["tiny-b"])) {
		t.Error("tiny-a and tiny-b gave the same video: their transformers differ")
	}

	// Unloading one member keeps the encoder for the other; unloading both
	// drops it.
	h.do("POST", "/v1/models/tiny-a/unload", "")
	if _, ok := h.textLoads(id); !ok {
		t.Error("unloading tiny-a dropped the encoder tiny-b still holds")
	}
	h.do("POST", "/v1/models/tiny-b/unload", "")
	if _, ok := h.textLoads(id); ok {
		t.Error("the shared encoder stayed after both of its models were unloaded")
	}
}

// The content key tells identical encoders from different ones.
func TestComponentKey(t *testing.T) {
	dir := sharedModels(t)
	key := func(m string) string {
		k, err := componentKey(filepath.Join(dir, m, wan.TextEncoder))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if key("tiny-a") != key("tiny-b") || key("tiny-a") == key("tiny-c") {
		t.Fatalf("keys a %s b %s c %s: want a = b != c", key("tiny-a"), key("tiny-b"), key("tiny-c"))
	}
	if _, err := componentKey(filepath.Join(dir, "tiny-a", "absent")); err == nil {
		t.Fatal("a missing folder has a key")
	}
}
