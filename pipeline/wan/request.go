package wan

import (
	"fmt"
	"html"
	"strings"
	"unicode"
)

// Request is one text-to-video generation, with WanPipeline's defaults.
type Request struct {
	Prompt         string  `json:"prompt"`
	NegativePrompt string  `json:"negative_prompt"`
	Height         int     `json:"height"`
	Width          int     `json:"width"`
	Frames         int     `json:"frames"`
	Steps          int     `json:"steps"`
	Guidance       float64 `json:"guidance"`
	// FlowShift overrides the scheduler config's flow_shift (0: keep it).
	FlowShift float64 `json:"flow_shift,omitempty"`
	Seed      uint64  `json:"seed"`
	// MaxSeqLen is the text length the encoder sees (WanPipeline: 512).
	MaxSeqLen int `json:"max_sequence_length"`
	// Latents, when set, are the initial noise [1, z, T, H/8, W/8] (read
	// from --latents) instead of noise drawn from Seed.
	Latents []float32 `json:"-"`
	// LatentsFile is where Latents came from, for the report.
	LatentsFile string `json:"latents,omitempty"`
}

// Defaults fills unset fields with WanPipeline's __call__ defaults.
func (r *Request) Defaults() {
	if r.Height == 0 {
		r.Height = 480
	}
	if r.Width == 0 {
		r.Width = 832
	}
	if r.Frames == 0 {
		r.Frames = 81
	}
	if r.Steps == 0 {
		r.Steps = 50
	}
	if r.Guidance < 0 {
		r.Guidance = 5.0
	}
	if r.MaxSeqLen == 0 {
		r.MaxSeqLen = 512
	}
}

// Check validates the request against what the model needs: frames 4k+1,
// height and width multiples of 16. Errors name the nearest valid values.
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
	if r.MaxSeqLen <= 0 {
		return fmt.Errorf("max-sequence-length must be > 0, got %d", r.MaxSeqLen)
	}
	if r.FlowShift < 0 {
		return fmt.Errorf("flow-shift must be > 0, got %g", r.FlowShift)
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

// LatentShape is the shape of the initial noise: [1, z, T, H/8, W/8].
func (r Request) LatentShape(zDim int) []int {
	return []int{1, zDim, (r.Frames-1)/4 + 1, r.Height / 8, r.Width / 8}
}

// CFG says whether classifier-free guidance runs (WanPipeline: scale > 1).
func (r Request) CFG() bool { return r.Guidance > 1 }

// CleanPrompt is WanPipeline's prompt_clean without ftfy (an optional
// dependency there that repairs mojibake): HTML entities unescaped twice,
// runs of whitespace collapsed, ends trimmed.
func CleanPrompt(s string) string {
	s = html.UnescapeString(html.UnescapeString(s))
	return strings.Join(strings.FieldsFunc(s, isPySpace), " ")
}

// isPySpace is Python's str.isspace for one character (what re's \s
// matches in a str pattern): Unicode white space plus the ASCII
// information separators U+001C..U+001F.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}
