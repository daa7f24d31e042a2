package planner

import (
	"encoding/json"
	"fmt"
)

// Request is the shape of one generation.
type Request struct {
	// Batch is the number of videos generated together (default 1);
	// batched CFG doubles what the transformer sees.
	Batch int `json:"batch"`
	// Prompts is how many distinct prompts the batch's videos come from
	// (0: Batch, one each): the text encoder encodes each once and its
	// embeddings are repeated for its videos (diffusers'
	// num_videos_per_prompt, pipeline/wan Request.NumVideos).
	Prompts int `json:"prompts,omitempty"`
	Frames  int `json:"frames"`
	Height  int `json:"height"`
	Width   int `json:"width"`
	// TextLen is the context length the transformer attends to (Wan pads
	// the prompt embeddings to 512).
	TextLen int `json:"text_len"`
	// PromptTokens is the longest prompt's real token count: the text
	// encoder runs on that many tokens (pipeline/wan encodes only the real
	// tokens, then zero-pads to TextLen). 0 means TextLen.
	PromptTokens int `json:"prompt_tokens,omitempty"`
	Steps        int `json:"steps"`
	// Guidance > 1 runs classifier-free guidance: a negative prompt is
	// encoded too and every step runs the transformer on both branches.
	Guidance float64 `json:"guidance"`
	// FlowShift overrides the scheduler config's shift (0: keep it): with
	// two experts it moves the step where the low-noise expert takes over.
	FlowShift float64 `json:"flow_shift,omitempty"`
	// AdapterBytes is the LoRA adapters' float32 buffer, on the
	// transformer's device while it denoises (pipeline/wan.LoRABytes) and
	// in Go memory for the whole run.
	AdapterBytes int64 `json:"adapter_bytes,omitempty"`
	// AdapterBytes2 is the same for the low-noise expert of a two-expert
	// folder (pipeline/wan Request.LoRAs2), on its device while it
	// denoises.
	AdapterBytes2 int64 `json:"adapter_bytes_2,omitempty"`
	// LoRA and LoRA2 are those adapters' ranks by module (pipeline/wan
	// LoRARanks): the replay makes each one's intermediates where the
	// model does. Left out of reports (AdapterBytes stands for them).
	LoRA  LoRARanks `json:"-"`
	LoRA2 LoRARanks `json:"-"`
	// Repeated says the runtime is kept for the requests after this one
	// (ferry serve): Search then ranks plans by a warm request's time, the
	// total less what a kept runtime does not load again (Prediction.LoadS),
	// so that weights worth keeping are placed where they stay.
	Repeated bool `json:"repeated,omitempty"`
	// PromptsEncoded says the request brings its prompt embeddings
	// (pipeline/wan Request.PromptEmbeds, a server's prompt cache): the
	// text encoder neither loads nor runs.
	PromptsEncoded bool `json:"prompts_encoded,omitempty"`
	// LatentsOut says the request returns its final latents undecoded
	// (diffusers' output_type="latent"): the VAE neither loads nor runs.
	LatentsOut bool `json:"latents_out,omitempty"`
}

// Budgets cap memory in bytes; 0 is unlimited.
type Budgets struct {
	DeviceBytes int64 `json:"device_bytes"`
	HostBytes   int64 `json:"host_bytes"`
	// RSSBytes caps the predicted process RSS: on the CPU backend device
	// and host budgets come out of the same RAM, so the CLI sets this to
	// the machine's memory and a plan that would be killed for memory is
	// not chosen (0: no cap).
	RSSBytes int64 `json:"rss_bytes,omitempty"`
	// FreeBytes is the memory the kernel had free when the plan was made
	// (0: unknown). Fresh pages past it, and the page cache that reads of
	// uncached checkpoint pages fill, cost the reclaim rate to touch.
	FreeBytes int64 `json:"free_bytes,omitempty"`
	// CacheBytes is the page cache the kernel could evict then (file
	// pages on its LRU lists; 0: none or unknown). What of it the run does
	// not read is evicted before checkpoint pages the run has yet to read.
	CacheBytes int64 `json:"cache_bytes,omitempty"`
	// FragmentedBytes is the free memory the kernel had in blocks smaller
	// than a huge page (cpu.FragmentedFree). Where the hardware profile
	// has devices map 4 KiB pages out of it first, fresh segments it holds
	// cost the fragment rate to touch.
	FragmentedBytes int64 `json:"fragmented_bytes,omitempty"`
}

// DefaultRequest is Wan 2.1's reference request: 81 frames at 480×832,
// 50 steps, guidance 5.
func DefaultRequest() Request {
	return Request{Batch: 1, Frames: 81, Height: 480, Width: 832, TextLen: 512, Steps: 50, Guidance: 5}
}

// normalized fills zero fields with DefaultRequest's.
func (r Request) normalized() Request {
	d := DefaultRequest()
	if r.Batch == 0 {
		r.Batch = d.Batch
	}
	if r.Prompts <= 0 || r.Prompts > r.Batch {
		r.Prompts = r.Batch
	}
	if r.TextLen == 0 {
		r.TextLen = d.TextLen
	}
	if r.PromptTokens <= 0 || r.PromptTokens > r.TextLen {
		r.PromptTokens = r.TextLen
	}
	if r.Steps == 0 {
		r.Steps = d.Steps
	}
	return r
}

// Validate checks the request against the model's strides.
func (r Request) Validate(p *Profile) error {
	if r.Batch <= 0 || r.Frames <= 0 || r.Height <= 0 || r.Width <= 0 || r.TextLen <= 0 || r.Steps <= 0 {
		return fmt.Errorf("planner: request %+v: batch, frames, height, width, text length and steps must be > 0", r)
	}
	s, t := p.Coder.SpatialScale(), p.Coder.TemporalScale()
	ps := p.Wan.PatchSize
	if r.Height%(s*ps[1]) != 0 || r.Width%(s*ps[2]) != 0 {
		return fmt.Errorf("planner: %dx%d: height and width must be multiples of %d", r.Height, r.Width, s*max(ps[1], ps[2]))
	}
	if (r.Frames-1)%t != 0 {
		return fmt.Errorf("planner: %d frames: want 1 + a multiple of %d (e.g. %d)", r.Frames, t, (r.Frames-1)/t*t+1)
	}
	// The transformer's position embedding (model/wan's rule) would fail
	// at its first forward, after loading and encoding the text: refuse
	// the request before anything runs, in frames and pixels.
	_, f, h, w := r.latent(p)
	if _, err := p.Wan.PatchGrid(f, h, w); err != nil {
		m := p.Wan.RopeMaxSeqLen
		return fmt.Errorf("planner: %d frames at %dx%d: %v: at most %d frames and at most %d pixels a side",
			r.Frames, r.Width, r.Height, err, (m*ps[0]-1)*t+1, m*ps[1]*s)
	}
	return nil
}

// cfg reports whether guidance runs two branches.
func (r Request) cfg() bool { return r.Guidance > 1 }

// latent is the latent video's shape [C, F, H, W] for one sample.
func (r Request) latent(p *Profile) (c, f, h, w int) {
	s, t := p.Coder.SpatialScale(), p.Coder.TemporalScale()
	return p.Wan.InChannels, (r.Frames-1)/t + 1, r.Height / s, r.Width / s
}

// tokens is the transformer's sequence length per sample.
func (r Request) tokens(p *Profile) int {
	_, f, h, w := r.latent(p)
	ps := p.Wan.PatchSize
	return (f / ps[0]) * (h / ps[1]) * (w / ps[2])
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
