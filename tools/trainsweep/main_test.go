package main

import (
	"path/filepath"
	"slices"
	"testing"

	"ferry/checkpoint"
	"ferry/model/wan"
)

func TestMedianStepSkipsTheFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []float64
		want  float64
	}{
		{"one timed", []float64{9, 2}, 2},
		{"two timed", []float64{9, 2, 4}, 3},
		{"three timed", []float64{9, 5, 1, 3}, 3},
		{"none timed", []float64{9}, 0},
	} {
		var r report
		for _, s := range tc.steps {
			r.Steps = append(r.Steps, struct {
				Seconds float64 `json:"seconds"`
			}{s})
		}
		if got := medianStep(r); got != tc.want {
			t.Errorf("%s: median %g, want %g", tc.name, got, tc.want)
		}
	}
}

func TestRatioFlagsWhatIsOff(t *testing.T) {
	for _, tc := range []struct {
		pred, meas, tol float64
		want            string
	}{
		{104, 100, 0.05, "1.040"},
		{106, 100, 0.05, "1.060 !"},
		{70, 100, 0.25, "0.700 !"},
		{0, 0, 0.05, "1.00"},
		{1, 0, 0.05, "n/a"},
	} {
		if got := ratio(tc.pred, tc.meas, tc.tol); got != tc.want {
			t.Errorf("ratio(%g, %g) = %q, want %q", tc.pred, tc.meas, got, tc.want)
		}
	}
}

// The fixed batch holds what ferry train --fixed-batch reads, in the
// shapes of the sweep's sample size.
func TestWriteBatchShapes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.safetensors")
	cfg := wan.Config{InChannels: 16, TextDim: 64}
	o := options{width: 64, height: 32, frames: 9, textLen: 7}
	if err := writeBatch(path, 3, cfg, o); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string][]int{"latents": {3, 16, 3, 4, 8}, "noise": {3, 16, 3, 4, 8}, "sigmas": {3}, "encoder_hidden_states": {3, 7, 64}}
	for name, shape := range want {
		info, ok := f.Lookup(name)
		if !ok || !slices.Equal(info.Shape, shape) {
			t.Errorf("%s: shape %v (present %v), want %v", name, info.Shape, ok, shape)
		}
	}
	info, _ := f.Lookup("sigmas")
	sig, err := f.ReadF32(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sig {
		if s <= 0 || s >= 1 {
			t.Errorf("sigma %g outside (0, 1)", s)
		}
	}
}

func TestShortInfeasibleKeepsTheBudgets(t *testing.T) {
	msg := "no training plan fits 16.00 GiB device and 64.00 GiB host at batch 1: the smallest that would fit is a device budget of 18.41 GiB (over the placements and knobs left to choose)"
	if got, want := shortInfeasible(msg), "none fits; needs a device budget of 18.41 GiB"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
