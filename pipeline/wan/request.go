package wan

import (
	"fmt"

	"ferry/imageproc"
	"ferry/pytext"
)

// Request is one generation (text-to-video, or image-to-video with
// Image), with WanPipeline's defaults.
type Request struct {
	Prompt         string  `json:"prompt"`
	NegativePrompt string  `json:"negative_prompt"`
	Height         int     `json:"height"`
	Width          int     `json:"width"`
	Frames         int     `json:"frames"`
	Steps          int     `json:"steps"`
	Guidance       float64 `json:"guidance"`
	// Guidance2 is guidance_scale_2, the low-noise expert's scale (Wan 2.2
	// A14B; nil: Guidance, as diffusers does). Guidance alone decides
	// whether CFG runs.
	Guidance2 *float64 `json:"guidance_2,omitempty"`
	// FlowShift overrides the scheduler config's shift (0: keep it):
	// flow_shift for UniPC, shift for FlowMatchEuler.
	FlowShift float64 `json:"flow_shift,omitempty"`
	Seed      uint64  `json:"seed"`
	// Prompts, when set, is a batch of prompts (diffusers' prompt as a
	// list), Prompt unused; NegativePrompts, if set, is one negative
	// prompt for each (else NegativePrompt is every prompt's).
	Prompts         []string `json:"prompts,omitempty"`
	NegativePrompts []string `json:"negative_prompts,omitempty"`
	// NumVideos is diffusers' num_videos_per_prompt: videos of each prompt
	// (0 means 1), all of them generated as one batch, a prompt's videos
	// one after another. The noise is drawn for the whole batch at once,
	// [videos, z, T, h, w], as diffusers draws it, so video i is the one a
	// single request with the i-th slice of that noise as its latents
	// gives; each prompt is encoded once. Each step runs the transformer
	// over the batch, so its weights are read once per step for all the
	// videos, which is what a batch saves when they stream.
	NumVideos int `json:"num_videos_per_prompt,omitempty"`
	// LatentsOut is diffusers' output_type="latent": Generate returns the
	// final latents (Output.Latents) and the VAE does not decode them.
	LatentsOut bool `json:"latents_out,omitempty"`
	// MaxSeqLen is the text length the encoder sees (WanPipeline: 512).
	MaxSeqLen int `json:"max_sequence_length"`
	// Latents, when set, are the initial noise [Videos(), z, T, H/8, W/8]
	// (read from --latents) instead of noise drawn from Seed.
	Latents []float32 `json:"-"`
	// LatentsFile is where Latents came from, for the report.
	LatentsFile string `json:"latents,omitempty"`
	// LoRAs are applied to the transformer while it denoises (read with
	// Pipeline.LoadLoRA): the high-noise expert in a two-expert folder, as
	// diffusers' load_lora_weights loads into transformer.
	LoRAs []LoRA `json:"loras,omitempty"`
	// LoRAs2 are applied to the low-noise expert (transformer_2) of a
	// two-expert folder while it denoises, as load_lora_weights(...,
	// load_into_transformer_2=True) does.
	LoRAs2 []LoRA `json:"loras_2,omitempty"`
	// Image conditions an image-to-video pipeline (imageproc.Load);
	// ImageFile is where it came from, for the report.
	Image     *imageproc.RGB `json:"-"`
	ImageFile string         `json:"image,omitempty"`
	// LastImage is the last frame's image (diffusers' last_image): the
	// video runs from Image to it. Wan 2.1 FLF2V folders need it; Wan 2.2
	// I2V folders (no image encoder) take it.
	LastImage     *imageproc.RGB `json:"-"`
	LastImageFile string         `json:"last_image,omitempty"`
	// Video makes the request video to video (v2v.go): its frames, one
	// per output frame (Frames of them), from VideoFile; Strength is how
	// much of the schedule runs (0 < Strength <= 1, DefaultStrength when
	// unset).
	Video     []*imageproc.RGB `json:"-"`
	VideoFile string           `json:"video,omitempty"`
	Strength  float64          `json:"strength,omitempty"`
	// PromptEmbeds and NegativePromptEmbeds are diffusers' prompt_embeds
	// and negative_prompt_embeds: the text encoder's output for the
	// prompt and the negative prompt, [MaxSeqLen, text dim] zero past the
	// real tokens, as Output returns them. A given one is not encoded
	// again (with both given, or one without CFG, the text encoder does
	// not run).
	PromptEmbeds         []float32 `json:"-"`
	NegativePromptEmbeds []float32 `json:"-"`
}

// Defaults fills unset fields with WanPipeline's __call__ defaults and
// makes the corrections __call__ makes with a logged warning, returning a
// note for each, for the user to see: frames that are not 4k+1 are
// rounded to 4k+1 as diffusers does.
//
// Frames 0 means "not given" (the CLI's --frames default) and becomes
// __call__'s 81; diffusers itself would round an explicit 0 to 1. With a
// video (video to video), frames not given are the video's, down to 4k+1.
func (r *Request) Defaults() (notes []string) {
	if r.Height == 0 {
		r.Height = 480
	}
	if r.Width == 0 {
		r.Width = 832
	}
	if r.Frames == 0 {
		r.Frames = 81
		if n := len(r.Video); n > 0 {
			r.Frames, _ = nearestFrames(n) // the largest 4k+1 the video holds
		}
	}
	if f := roundFrames(r.Frames); f != r.Frames {
		notes = append(notes, fmt.Sprintf("frames %d is not 4k+1 (frames - 1 must be divisible by the VAE's temporal factor 4); using %d, as diffusers does", r.Frames, f))
		r.Frames = f
	}
	notes = append(notes, r.trimVideo()...)
	if r.Steps == 0 {
		r.Steps = 50
	}
	if r.NumVideos == 0 {
		r.NumVideos = 1
	}
	if r.Guidance < 0 {
		r.Guidance = 5.0
	}
	if r.MaxSeqLen == 0 {
		r.MaxSeqLen = 512
	}
	if r.Video != nil && r.Strength == 0 {
		r.Strength = DefaultStrength
	}
	return notes
}

// trimVideo keeps a video-to-video request's first Frames frames: the
// VAE encodes 1 + 4k frames and WanVideoToVideoPipeline's encode leaves
// the rest of a longer video unread, so the frames past the largest 4k+1
// (or past the frames asked for) are dropped, with a note. A video shorter
// than Frames is left for CheckVideo to refuse.
func (r *Request) trimVideo() []string {
	n := len(r.Video)
	if n <= r.Frames {
		return nil
	}
	r.Video = r.Video[:r.Frames]
	return []string{fmt.Sprintf("the video has %d frames; using its first %d, as diffusers' VAE encodes them", n, r.Frames)}
}

// roundFrames is WanPipeline.__call__'s num_frames correction with the
// Wan 2.1 VAE's temporal factor 4: when num_frames % 4 != 1 it becomes
// num_frames // 4 * 4 + 1 (so 10 -> 9 and 8 -> 9), then at least 1. The
// division and remainder are Python's, which floor.
func roundFrames(f int) int {
	const k = 4
	q, m := f/k, f%k
	if m < 0 {
		q, m = q-1, m+k
	}
	if m != 1 {
		f = q*k + 1
	}
	return max(f, 1)
}

// Check validates the request against what the model needs: frames 4k+1
// (which Defaults has made them), height and width multiples of 16.
// Errors name the nearest valid values.
func (r Request) Check() error {
	if r.Height <= 0 || r.Width <= 0 || r.Height%16 != 0 || r.Width%16 != 0 {
		return fmt.Errorf("height and width must be positive multiples of 16, got %dx%d (nearest valid: %dx%d)",
			r.Height, r.Width, nearestMultiple(r.Height, 16), nearestMultiple(r.Width, 16))
	}
	if r.Frames < 1 || (r.Frames-1)%4 != 0 {
		lo, hi := nearestFrames(r.Frames)
		if lo == hi {
			return fmt.Errorf("frames must be 4k+1 (1, 5, 9, ..., 81), got %d (nearest valid: %d)", r.Frames, lo)
		}
		return fmt.Errorf("frames must be 4k+1 (1, 5, 9, ..., 81), got %d (nearest valid: %d or %d)", r.Frames, lo, hi)
	}
	if r.Steps <= 0 {
		return fmt.Errorf("steps must be > 0, got %d", r.Steps)
	}
	if err := r.CheckBatch(); err != nil {
		return err
	}
	if r.MaxSeqLen <= 0 {
		return fmt.Errorf("max-sequence-length must be > 0, got %d", r.MaxSeqLen)
	}
	if r.FlowShift < 0 {
		return fmt.Errorf("flow-shift must be > 0, got %g", r.FlowShift)
	}
	return nil
}

// CheckBatch validates the batch: NumVideos, the videos in all, and the
// negative prompts' and prompt embeddings' fit to the prompts.
func (r Request) CheckBatch() error {
	if r.NumVideos < 0 || r.NumVideos > MaxVideos {
		return fmt.Errorf("num-videos must be 1 to %d, got %d", MaxVideos, r.NumVideos)
	}
	if n := r.Videos(); n > MaxVideos {
		return fmt.Errorf("%d prompts of %d videos each make %d videos; at most %d go in one batch", len(r.Prompts), r.videosPerPrompt(), n, MaxVideos)
	}
	if n := len(r.NegativePrompts); n > 0 && n != len(r.Prompts) {
		return fmt.Errorf("%d negative prompts for %d prompts: give one negative prompt, or one for each prompt", n, len(r.Prompts))
	}
	if len(r.Prompts) > 1 && (r.PromptEmbeds != nil || r.NegativePromptEmbeds != nil) {
		return fmt.Errorf("prompt embeddings go with one prompt, not a batch of %d", len(r.Prompts))
	}
	return nil
}

func nearestMultiple(v, m int) int {
	if v < m {
		return m
	}
	lo := v / m * m
	if v-lo >= lo+m-v {
		return lo + m
	}
	return lo
}

// nearestFrames returns the valid counts around f (equal when f is below 1).
func nearestFrames(f int) (int, int) {
	if f < 1 {
		return 1, 1
	}
	lo := (f-1)/4*4 + 1
	return lo, lo + 4
}

// MaxVideos bounds NumVideos: a batch past it is a queue's work, and the
// planner, which prices a batch's memory, would refuse it anyway.
const MaxVideos = 64

// videosPerPrompt is NumVideos, 1 when unset.
func (r Request) videosPerPrompt() int { return max(r.NumVideos, 1) }

// PromptList is the request's prompts: Prompts, or Prompt alone.
func (r Request) PromptList() []string {
	if len(r.Prompts) > 0 {
		return r.Prompts
	}
	return []string{r.Prompt}
}

// negativeList is each prompt's negative prompt.
func (r Request) negativeList() []string {
	if len(r.NegativePrompts) > 0 {
		return r.NegativePrompts
	}
	neg := make([]string, len(r.PromptList()))
	for i := range neg {
		neg[i] = r.NegativePrompt
	}
	return neg
}

// Videos is how many videos the request makes: NumVideos of each prompt.
func (r Request) Videos() int { return len(r.PromptList()) * r.videosPerPrompt() }

// CFG says whether classifier-free guidance runs (WanPipeline: scale > 1).
func (r Request) CFG() bool { return r.Guidance > 1 }

// guidance2 is the low-noise expert's scale: Guidance2, else Guidance.
func (r Request) guidance2() float64 {
	if r.Guidance2 != nil {
		return *r.Guidance2
	}
	return r.Guidance
}

// CleanPrompt is WanPipeline's prompt_clean: basic_clean (ftfy.fix_text,
// html.unescape twice, str.strip) then whitespace_clean (runs of
// white space, as the regex module's \s sees it, become one space; ends
// stripped). ftfy is 6.3.1's, mojibake repair included (see pytext).
func CleanPrompt(s string) string {
	s = pytext.FixText(s)
	s = pytext.Strip(pytext.HTMLUnescape(pytext.HTMLUnescape(s)))
	return pytext.Strip(pytext.CollapseSpace(s))
}
