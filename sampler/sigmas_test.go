package sampler

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestBetaQuantile checks the inverse incomplete beta against closed forms
// (Beta(1/2, 1/2) is the arcsine law, sin²(πp/2); Beta(1, 1) is uniform;
// Beta(2, 1) has the CDF x²) and, for diffusers' Beta(0.6, 0.6), against the
// forward function and the distribution's symmetry.
func TestBetaQuantile(t *testing.T) {
	forms := []struct {
		a, b float64
		ppf  func(p float64) float64
	}{
		{0.5, 0.5, func(p float64) float64 { s := math.Sin(math.Pi * p / 2); return s * s }},
		{1, 1, func(p float64) float64 { return p }},
		{2, 1, math.Sqrt},
		{1, 2, func(p float64) float64 { return 1 - math.Sqrt(1-p) }},
	}
	for _, f := range forms {
		for _, p := range []float64{0, 1e-9, 0.01, 0.1, 0.25, 1.0 / 3, 0.5, 0.7, 0.9, 0.999, 1} {
			got, want := betaQuantile(p, f.a, f.b), f.ppf(p)
			if math.Abs(got-want) > 1e-14 {
				t.Errorf("Beta(%g, %g) ppf(%g) = %.17g, want %.17g", f.a, f.b, p, got, want)
			}
		}
	}
	for i := 1; i < 200; i++ {
		p := float64(i) / 200
		x := betaQuantile(p, betaAlpha, betaBeta)
		if back := regIncBeta(x, betaAlpha, betaBeta); math.Abs(back-p) > 1e-14 {
			t.Errorf("I(ppf(%g)) = %.17g", p, back)
		}
		if y := betaQuantile(1-p, betaAlpha, betaBeta); math.Abs(x+y-1) > 1e-14 {
			t.Errorf("ppf(%g) + ppf(1 - %g) = %.17g, want 1 (symmetry)", p, p, x+y)
		}
	}
	if !math.IsNaN(betaQuantile(1.5, 1, 1)) || !math.IsNaN(betaQuantile(math.NaN(), 1, 1)) {
		t.Error("probability outside [0, 1] gives a number")
	}
}

// TestReshapedSigmas checks each reshaping on Wan's shift: the shifted
// schedule's ends are kept, and the steps between are spaced as the
// reshaping says in the shifted sigmas themselves (diffusers 0.40.0 shifts
// first, then reshapes; reshaping first would space them before the shift).
func TestReshapedSigmas(t *testing.T) {
	const n = 9
	plain := eulerFrom(t, "")
	if err := plain.SetTimesteps(n); err != nil {
		t.Fatal(err)
	}
	ref := plain.Sigmas()
	hi, lo := float64(ref[0]), float64(ref[n-1])
	spacing := map[string]func(i int) float64{
		"karras": func(i int) float64 {
			r := float64(i) / (n - 1)
			a, b := math.Pow(hi, 1/karrasRho), math.Pow(lo, 1/karrasRho)
			return math.Pow(a+r*(b-a), karrasRho)
		},
		"exponential": func(i int) float64 {
			return math.Exp(math.Log(hi) + float64(i)/(n-1)*(math.Log(lo)-math.Log(hi)))
		},
		"beta": func(i int) float64 {
			return lo + betaQuantile(1-float64(i)/(n-1), betaAlpha, betaBeta)*(hi-lo)
		},
	}
	for kind, want := range spacing {
		t.Run(kind, func(t *testing.T) {
			s := eulerFrom(t, fmt.Sprintf(`, "use_%s_sigmas": true`, kind))
			if err := s.SetTimesteps(n); err != nil {
				t.Fatal(err)
			}
			sig, ts := s.Sigmas(), s.Timesteps()
			if len(sig) != n+1 || sig[n] != 0 {
				t.Fatalf("sigmas %v: want %d and a final 0", sig, n+1)
			}
			if sig[0] != ref[0] || sig[n-1] != ref[n-1] {
				t.Errorf("ends %v, %v; the shifted schedule's are %v, %v", sig[0], sig[n-1], ref[0], ref[n-1])
			}
			for i := 0; i < n; i++ {
				if d := math.Abs(float64(sig[i]) - want(i)); d > 1e-7 {
					t.Errorf("sigma %d = %v, want %v", i, sig[i], want(i))
				}
				if ts[i] != sig[i]*1000 {
					t.Errorf("timestep %d = %v, want sigma*1000 = %v", i, ts[i], sig[i]*1000)
				}
				if i > 0 && !(sig[i] < sig[i-1]) {
					t.Errorf("sigmas not decreasing at %d: %v", i, sig)
				}
			}
		})
	}
}

// TestReshapedSigmasConfigEnds: a config carrying sigma_min and sigma_max
// (hidden keys diffusers keeps) respaces between them instead of the
// shifted schedule's ends.
func TestReshapedSigmasConfigEnds(t *testing.T) {
	for _, kind := range []string{"karras", "exponential", "beta"} {
		s := eulerFrom(t, fmt.Sprintf(`, "use_%s_sigmas": true, "sigma_min": 0.05, "sigma_max": 0.9`, kind))
		if err := s.SetTimesteps(7); err != nil {
			t.Fatal(err)
		}
		if sig := s.Sigmas(); sig[0] != 0.9 || sig[6] != 0.05 {
			t.Errorf("%s: sigmas %v, want 0.9 first and 0.05 last", kind, sig)
		}
	}
	if _, err := FromConfig([]byte(`{"_class_name": "FlowMatchEulerDiscreteScheduler", "use_karras_sigmas": true, "sigma_max": -1}`)); err == nil || !strings.Contains(err.Error(), "sigma_max") {
		t.Errorf("negative sigma_max: %v", err)
	}
}

// TestExponentialNeedsPositiveSigmas: diffusers takes math.log of the last
// custom sigma and fails on 0; so does this package, with one line.
func TestExponentialNeedsPositiveSigmas(t *testing.T) {
	s := eulerFrom(t, `, "use_exponential_sigmas": true`)
	err := s.SetTimestepsWith(0, ScheduleOptions{Sigmas: []float64{1, 0.5, 0}})
	if err == nil {
		t.Fatal("accepted a last sigma of 0")
	}
}

// TestStochasticStep: on a straight flow the predicted x0 is exact, so a
// stochastic step lands at (1 - sigma_next) * x0 + sigma_next * noise.
func TestStochasticStep(t *testing.T) {
	s := eulerFrom(t, `, "stochastic_sampling": true`)
	if err := s.SetTimesteps(4); err != nil {
		t.Fatal(err)
	}
	l := newLine(64, 3)
	sig := s.Sigmas()
	x := l.at(sig[0])
	if err := s.Step(l.velocity(), x); err == nil {
		t.Fatal("stepped without noise")
	}
	fresh := newLine(64, 4).n
	s.(*FlowMatchEuler).SetNoise(func(dst []float32) { copy(dst, fresh) })
	for i := 0; i < 4; i++ {
		if err := s.Step(l.velocity(), x); err != nil {
			t.Fatal(err)
		}
		want := line{l.a, fresh}.at(sig[i+1])
		if d, j := maxAbsDiff(x, want); d > 1e-5 {
			t.Fatalf("step %d: element %d off by %g", i, j, d)
		}
		l = line{l.a, fresh}
	}
}

func eulerFrom(t *testing.T, extra string) Scheduler {
	t.Helper()
	s, err := FromConfig([]byte(`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0` + extra + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestQuantileSorted(t *testing.T) {
	tests := []struct {
		xs   []float32
		q    float32
		want float32
	}{
		{[]float32{0, 1, 2, 3}, 0.5, 1.5},
		{[]float32{0.5, 1, 2, 3, 4}, 0.5, 2},
		{[]float32{0, 10}, 0.25, 2.5},
		{[]float32{0, 10}, 0.75, 7.5},
		{[]float32{7}, 0.995, 7},
		{[]float32{1, 2, 3}, 1, 3},
		{[]float32{1, 2, 3}, 0, 1},
	}
	for _, tt := range tests {
		if got := quantileSorted(tt.xs, tt.q); got != tt.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", tt.xs, tt.q, got, tt.want)
		}
	}
}

// TestThresholding: dynamic thresholding divides x0 by its clamped
// quantile, and changes nothing where every |x0| is within 1 (s is clamped
// up to 1 there).
func TestThresholding(t *testing.T) {
	u := thresholdingUniPC(t, 0.5, 2)
	u.sorted = make([]float32, 5)
	x0 := []float32{-3, -1, 0.5, 2, 4}
	u.threshold(x0) // |x0| sorted 0.5 1 2 3 4: median 2
	if want := []float32{-1, -0.5, 0.25, 1, 1}; fmt.Sprint(x0) != fmt.Sprint(want) {
		t.Errorf("thresholded %v, want %v", x0, want)
	}

	// Wan's defaults otherwise (ratio 0.995, max 1): a clamp to [-1, 1].
	// On a line whose x0 stays within 1 the schedule is untouched.
	l := newLine(32, 5)
	for i := range l.a {
		l.a[i] = float32(math.Tanh(float64(l.a[i]))) * 0.9
	}
	on, off := thresholdingUniPC(t, 0.995, 1), thresholdingUniPC(t, 0.995, 1)
	off.cfg.Thresholding = false
	var outs [2][]float32
	for k, s := range []*UniPC{on, off} {
		if err := s.SetTimesteps(6); err != nil {
			t.Fatal(err)
		}
		x := l.at(s.Sigmas()[0])
		for i := 0; i < 6; i++ {
			if err := s.Step(l.velocity(), x); err != nil {
				t.Fatal(err)
			}
		}
		outs[k] = x
	}
	if d, _ := maxAbsDiff(outs[0], outs[1]); d != 0 {
		t.Errorf("thresholding changed a sample whose x0 is within 1 by %g", d)
	}
	// x0 beyond 1 is pulled in.
	big := newLine(32, 6)
	for i := range big.a {
		big.a[i] = 3
	}
	if err := on.SetTimesteps(2); err != nil {
		t.Fatal(err)
	}
	x := big.at(on.Sigmas()[0])
	if err := on.Step(big.velocity(), x); err != nil {
		t.Fatal(err)
	}
	if want := big.at(on.Sigmas()[1]); maxAbs(x) >= maxAbs(want) {
		t.Errorf("x0 = 3 not thresholded: sample max %v, unthresholded %v", maxAbs(x), maxAbs(want))
	}
}

func thresholdingUniPC(t *testing.T, ratio, maxValue float64) *UniPC {
	t.Helper()
	s, err := FromConfig([]byte(wanJSON(fmt.Sprintf(`"thresholding": true, "dynamic_thresholding_ratio": %v, "sample_max_value": %v`, ratio, maxValue))))
	if err != nil {
		t.Fatal(err)
	}
	return s.(*UniPC)
}

func maxAbs(xs []float32) float64 {
	m := 0.0
	for _, v := range xs {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}
