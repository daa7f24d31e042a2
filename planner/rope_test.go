package planner

import (
	"strings"
	"testing"
)

// TestValidateRopeLimit: a request longer or larger than the transformer's
// position embedding covers (rope_max_seq_len patches along each axis:
// the reference fails past it) is refused before any prediction; the
// limits themselves pass.
func TestValidateRopeLimit(t *testing.T) {
	p := mustBuiltin(t, "wan2.1-t2v-1.3b")
	base := Request{Batch: 1, Frames: 81, Height: 480, Width: 832, TextLen: 512, Steps: 2, Guidance: 5}
	for _, c := range []struct {
		frames, height, width int
		want                  string // "" passes
	}{
		{4093, 64, 64, ""},
		{4097, 64, 64, "at most 4093 frames"},
		{5, 16384, 64, ""},
		{5, 16400, 64, "at most 16384 pixels a side"},
		{5, 64, 16400, "at most 16384 pixels a side"},
	} {
		r := base
		r.Frames, r.Height, r.Width = c.frames, c.height, c.width
		err := r.Validate(p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d frames at %dx%d: %v", c.frames, c.width, c.height, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d frames at %dx%d: error %v, want %q", c.frames, c.width, c.height, err, c.want)
		}
	}
}
