package server

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ferry/pipeline/wan"
	"ferry/server/queue"
)

// TestPromptCache: with --prompt-cache, a job repeating an earlier job's
// prompt (a new seed) skips the text encoder: no text phase in its report
// or its events, its device peak exactly the dispatched prediction's on a
// fresh runtime (keep-alive 0: the text encoder's weights, resident under
// the plan, are never loaded), and its video the pipeline's for that seed,
// bit for bit. Another negative
// prompt is another entry; a server without the cache encodes every time.
func TestPromptCache(t *testing.T) {
	tap := newVideoTap()
	h := start(t, Config{PromptCacheBytes: 64 << 20, faults: &faults{onVideo: tap.put}})
	body := func(seed int, neg string) string {
		b := strings.Replace(tiny(`"outputs":["video","report"],"plan":"resident","keep_alive":0,"negative_prompt":"`+neg+`"`), `"guidance_scale":1`, `"guidance_scale":5`, 1)
		return strings.Replace(b, `"seed":7`, fmt.Sprintf(`"seed":%d`, seed), 1)
	}
	run := func(b string) videoJSON {
		t.Helper()
		v := h.wait(h.submit(b), 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("%s: %+v", v.Status, v.Error)
		}
		return v
	}
	cache := func() promptCacheView {
		t.Helper()
		var snap residencyView
		if code, _, data := h.do("GET", "/v1/residency", ""); code != 200 || json.Unmarshal(data, &snap) != nil {
			t.Fatalf("residency: %d %s", code, data)
		}
		return snap.PromptCache
	}
	textSeconds := func(h *harness, v videoJSON) float64 {
		t.Helper()
		code, _, data := h.do("GET", "/v1/videos/"+v.ID+"/content?variant=report", "")
		var rep struct {
			Measured struct {
				TextEncoderS float64 `json:"text_encoder_s"`
			} `json:"measured"`
		}
		if code != 200 || json.Unmarshal(data, &rep) != nil {
			t.Fatalf("report of %s: %d %s", v.ID, code, data)
		}
		return rep.Measured.TextEncoderS
	}

	first := run(body(7, "blurry"))
	c := cache()
	if c.Entries != 1 || c.Misses != 1 || c.Hits != 0 || c.Bytes <= 0 || c.Bytes%(2*512*4) != 0 {
		t.Fatalf("after the first job the cache is %+v: want one entry of two [512, d] float32 embeddings", c)
	}
	if textSeconds(h, first) <= 0 {
		t.Error("the first job's report has no text encoder time")
	}

	again := run(body(8, "blurry"))
	if c := cache(); c.Hits != 1 || c.Entries != 1 {
		t.Errorf("after the same prompt again the cache is %+v: want a hit", c)
	}
	if s := textSeconds(h, again); s != 0 {
		t.Errorf("the repeated prompt's job ran the text encoder (%.3g s)", s)
	}
	for _, e := range h.events(again.ID, 0) {
		if e.data.Phase == string(queue.PhaseText) {
			t.Errorf("the repeated prompt's job sent a text phase event: %+v", e.data)
			break
		}
	}
	h.dispatchedRan(again)
	// Dispatch plans a hit without the text phase, a miss with it.
	for b, hit := range map[string]bool{body(9, "blurry"): true, body(9, "noise"): false} {
		sp, err := mustSpec(t, b)
		if err != nil {
			t.Fatal(err)
		}
		h.s.models.mu.Lock()
		m := h.s.models.byName["wan-tiny"]
		h.s.models.lookupPrompts(m, &sp)
		_, _, req := h.s.models.planInputs(m, sp)
		h.s.models.prompts.pinned = nil
		h.s.models.mu.Unlock()
		if req.PromptsEncoded != hit {
			t.Errorf("planned with prompts encoded %v for a cache hit %v", req.PromptsEncoded, hit)
		}
	}
	want := referenceVideoOf(t, filepath.Join(modelRoot, "wan-tiny"), 5, func(_ *wan.Pipeline, r *wan.Request) {
		r.Seed, r.NegativePrompt = 8, "blurry"
	})
	if !slices.Equal(tap.get(t, again.ID), want) {
		t.Error("the video from cached embeddings differs from the pipeline's, bit for bit")
	}

	run(body(8, "low quality"))
	if c := cache(); c.Entries != 2 || c.Misses != 3 {
		t.Errorf("after another negative prompt the cache is %+v: want a second entry", c)
	}

	off := start(t, Config{KeepAlive: -1})
	for range 2 {
		v := off.wait(off.submit(body(7, "blurry")), 2*time.Minute, terminal)
		if textSeconds(off, v) <= 0 {
			t.Error("without the cache a job skipped the text encoder")
		}
	}
}

// TestPromptCacheRoom: entries are kept least recently used first within
// the cache's size and the room given, the running job's entry (pinned)
// is never dropped, and trim frees what it can.
func TestPromptCacheRoom(t *testing.T) {
	vec := func(n int) []float32 { return make([]float32, n) } // 4n bytes
	has := func(c *promptCache, bytes int64, want ...string) {
		t.Helper()
		var got []string
		for k := range c.byKey {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || c.bytes() != bytes {
			t.Fatalf("cache holds %v in %d bytes: want %v in %d", got, c.bytes(), want, bytes)
		}
	}
	c := &promptCache{max: 100}
	c.put("a", vec(10), vec(5), -1) // 60 bytes
	c.put("b", vec(5), nil, -1)     // 20
	has(c, 80, "a", "b")
	c.get("a")                   // b is now the least recently used
	c.put("c", vec(10), nil, -1) // 40: b goes
	has(c, 100, "a", "c")
	c.pinned = c.byKey["a"]
	c.put("d", vec(15), nil, -1) // 60: c goes, the pinned a stays, and d still does not fit
	has(c, 60, "a")
	c.put("e", vec(1), nil, 0) // no room beside what the cache holds, all of it pinned
	has(c, 60, "a")
	c.pinned = nil
	c.put("e", vec(1), nil, 0) // the room is what a gives up
	has(c, 4, "e")
	c.put("big", vec(26), nil, -1) // 104 bytes: over the cache's size
	has(c, 4, "e")
	c.put("f", vec(5), nil, -1)
	if freed := c.trim(1 << 20); freed != 24 {
		t.Errorf("trim freed %d bytes, want 24", freed)
	}
	has(c, 0)
	off := &promptCache{}
	off.put("a", vec(1), nil, -1)
	if off.get("a") != nil {
		t.Error("a cache of size 0 kept an entry")
	}
	has(off, 0)
}

// TestPromptCacheMakesRoom: a job short of host room drops cached prompts
// before any model's weights, and only as many as the shortfall needs.
func TestPromptCacheMakesRoom(t *testing.T) {
	ms := &models{byName: map[string]*model{}, host: 1000, prompts: promptCache{max: 1000}}
	ms.prompts.put("old", make([]float32, 50), nil, -1) // 200 bytes
	ms.prompts.put("new", make([]float32, 50), nil, -1)
	m := &model{name: "m"}
	for _, c := range []struct {
		need    int64
		entries int
	}{{600, 2}, {700, 1}, {1000, 0}} {
		if err := ms.makeRoom(m, 0, c.need); err != nil {
			t.Fatal(err)
		}
		if len(ms.prompts.byKey) != c.entries {
			t.Errorf("a job needing %d of 1000 host bytes left %d cached prompts, want %d", c.need, len(ms.prompts.byKey), c.entries)
		}
		if c.entries == 1 && ms.prompts.byKey["new"] == nil {
			t.Error("the most recently used prompt was dropped first")
		}
	}
}
