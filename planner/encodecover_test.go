package planner

import (
	"strings"
	"testing"

	"ferry/hwprofile"
	"ferry/residency"
)

// TestEncodeTileCoverage: a VAE tile whose stride is no multiple of the
// VAE's scale leaves latents of a tiled image-to-video encode uncovered,
// which model/wanvae refuses after loading: Predict says so first, in an
// error naming the fix; a tile that covers predicts.
func TestEncodeTileCoverage(t *testing.T) {
	p := mustBuiltin(t, "wan2.1-i2v-14b")
	if p.ImageMode == NoImage {
		t.Fatal("the I2V profile encodes no image")
	}
	req := Request{Frames: 5, Height: 128, Width: 192, TextLen: 512, Steps: 1, Guidance: 5}
	plan := residency.Uniform("p", residency.ComponentPlan{Placement: residency.Resident}, TextEncoder, ImageEncoder, Transformer, VAE)
	for _, c := range []struct {
		tile int
		bad  bool
	}{{72, true}, {64, false}, {0, false}} {
		plan.Run.VAETile = c.tile
		_, err := Predict(p, hwprofile.Default(), plan, req, Budgets{})
		if bad := err != nil; bad != c.bad || (bad && !strings.Contains(err.Error(), "multiple of 8 pixels")) {
			t.Errorf("vae_tile %d: err %v, want an error naming the stride: %v", c.tile, err, c.bad)
		}
	}
}
