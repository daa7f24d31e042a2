package sampler

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// vpConfig is the config of diffusers' own UniPC tests
// (tests/schedulers/test_scheduler_unipc.py): the constructor's defaults
// (epsilon, linear betas, VP sigmas) with final_sigmas_type sigma_min,
// changed by the keys of extra.
func vpConfig(t *testing.T, extra string) UniPCConfig {
	t.Helper()
	c, err := ParseUniPCConfig([]byte(`{"final_sigmas_type": "sigma_min"` + extra + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// deterministic is the tests' dummy_sample_deter / dummy_noise_deter: the
// values 0..n-1 over n as float32, ascending or descending. The schedulers
// work element-wise, so the tensor layout does not matter, only which
// sample value meets which noise value.
func deterministic(n int, descending bool) []float32 {
	out := make([]float32, n)
	for i := range out {
		v := i
		if descending {
			v = n - 1 - i
		}
		out[i] = float32(float64(v) / float64(n))
	}
	return out
}

// fullLoop is the tests' full_loop: 10 steps from the given step on the
// dummy model sample * t / (t + 1), optionally noising the sample to that
// step first with add_noise.
func fullLoop(t *testing.T, cfg UniPCConfig, sample, noise []float32, start int) []float32 {
	t.Helper()
	u, err := NewUniPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.SetTimesteps(10); err != nil {
		t.Fatal(err)
	}
	x := slices.Clone(sample)
	if noise != nil {
		if err := u.SetBeginIndex(start); err != nil {
			t.Fatal(err)
		}
		alpha, sigma := u.NoiseScales(start)
		for i := range x {
			x[i] = float32(alpha*x[i]) + float32(sigma*noise[i])
		}
	}
	ts := u.Timesteps()
	out := make([]float32, len(x))
	for i := start; i < len(ts); i++ {
		for j, v := range x {
			out[j] = float32(v*ts[i]) / (ts[i] + 1)
		}
		if err := u.Step(out, x); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return x
}

func sumAbs(xs []float32) float64 {
	s := 0.0
	for _, v := range xs {
		s += math.Abs(float64(v))
	}
	return s
}

// TestUniPCDiffusersLoops reproduces the full-loop results diffusers'
// UniPC tests assert for the VP schedule (epsilon and v-prediction,
// Karras sigmas, add_noise), on their 4x3x8x8 and 4x3x8 samples.
func TestUniPCDiffusersLoops(t *testing.T) {
	tests := []struct {
		name    string
		elems   int
		extra   string
		noised  bool
		mean    float64
		sum     float64 // checked when not 0, within 1e-2
		meanTol float64
	}{
		{"no noise", 768, ``, false, 0.2464, 0, 1e-3},
		{"karras", 768, `, "use_karras_sigmas": true`, false, 0.2925, 0, 1e-3},
		{"v prediction", 768, `, "prediction_type": "v_prediction"`, false, 0.1014, 0, 1e-3},
		{"karras v prediction", 768, `, "prediction_type": "v_prediction", "use_karras_sigmas": true`, false, 0.1966, 0, 1e-3},
		{"with noise", 768, ``, true, 0.4109, 315.5757, 1e-3},
		{"1d no noise", 96, ``, false, 0.2441, 0, 1e-3},
		{"1d karras", 96, `, "use_karras_sigmas": true`, false, 0.2898, 0, 1e-3},
		{"1d v prediction", 96, `, "prediction_type": "v_prediction"`, false, 0.1014, 0, 1e-3},
		{"1d karras v prediction", 96, `, "prediction_type": "v_prediction", "use_karras_sigmas": true`, false, 0.1944, 0, 1e-3},
		{"1d with noise", 96, ``, true, 0.4072, 39.0870, 1e-3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := vpConfig(t, tt.extra)
			var noise []float32
			start := 0
			if tt.noised {
				noise, start = deterministic(tt.elems, true), 8
			}
			x := fullLoop(t, cfg, deterministic(tt.elems, false), noise, start)
			sum := sumAbs(x)
			if mean := sum / float64(len(x)); math.Abs(mean-tt.mean) >= tt.meanTol {
				t.Errorf("mean |x| = %.5f, diffusers asserts %.4f within %g", mean, tt.mean, tt.meanTol)
			}
			if tt.sum != 0 && math.Abs(sum-tt.sum) >= 1e-2 {
				t.Errorf("sum |x| = %.4f, diffusers asserts %.4f within 1e-2", sum, tt.sum)
			}
		})
	}
}

// TestUniPCOrdersAndTypesFinite is diffusers' test_solver_order_and_type:
// every order and solver type, epsilon and sample prediction, with and
// without predict_x0, ends finite.
func TestUniPCOrdersAndTypesFinite(t *testing.T) {
	for _, order := range []int{1, 2, 3} {
		for _, solver := range []string{"bh1", "bh2"} {
			for _, pred := range []string{"epsilon", "sample", "v_prediction"} {
				for _, x0 := range []bool{true, false} {
					extra, _ := json.Marshal(map[string]any{"solver_order": order, "solver_type": solver, "prediction_type": pred, "predict_x0": x0})
					cfg := vpConfig(t, ", "+strings.Trim(string(extra), "{}"))
					x := fullLoop(t, cfg, deterministic(96, false), nil, 0)
					if s := sumAbs(x); math.IsNaN(s) || math.IsInf(s, 0) {
						t.Errorf("order %d %s %s predict_x0=%v: sum |x| = %v", order, solver, pred, x0, s)
					}
				}
			}
		}
	}
}

// vpPath is a VP trajectory x(sigma) = alpha*x0 + sigma_t*eps with
// alpha = 1/sqrt(sigma^2+1), sigma_t = sigma*alpha; the exact solution of
// the diffusion ODE for a model that always predicts the same x0 and eps.
type vpPath struct{ x0, eps []float32 }

func (p vpPath) at(sigma float32) []float32 {
	s := float64(sigma)
	a := 1 / math.Sqrt(s*s+1)
	out := make([]float32, len(p.x0))
	for i := range out {
		out[i] = float32(a*float64(p.x0[i]) + s*a*float64(p.eps[i]))
	}
	return out
}

// output is what a perfect model of the given prediction type returns at sigma.
func (p vpPath) output(pred string, sigma float32) []float32 {
	s := float64(sigma)
	a := 1 / math.Sqrt(s*s+1)
	out := make([]float32, len(p.x0))
	for i := range out {
		switch pred {
		case "epsilon":
			out[i] = p.eps[i]
		case "sample":
			out[i] = p.x0[i]
		case "v_prediction":
			out[i] = float32(a*float64(p.eps[i]) - s*a*float64(p.x0[i]))
		}
	}
	return out
}

// TestUniPCVPStaysOnPath: with a perfect model every UniPC update, of any
// order, bh1 or bh2, on x0 or on the noise, lands on the path at the next
// sigma, for each prediction type and each VP schedule. A wrong
// conversion or update coefficient leaves it by far more than rounding
// (a coefficient off by alpha_t: by 0.1 and more).
func TestUniPCVPStaysOnPath(t *testing.T) {
	l := newLine(64, 7)
	p := vpPath{l.a, l.n}
	// Not here: beta sigmas (steps crowd both ends, so order 3 solves a
	// nearly singular system) and the noise form of a sample-predicting
	// model (it divides by sigma_t = 0.01): both amplify float32 rounding
	// past this check; TestUniPCOrdersAndTypesFinite runs them.
	schedules := []string{``, `, "use_karras_sigmas": true`, `, "use_exponential_sigmas": true`,
		`, "timestep_spacing": "trailing"`, `, "timestep_spacing": "leading", "steps_offset": 1`, `, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012`,
		`, "beta_schedule": "squaredcos_cap_v2"`, `, "rescale_betas_zero_snr": true, "timestep_spacing": "trailing"`}
	for _, sched := range schedules {
		for _, pred := range []string{"epsilon", "sample", "v_prediction"} {
			for _, x0 := range []bool{true, false} {
				if pred == "sample" && !x0 {
					continue
				}
				for _, order := range []int{1, 2, 3} {
					for _, solver := range []string{"bh1", "bh2"} {
						extra, _ := json.Marshal(map[string]any{"solver_order": order, "solver_type": solver, "prediction_type": pred, "predict_x0": x0})
						cfg := vpConfig(t, sched+", "+strings.Trim(string(extra), "{}"))
						u, err := NewUniPC(cfg)
						if err != nil {
							t.Fatal(err)
						}
						if err := u.SetTimesteps(8); err != nil {
							t.Fatal(err)
						}
						// From the second step: the first sigma (157, 4096
						// with zero terminal SNR, 20291 for the cosine
						// betas) scales float32 rounding by 1/alpha_t.
						if err := u.SetBeginIndex(1); err != nil {
							t.Fatal(err)
						}
						sig := u.Sigmas()
						x := p.at(sig[1])
						for i := 1; i < len(sig)-1; i++ {
							if err := u.Step(p.output(pred, sig[i]), x); err != nil {
								t.Fatal(err)
							}
							// Relative to the path's scale: at sigma 157 it is
							// dominated by eps, near 0 by x0.
							if d, j := maxAbsDiff(x, p.at(sig[i+1])); d > 3e-4 {
								t.Errorf("%s %s predict_x0=%v order %d %s: step %d element %d off the path by %g (sigma %v)",
									sched, pred, x0, order, solver, i, j, d, sig[i+1])
							}
						}
					}
				}
			}
		}
	}
}

// TestSpacedTimesteps: the three spacings of diffusers' set_timesteps,
// worked by hand from its numpy expressions for 1000 training steps.
func TestSpacedTimesteps(t *testing.T) {
	tests := []struct {
		extra string
		n     int
		want  []int64
	}{
		// linspace(0, 999, 11).round()[::-1][:-1]; 5 * 99.9 rounds up to 500.
		{`"timestep_spacing": "linspace"`, 10, []int64{999, 899, 799, 699, 599, 500, 400, 300, 200, 100}},
		// arange(0, 11) * (1000 // 11), reversed, without 0, plus the offset.
		{`"timestep_spacing": "leading", "steps_offset": 1`, 10, []int64{901, 811, 721, 631, 541, 451, 361, 271, 181, 91}},
		// arange(1000, 0, -100).round() - 1.
		{`"timestep_spacing": "trailing"`, 10, []int64{999, 899, 799, 699, 599, 499, 399, 299, 199, 99}},
		// arange(1000, 0, -333.33...) = 1000, 666.67, 333.33.
		{`"timestep_spacing": "trailing"`, 3, []int64{999, 666, 332}},
	}
	for _, tt := range tests {
		u, err := NewUniPC(vpConfig(t, ", "+tt.extra))
		if err != nil {
			t.Fatal(err)
		}
		if err := u.SetTimesteps(tt.n); err != nil {
			t.Fatal(err)
		}
		if got, _ := u.IntTimesteps(); !slices.Equal(got, tt.want) {
			t.Errorf("%s, %d steps: timesteps %v, want %v", tt.extra, tt.n, got, tt.want)
		}
	}
}

// TestVPSigmasMatchClosedForm: the VP schedule's sigmas are
// sqrt((1 - abar) / abar) at its timesteps, abar the product of 1 - beta,
// here in float64; the final sigma_min is the sigma of timestep 0.
func TestVPSigmasMatchClosedForm(t *testing.T) {
	for _, sched := range []string{`"beta_schedule": "linear"`, `"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012`, `"beta_schedule": "squaredcos_cap_v2"`} {
		cfg := vpConfig(t, ", "+sched)
		u, err := NewUniPC(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.SetTimesteps(12); err != nil {
			t.Fatal(err)
		}
		abar := make([]float64, 1000)
		p := 1.0
		for i := range abar {
			var beta float64
			switch cfg.BetaSchedule {
			case "linear":
				beta = cfg.BetaStart + float64(i)*(cfg.BetaEnd-cfg.BetaStart)/999
			case "scaled_linear":
				r := math.Sqrt(cfg.BetaStart) + float64(i)*(math.Sqrt(cfg.BetaEnd)-math.Sqrt(cfg.BetaStart))/999
				beta = r * r
			default:
				f := func(t float64) float64 { return math.Pow(math.Cos((t+0.008)/1.008*math.Pi/2), 2) }
				beta = min(1-f(float64(i+1)/1000)/f(float64(i)/1000), 0.999)
			}
			p *= 1 - beta
			abar[i] = p
		}
		ts, _ := u.IntTimesteps()
		sig := u.Sigmas()
		for i, tt := range append(ts, 0) {
			want := math.Sqrt((1 - abar[tt]) / abar[tt])
			// float32's 1 - beta carries 6e-8 absolute, so sigmas near
			// timestep 0 (1 - abar about 1e-4) are good to about 6e-4.
			tol := 2e-5 + 6e-8/(1-abar[tt])
			if d := math.Abs(float64(sig[i])-want) / want; d > tol {
				t.Errorf("%s: sigma %d (timestep %d) = %v, closed form %v (relative %g)", sched, i, tt, sig[i], want, d)
			}
		}
	}
	// Linear betas from 1e-4 to 0.02 end near sigma 157 (diffusers' UniPC
	// comment: "sigmas up to 157").
	u, _ := NewUniPC(vpConfig(t, ``))
	_ = u.SetTimesteps(4)
	if s := u.Sigmas()[0]; !(s > 157 && s < 158) {
		t.Errorf("first sigma %v, want about 157.4", s)
	}
}

// TestSigmaToTFindsTrainingTimesteps: a training sigma maps back to its
// own timestep, and one between two neighbours to the log-linear point
// between them.
func TestSigmaToTFindsTrainingTimesteps(t *testing.T) {
	train, err := vpConfig(t, ``).trainingSigmas()
	if err != nil {
		t.Fatal(err)
	}
	logs := logSigmas(train)
	for _, i := range []int{0, 1, 17, 500, 998, 999} {
		if got := sigmaToT(float64(train[i]), logs); got != float64(i) {
			t.Errorf("sigma of timestep %d maps to %v", i, got)
		}
	}
	mid := math.Sqrt(float64(train[300]) * float64(train[301])) // halfway in log
	if got := sigmaToT(mid, logs); math.Abs(got-300.5) > 1e-3 {
		t.Errorf("geometric mean of sigmas 300 and 301 maps to %v, want 300.5", got)
	}
	if got := sigmaToT(1e-9, logs); got != 0 {
		t.Errorf("a sigma below the table maps to %v, want 0", got)
	}
	if got := sigmaToT(1e6, logs); got != 999 {
		t.Errorf("a sigma above the table maps to %v, want 999", got)
	}
}

// TestKarrasSchedules: Karras sigmas run from the largest to the smallest
// training sigma (or the config's sigma_max and sigma_min); with flow
// sigmas diffusers maps them to sigma / (sigma + 1) with timesteps
// sigma * 1000, ignoring flow_shift.
func TestKarrasSchedules(t *testing.T) {
	train, _ := vpConfig(t, ``).trainingSigmas()
	u, err := NewUniPC(vpConfig(t, `, "use_karras_sigmas": true`))
	if err != nil {
		t.Fatal(err)
	}
	_ = u.SetTimesteps(6)
	sig := u.Sigmas()
	if sig[0] != train[999] || sig[5] != train[0] || sig[6] != train[0] {
		t.Errorf("Karras sigmas %v: want to start at %v and end (twice, sigma_min) at %v", sig, train[999], train[0])
	}
	if ts, _ := u.IntTimesteps(); ts[0] != 999 || ts[5] != 0 {
		t.Errorf("Karras timesteps %v: want 999 first and 0 last", ts)
	}

	u, err = NewUniPC(vpConfig(t, `, "use_karras_sigmas": true, "sigma_min": 0.5, "sigma_max": 20`))
	if err != nil {
		t.Fatal(err)
	}
	_ = u.SetTimesteps(6)
	if sig := u.Sigmas(); sig[0] != 20 || sig[5] != 0.5 {
		t.Errorf("sigma_max 20, sigma_min 0.5: Karras sigmas %v", sig)
	}

	for _, shift := range []string{"1.0", "5.0"} {
		s, err := FromConfig([]byte(wanJSON(`"use_karras_sigmas": true, "flow_shift": ` + shift)))
		if err != nil {
			t.Fatal(err)
		}
		_ = s.SetTimesteps(6)
		ts, _ := s.IntTimesteps()
		for i, f := range s.Sigmas()[:6] {
			k := karrasSigmas(float64(train[999]), float64(train[0]), 6)[i]
			want := k / (k + 1)
			if math.Abs(float64(f)-want) > 1e-7 || ts[i] != int64(want*1000) {
				t.Errorf("flow shift %s: step %d sigma %v timestep %d, want %v and %d", shift, i, f, ts[i], want, int64(want*1000))
			}
		}
		if sig := s.Sigmas(); sig[6] != 0 {
			t.Errorf("final sigma %v, want 0", sig[6])
		}
	}
}

// TestRescaleZeroTerminalSNR: the rescaled schedule's sqrt(abar) is the
// original's shifted to end at 0 and scaled to keep its start; diffusers
// then sets the last abar to 2^-24, so the first sigma is about 4096.
func TestRescaleZeroTerminalSNR(t *testing.T) {
	cfg := vpConfig(t, ``)
	betas, _ := cfg.betas()
	root := cumprodOneMinus(betas)
	rescaled := cumprodOneMinus(rescaleZeroTerminalSNR(betas))
	r0, rT := math.Sqrt(float64(root[0])), math.Sqrt(float64(root[len(root)-1]))
	for i := 0; i < len(root)-1; i += 111 {
		want := (math.Sqrt(float64(root[i])) - rT) * r0 / (r0 - rT)
		if got := math.Sqrt(float64(rescaled[i])); math.Abs(got-want) > 1e-5*want+1e-7 {
			t.Errorf("timestep %d: sqrt(abar) %v, want %v", i, got, want)
		}
	}
	if rescaled[len(rescaled)-1] != 0 {
		t.Errorf("last abar %v, want 0 before diffusers' floor", rescaled[len(rescaled)-1])
	}
	u, err := NewUniPC(vpConfig(t, `, "rescale_betas_zero_snr": true, "timestep_spacing": "trailing"`))
	if err != nil {
		t.Fatal(err)
	}
	_ = u.SetTimesteps(4)
	if s := u.Sigmas()[0]; math.Abs(float64(s)-4096) > 0.01 {
		t.Errorf("first sigma %v, want sqrt((1 - 2^-24) / 2^-24) = 4096", s)
	}
}

// TestNoiseScales: add_noise's factors are 1 - sigma and sigma with flow
// sigmas, and alpha, sigma*alpha with alpha^2 + (sigma*alpha)^2 = 1
// without.
func TestNoiseScales(t *testing.T) {
	flow, err := FromConfig([]byte(wanJSON(`"solver_order": 2`)))
	if err != nil {
		t.Fatal(err)
	}
	_ = flow.SetTimesteps(5)
	for i, s := range flow.Sigmas() {
		if a, sg := flow.NoiseScales(i); a != 1-s || sg != s {
			t.Errorf("flow step %d: (%v, %v), want (%v, %v)", i, a, sg, 1-s, s)
		}
	}
	vp, _ := NewUniPC(vpConfig(t, ``))
	_ = vp.SetTimesteps(5)
	for i, s := range vp.Sigmas() {
		a, sg := vp.NoiseScales(i)
		if d := math.Abs(float64(a)*float64(a) + float64(sg)*float64(sg) - 1); d > 1e-6 || math.Abs(float64(sg/a)-float64(s)) > 1e-6*float64(s) {
			t.Errorf("VP step %d (sigma %v): alpha %v sigma_t %v", i, s, a, sg)
		}
	}
}

// TestVPRefusesCustomSigmas: diffusers takes custom sigmas only with flow
// sigmas.
func TestVPRefusesCustomSigmas(t *testing.T) {
	u, _ := NewUniPC(vpConfig(t, ``))
	err := u.SetTimestepsWith(0, ScheduleOptions{Sigmas: []float64{1, 0.5}})
	if err == nil || !strings.Contains(err.Error(), "use_flow_sigmas") {
		t.Fatalf("custom sigmas without flow sigmas: %v", err)
	}
}
