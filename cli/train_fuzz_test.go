package cli

import (
	"errors"
	"testing"
)

// FuzzParseBetas: --betas either parses to two numbers or is a one-line
// user error.
func FuzzParseBetas(f *testing.F) {
	for _, s := range []string{"0.9,0.999", "0.9", "a,b", "1e-1, 2", ",", "0.9,0.99,0.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _, err := parseBetas(s)
		var u *UserError
		if err != nil && !errors.As(err, &u) {
			t.Fatalf("%q: error %v is not a user error", s, err)
		}
	})
}
