package train

import (
	"math"
	"testing"
)

func TestNoise(t *testing.T) {
	x0 := []float32{1, 2, -1, 4}
	eps := []float32{0.5, -0.5, 2, 0}
	sigmas := []float32{0.25, 1}
	xt, target, err := Noise(x0, eps, sigmas, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Sample 0 keeps 3/4 of x0 and takes 1/4 of ε; sample 1 is all noise.
	wantXt := []float32{0.875, 1.375, 2, 0}
	wantTarget := []float32{-0.5, -2.5, 3, -4}
	for i := range x0 {
		if xt[i] != wantXt[i] || target[i] != wantTarget[i] {
			t.Errorf("[%d]: x_t %g target %g, want %g %g", i, xt[i], target[i], wantXt[i], wantTarget[i])
		}
	}
	if _, _, err := Noise(x0, eps, sigmas, 3); err == nil {
		t.Error("mismatched sizes accepted")
	}
}

func TestMSE(t *testing.T) {
	pred := []float32{1, 2, 3, 4}
	target := []float32{0, 2, 5, 4}
	loss, dpred, err := MSE(pred, target)
	if err != nil {
		t.Fatal(err)
	}
	// (1 + 0 + 4 + 0)/4 and 2(p−t)/4.
	if loss != 1.25 {
		t.Errorf("loss %g, want 1.25", loss)
	}
	want := []float32{0.5, 0, -1, 0}
	for i := range want {
		if dpred[i] != want[i] {
			t.Errorf("dpred[%d] = %g, want %g", i, dpred[i], want[i])
		}
	}
	if _, _, err := MSE(pred, target[:3]); err == nil {
		t.Error("mismatched sizes accepted")
	}
}

func TestTimestepOf(t *testing.T) {
	if got := TimestepOf(0.25); got != 250 {
		t.Errorf("TimestepOf(0.25) = %g", got)
	}
}

// TestSigmaSampling checks each distribution against the formula applied
// to the same normal (or uniform) draw, and its range and mean.
func TestSigmaSampling(t *testing.T) {
	tests := []struct {
		ts   Timesteps
		want func(g *RNG) float64
		mean float64
	}{
		{Timesteps{Sampling: Uniform}, func(g *RNG) float64 { return g.Float64() }, 0.5},
		{Timesteps{Sampling: LogitNormal}, func(g *RNG) float64 { return 1 / (1 + math.Exp(-g.Norm())) }, 0.5},
		{Timesteps{Sampling: Shift, FlowShift: 3}, func(g *RNG) float64 {
			s := 1 / (1 + math.Exp(-g.Norm()))
			return 3 * s / (1 + 2*s)
		}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.ts.Sampling.String(), func(t *testing.T) {
			a, b := NewRNG(7), NewRNG(7)
			var sum float64
			const n = 4000
			for range n {
				got, want := tt.ts.Sigma(a), float32(tt.want(b))
				if got != want {
					t.Fatalf("sigma %g, want %g", got, want)
				}
				if got < 0 || got > 1 {
					t.Fatalf("sigma %g outside [0, 1]", got)
				}
				sum += float64(got)
			}
			mean := sum / n
			if tt.mean >= 0 && math.Abs(mean-tt.mean) > 0.02 {
				t.Errorf("mean %g, want about %g", mean, tt.mean)
			}
			if tt.mean < 0 && mean < 0.6 {
				t.Errorf("shift 3 mean %g: want the mass moved towards 1", mean)
			}
		})
	}
}

func TestParseSigmaSampling(t *testing.T) {
	for _, s := range []SigmaSampling{Uniform, LogitNormal, Shift} {
		got, err := ParseSigmaSampling(s.String())
		if err != nil || got != s {
			t.Errorf("%s: got %v, %v", s, got, err)
		}
	}
	if _, err := ParseSigmaSampling("sigma"); err == nil {
		t.Error("unknown sampling accepted")
	}
	if err := (Timesteps{Sampling: Shift}).Check(); err == nil {
		t.Error("shift 0 accepted")
	}
}

func TestRNGStateRoundTrip(t *testing.T) {
	a := NewRNG(3)
	a.Normals(10)
	st, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := a.Normals(5)
	b := NewRNG(99)
	if err := b.UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	got := b.Normals(5)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("restored stream differs at %d: %g vs %g", i, got[i], want[i])
		}
	}
}

func TestKaimingUniformBound(t *testing.T) {
	d := make([]float32, 5000)
	NewRNG(1).KaimingUniform(d, 16)
	lo, hi := float32(0), float32(0)
	for _, v := range d {
		lo, hi = min(lo, v), max(hi, v)
	}
	// PEFT's bound for fan_in 16 is 1/√16 = 0.25; 5000 draws come close.
	if lo < -0.25 || hi > 0.25 || lo > -0.24 || hi < 0.24 {
		t.Errorf("range [%g, %g], want about [-0.25, 0.25]", lo, hi)
	}
}
