package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"ferry/dtype"
	"ferry/pipeline/wan"
)

// The prompt cache (--prompt-cache SIZE) keeps the text encoder's output
// for recent prompts: a job whose prompt, negative prompt and text encoder
// match an earlier one's brings those embeddings (wan.Request.PromptEmbeds)
// and the text encoder neither loads nor runs; the planner predicts it so
// (planner.Request.PromptsEncoded). The same prompt with new seeds is the
// common case: on a small machine the UMT5 read from disk is most of a
// short job. Entries count against the host budget beside the resident
// weights and are the first to go when a job needs host room (one text
// encoder pass makes an entry again); least recently used first.

// promptCache is guarded by models.mu.
type promptCache struct {
	max          int64 // bytes; 0: off
	tick         uint64
	byKey        map[string]*encoded
	pinned       *encoded // the running job's entry: never dropped
	hits, misses int64
}

// encoded is one cached pair of embeddings (neg nil without CFG).
type encoded struct {
	pos, neg []float32
	lastUse  uint64
}

func (e *encoded) size() int64 { return 4 * int64(len(e.pos)+len(e.neg)) }

// bytes is what the entries hold.
func (c *promptCache) bytes() int64 {
	var n int64
	for _, e := range c.byKey {
		n += e.size()
	}
	return n
}

// promptKey names what a job's embeddings depend on: the text encoder (a
// shared one's content, else the model's own), the compute dtype, the
// text length, and the cleaned prompt and, with CFG, negative prompt.
func promptKey(m *model, s spec, dt dtype.DType) string {
	enc := "model:" + m.name
	for _, sh := range m.shared {
		if sh.component == wan.TextEncoder {
			enc = "shared:" + sh.id
		}
	}
	r := wanRequest(s)
	neg := "\x00"
	if r.CFG() {
		neg = wan.CleanPrompt(r.NegativePrompt)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%q\x00%q", enc, dt, r.MaxSeqLen, wan.CleanPrompt(r.Prompt), neg)
	return hex.EncodeToString(h.Sum(nil))
}

// get returns key's entry (nil on a miss), marked used now.
func (c *promptCache) get(key string) *encoded {
	e := c.byKey[key]
	if e == nil {
		c.misses++
		return nil
	}
	c.hits++
	c.tick++
	e.lastUse = c.tick
	return e
}

// put keeps a job's embeddings when they fit within the cache's size and
// room more host bytes, dropping the least recently used entries first.
func (c *promptCache) put(key string, pos, neg []float32, room int64) {
	if c.max <= 0 || c.byKey[key] != nil {
		return
	}
	e := &encoded{pos: pos, neg: neg}
	held := c.bytes()
	limit := c.max
	if room >= 0 {
		limit = min(limit, held+room)
	}
	if e.size() > limit {
		return
	}
	held -= c.trim(held + e.size() - limit)
	if held+e.size() > limit {
		return // what is left is pinned
	}
	if c.byKey == nil {
		c.byKey = map[string]*encoded{}
	}
	c.tick++
	e.lastUse = c.tick
	c.byKey[key] = e
}

// trim drops least recently used entries, never the pinned one, until n
// bytes are freed or none is left; it returns the bytes freed.
func (c *promptCache) trim(n int64) int64 {
	var freed int64
	for freed < n {
		lru := ""
		for k, e := range c.byKey {
			if e != c.pinned && (lru == "" || e.lastUse < c.byKey[lru].lastUse) {
				lru = k
			}
		}
		if lru == "" {
			break
		}
		freed += c.byKey[lru].size()
		delete(c.byKey, lru)
	}
	return freed
}

// promptCacheView is GET /v1/residency's prompt_cache.
type promptCacheView struct {
	MaxBytes int64 `json:"max_bytes"`
	Bytes    int64 `json:"bytes"`
	Entries  int   `json:"entries"`
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
}

func (c *promptCache) view() promptCacheView {
	return promptCacheView{MaxBytes: c.max, Bytes: c.bytes(), Entries: len(c.byKey), Hits: c.hits, Misses: c.misses}
}

// lookupPrompts gives sp its prompts' cache key and cached embeddings, if
// any, and pins them for the job (nothing with the cache off). Caller
// holds mu.
func (ms *models) lookupPrompts(m *model, sp *spec) {
	if ms.prompts.max <= 0 {
		return
	}
	sp.promptKey = promptKey(m, *sp, ms.computeDType(sp.DType))
	sp.prompts = ms.prompts.get(sp.promptKey)
	ms.prompts.pinned = sp.prompts
}

// remember keeps a finished job's prompt embeddings (a miss's) in the
// cache, within the host budget beside what is resident.
func (ms *models) remember(sp spec, out *wan.Output) {
	if sp.promptKey == "" || sp.prompts != nil {
		return
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	room := int64(-1)
	if ms.host > 0 {
		_, host := ms.residentBytes(nil)
		room = max(ms.host-host, 0)
	}
	ms.prompts.put(sp.promptKey, out.PromptEmbeds, out.NegativePromptEmbeds, room)
}
