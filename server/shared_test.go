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

// sharedModels is a folder of three wan-tiny, each written with its own
// seed: tiny-b has tiny-a's text encoder (copied) and tiny-c has tiny-a's
// VAE; everything else differs.
func sharedModels(t *testing.T) string {
	t.Helper()
	dir := synthFolder(t, "wan-tiny", "tiny-a", "tiny-b", "tiny-c")
	for _, c := range []struct{ to, comp string }{{"tiny-b", wan.TextEncoder}, {"tiny-c", wan.VAE}} {
		src, dst := filepath.Join(dir, "tiny-a", c.comp), filepath.Join(dir, c.to, c.comp)
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		copyDir(t, src, dst)
	}
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

// sharedLoads is how many blocks the shared component id's runtime
// loaded, and whether it is resident.
func (h *harness) sharedLoads(id string) (loads int, found bool) {
	h.s.models.mu.Lock()
	defer h.s.models.mu.Unlock()
	for _, sh := range h.s.models.shared {
		if sh.id == id && sh.rt != nil {
			return sh.rt.Exec.Stats().Loads, true
		}
	}
	return 0, false
}

// Folders whose text encoders (tiny-a, tiny-b) or VAEs (tiny-a, tiny-c)
// have the same content share them: each is loaded once and held once
// (GET /v1/residency lists it under shared with its models' names, and
// they do not list their own), and each model's video is exactly what the
// pipeline gives on that folder alone.
func TestSharedComponents(t *testing.T) {
	dir := sharedModels(t)
	tap := newVideoTap()
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, faults: &faults{onVideo: tap.put}})
	body := func(m string) string { return strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", m, 1) }

	var snap residencyView
	if code, _, data := h.do("GET", "/v1/residency", ""); code != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("residency: %d %s", code, data)
	}
	members := map[string][]string{wan.TextEncoder: {"tiny-a", "tiny-b"}, wan.VAE: {"tiny-a", "tiny-c"}}
	ids := map[string]string{} // component -> shared id
	for _, sh := range snap.Shared {
		if !slices.Equal(sh.Models, members[sh.Component]) || ids[sh.Component] != "" {
			t.Fatalf("shared components %+v: want one text_encoder for tiny-a and tiny-b, one vae for tiny-a and tiny-c", snap.Shared)
		}
		ids[sh.Component] = sh.ID
	}
	if len(ids) != 2 {
		t.Fatalf("shared components %+v: want a text_encoder and a vae", snap.Shared)
	}

	jobs := map[string]string{}
	loads := map[string]map[string]int{} // after a job on a model: component -> loads
	for _, m := range []string{"tiny-a", "tiny-b", "tiny-c", "tiny-a"} {
		v := h.wait(h.submit(body(m)), 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job on %s: %s %+v", m, v.Status, v.Error)
		}
		jobs[m] = v.ID
		loads[m] = map[string]int{}
		for comp, id := range ids {
			n, ok := h.sharedLoads(id)
			if !ok {
				t.Fatalf("after a job on %s the shared %s is not resident", m, comp)
			}
			loads[m][comp] = n
		}
	}
	for comp, ms := range members {
		first, second := loads[ms[0]][comp], loads[ms[1]][comp]
		if first == 0 || second != first || loads["tiny-a"][comp] != first {
			t.Errorf("%s block loads: %d after %s, %d after %s, %d at the end: want them loaded once", comp, first, ms[0], second, ms[1], loads["tiny-a"][comp])
		}
	}

	if code, _, data := h.do("GET", "/v1/residency", ""); code != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("residency: %d %s", code, data)
	}
	for _, sh := range snap.Shared {
		if !sh.Resident || sh.DeviceBytes+sh.HostBytes == 0 || len(sh.Components) != 1 || sh.Components[0].Name != sh.Component {
			t.Fatalf("shared entry %+v: want the resident %s", sh, sh.Component)
		}
	}
	for _, mv := range snap.Models {
		for comp, ms := range members {
			var own bool
			for _, c := range mv.Components {
				own = own || c.Name == comp
			}
			shared := slices.Contains(mv.Shared, ids[comp])
			if want := slices.Contains(ms, mv.Name); own == want || shared != want {
				t.Errorf("%s: own %s %v, shared %v %v", mv.Name, comp, own, shared, mv.Shared)
			}
		}
	}
	for _, m := range []string{"tiny-a", "tiny-b", "tiny-c"} {
		ref := referenceVideo(t, filepath.Join(dir, m), nil)
		if !slices.Equal(tap.get(t, jobs[m]), ref) {
			t.Errorf("%s: the served video differs from the pipeline's on that folder alone", m)
		}
	}
	for _, m := range []string{"tiny-b", "tiny-c"} {
		if slices.Equal(tap.get(t, jobs["tiny-a"]), tap.get(t, jobs[m])) {
			t.Errorf("tiny-a and %s gave the same video: their transformers differ", m)
		}
	}

	// A shared component stays while a member holds weights, and goes
	// with the last one.
	for _, step := range []struct {
		unload string
		stays  map[string]bool
	}{
		{"tiny-a", map[string]bool{wan.TextEncoder: true, wan.VAE: true}},
		{"tiny-b", map[string]bool{wan.TextEncoder: false, wan.VAE: true}},
		{"tiny-c", map[string]bool{wan.TextEncoder: false, wan.VAE: false}},
	} {
		h.do("POST", "/v1/models/"+step.unload+"/unload", "")
		for comp, want := range step.stays {
			if _, ok := h.sharedLoads(ids[comp]); ok != want {
				t.Errorf("after unloading %s the shared %s resident %v, want %v", step.unload, comp, ok, want)
			}
		}
	}
}

// A job on a model that shares components runs in several runtimes;
// their devices reserve at most the budget together. Under a device
// budget just above the single-runtime prediction, the runtimes' cached
// segments would take the sum past it (14548992 to 16646144 bytes against
// 14680064 before the runtimes shared a cap); now a runtime's cached empty
// segments make room for the next runtime's phase, every job completes,
// and the measured joint peak (the peak of the sum, not the sum of
// peaks) stays within the budget.
func TestSharedComponentsWithinBudget(t *testing.T) {
	dir := sharedModels(t)
	const budget = 14 << 20
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, DeviceBytes: budget, HostBytes: 1 << 30})
	for _, m := range []string{"tiny-a", "tiny-c", "tiny-b", "tiny-a"} {
		v := h.wait(h.submit(strings.Replace(tiny(""), "wan-tiny", m, 1)), 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job on %s: %s %+v", m, v.Status, v.Error)
		}
		if v.Dispatched == nil || v.Dispatched.DeviceBytes > budget {
			t.Fatalf("job on %s: dispatched %+v; the test wants a prediction within the budget", m, v.Dispatched)
		}
		if v.Measured.DeviceBytes > budget {
			t.Errorf("job on %s: device peak %d past the budget %d (dispatched prediction %d)", m, v.Measured.DeviceBytes, budget, v.Dispatched.DeviceBytes)
		}
	}
}

// The content key tells identical components from different ones.
func TestComponentKey(t *testing.T) {
	dir := sharedModels(t)
	key := func(m, comp string) string {
		k, err := componentKey(filepath.Join(dir, m, comp))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, c := range []struct{ comp, same, other string }{{wan.TextEncoder, "tiny-b", "tiny-c"}, {wan.VAE, "tiny-c", "tiny-b"}} {
		a, same, other := key("tiny-a", c.comp), key(c.same, c.comp), key(c.other, c.comp)
		if a != same || a == other {
			t.Fatalf("%s keys: tiny-a %s, %s %s, %s %s: want tiny-a = %s != %s", c.comp, a, c.same, same, c.other, other, c.same, c.other)
		}
	}
	if _, err := componentKey(filepath.Join(dir, "tiny-a", "absent")); err == nil {
		t.Fatal("a missing folder has a key")
	}
}
