package cli

import "testing"

// TestGuidanceFlagScale: any guidance scale <= 1 turns guidance off, as in
// diffusers, so a negative --guidance is kept as 0 rather than read as
// "unset" (which would run guidance at the model's default 5); --strength
// keeps its value for checkStrength to refuse.
func TestGuidanceFlagScale(t *testing.T) {
	for _, c := range []struct {
		in    string
		scale bool
		want  float64
	}{{"-2", true, 0}, {"0.5", true, 0.5}, {"7", true, 7}, {"-2", false, -2}} {
		v := -1.0
		if err := (unsetFloat{v: &v, scale: c.scale}).Set(c.in); err != nil {
			t.Fatal(err)
		}
		if v != c.want {
			t.Errorf("%q (scale %v): %g, want %g", c.in, c.scale, v, c.want)
		}
	}
}
