package sampler

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// line is a straight flow-matching trajectory x(sigma) = (1-sigma)*a +
// sigma*n whose exact velocity is n - a. Every consistent flow solver, UniPC
// of any order included, stays on it up to rounding.
type line struct{ a, n []float32 }

func newLine(size int, seed uint64) line {
	r := rand.New(rand.NewPCG(seed, 1))
	l := line{make([]float32, size), make([]float32, size)}
	for i := range l.a {
		l.a[i] = float32(r.NormFloat64())
		l.n[i] = float32(r.NormFloat64())
	}
	return l
}

func (l line) at(sigma float32) []float32 {
	out := make([]float32, len(l.a))
	for i := range out {
		s := float64(sigma)
		out[i] = float32((1-s)*float64(l.a[i]) + s*float64(l.n[i]))
	}
	return out
}

func (l line) velocity() []float32 {
	out := make([]float32, len(l.a))
	for i := range out {
		out[i] = l.n[i] - l.a[i]
	}
	return out
}

// followLine runs a scheduler from its current step index to the end on the
// line and checks each sample against the line at the next sigma.
func followLine(t *testing.T, s Scheduler, l line, atol float64) {
	t.Helper()
	sig := s.Sigmas()
	x := l.at(sig[s.StepIndex()])
	v := l.velocity()
	for i := s.StepIndex(); i < len(sig)-1; i++ {
		if err := s.Step(v, x); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d, j := maxAbsDiff(x, l.at(sig[i+1])); d > atol {
			t.Fatalf("step %d: element %d off the line by %g (sigma %v)", i, j, d, sig[i+1])
		}
	}
}

func TestUniPCStaysOnStraightLine(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*UniPCConfig)
		steps  int
	}{
		{"wan shift 5", func(c *UniPCConfig) { c.FlowShift = 5 }, 8},
		{"order 1", func(c *UniPCConfig) { c.SolverOrder = 1 }, 6},
		{"order 3", func(c *UniPCConfig) { c.SolverOrder = 3 }, 9},
		// bh1 only with sigma_min: to sigma 0 diffusers' bh1 gives NaN
		// (refused: TestConfigRejections).
		{"order 3 bh1", func(c *UniPCConfig) { c.SolverOrder = 3; c.SolverType = "bh1"; c.FinalSigmasType = "sigma_min" }, 9},
		{"bh1", func(c *UniPCConfig) { c.SolverType = "bh1"; c.FinalSigmasType = "sigma_min" }, 7},
		{"no lower order final", func(c *UniPCConfig) { c.LowerOrderFinal = false; c.FinalSigmasType = "sigma_min" }, 5},
		{"corrector off early", func(c *UniPCConfig) { c.DisableCorrector = []int{0, 1} }, 6},
		{"final sigma_min", func(c *UniPCConfig) { c.FinalSigmasType = "sigma_min" }, 6},
		{"one step", func(c *UniPCConfig) {}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := WanUniPCConfig(3)
			tt.modify(&cfg)
			u, err := NewUniPC(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := u.SetTimesteps(tt.steps); err != nil {
				t.Fatal(err)
			}
			followLine(t, u, newLine(64, 7), 2e-5)
		})
	}
}

func TestFlowMatchEulerStaysOnStraightLine(t *testing.T) {
	f, err := NewFlowMatchEuler(FlowMatchEulerConfig{NumTrainTimesteps: 1000, Shift: 3, TimeShiftType: "exponential"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTimesteps(10); err != nil {
		t.Fatal(err)
	}
	followLine(t, f, newLine(64, 8), 2e-6)
}

// TestUniPCHigherOrderIsMoreAccurate integrates a curved trajectory
// x(sigma) = sin(3 sigma)/3 + sigma^2 (velocity cos(3 sigma) + 2 sigma) and
// checks that solver orders 2 and 3 beat order 1 clearly, which they can only
// do if the multistep coefficients (the rho solve included) are right.
func TestUniPCHigherOrderIsMoreAccurate(t *testing.T) {
	const steps = 48
	traj := func(s float64) float64 { return math.Sin(3*s)/3 + s*s }
	vel := func(s float64) float64 { return math.Cos(3*s) + 2*s }
	errFor := func(order int, solver string) float64 {
		cfg := WanUniPCConfig(1)
		cfg.SolverOrder, cfg.SolverType, cfg.LowerOrderFinal = order, solver, false
		cfg.FinalSigmasType = "sigma_min" // full order to the end; see the config check
		u, err := NewUniPC(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Custom sigmas keep away from sigma = 1 and 0, where the
		// log-SNR steps are unbounded; compare before the final step.
		if err := u.SetTimestepsWith(0, ScheduleOptions{Sigmas: linspace(0.9, 0.1, steps)}); err != nil {
			t.Fatal(err)
		}
		sig := u.Sigmas()
		x := []float32{float32(traj(float64(sig[0])))}
		for i := 0; i < steps-1; i++ {
			if err := u.Step([]float32{float32(vel(float64(sig[i])))}, x); err != nil {
				t.Fatal(err)
			}
		}
		return math.Abs(float64(x[0]) - traj(float64(sig[steps-1])))
	}
	for _, solver := range []string{"bh1", "bh2"} {
		e1 := errFor(1, solver)
		for _, order := range []int{2, 3} {
			if e := errFor(order, solver); !(e*5 < e1) {
				t.Errorf("%s order %d: error %.3g, not 5x below order 1's %.3g", solver, order, e, e1)
			}
		}
	}
}

func TestResetRepeatsExactly(t *testing.T) {
	for _, s := range bothSchedulers(t) {
		l := newLine(32, 3)
		r := rand.New(rand.NewPCG(5, 6))
		outs := make([][]float32, len(s.Timesteps()))
		for i := range outs {
			outs[i] = l.at(float32(r.Float64()))
		}
		run := func() []float32 {
			x := l.at(1)
			for _, o := range outs {
				if err := s.Step(o, x); err != nil {
					t.Fatal(err)
				}
			}
			return x
		}
		first := run()
		s.Reset()
		second := run()
		if err := s.SetTimesteps(len(outs)); err != nil {
			t.Fatal(err)
		}
		third := run()
		for i := range first {
			if first[i] != second[i] || first[i] != third[i] {
				t.Fatalf("%T: element %d: %v, after Reset %v, after SetTimesteps %v", s, i, first[i], second[i], third[i])
			}
		}
	}
}

// bothSchedulers returns a Wan UniPC and a shift-3 flow-match Euler, each set
// to 6 steps.
func bothSchedulers(t *testing.T) []Scheduler {
	t.Helper()
	u, err := NewUniPC(WanUniPCConfig(3))
	if err != nil {
		t.Fatal(err)
	}
	fc := DefaultFlowMatchEulerConfig()
	fc.Shift = 3
	f, err := NewFlowMatchEuler(fc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Scheduler{u, f} {
		if err := s.SetTimesteps(6); err != nil {
			t.Fatal(err)
		}
	}
	return []Scheduler{u, f}
}

func TestSetBeginIndex(t *testing.T) {
	for _, s := range bothSchedulers(t) {
		if err := s.SetBeginIndex(6); err == nil {
			t.Errorf("%T: begin index past the end accepted", s)
		}
		if err := s.SetBeginIndex(2); err != nil {
			t.Fatal(err)
		}
		if s.StepIndex() != 2 {
			t.Fatalf("%T: step index %d after SetBeginIndex(2)", s, s.StepIndex())
		}
		followLine(t, s, newLine(16, 4), 2e-5)
		if err := s.SetBeginIndex(1); err == nil {
			t.Errorf("%T: SetBeginIndex after steps accepted", s)
		}
	}
}

func TestStepErrors(t *testing.T) {
	u, _ := NewUniPC(WanUniPCConfig(3))
	f, _ := NewFlowMatchEuler(DefaultFlowMatchEulerConfig())
	for _, s := range []Scheduler{u, f} {
		x := make([]float32, 4)
		if err := s.Step(x, x); !errors.Is(err, ErrNotSet) {
			t.Errorf("%T: step before SetTimesteps: %v", s, err)
		}
		if err := s.SetTimesteps(0); err == nil {
			t.Errorf("%T: zero steps accepted", s)
		}
		if err := s.SetTimesteps(2); err != nil {
			t.Fatal(err)
		}
		if err := s.Step(make([]float32, 3), x); err == nil {
			t.Errorf("%T: mismatched lengths accepted", s)
		}
		if err := s.Step(x, x); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*UniPC); ok {
			if err := s.Step(make([]float32, 5), make([]float32, 5)); err == nil {
				t.Errorf("UniPC: sample size change mid-schedule accepted")
			}
		}
		if err := s.Step(x, x); err != nil {
			t.Fatal(err)
		}
		if err := s.Step(x, x); !errors.Is(err, ErrDone) {
			t.Errorf("%T: step past the end: %v", s, err)
		}
	}
}

func TestStepDoesNotAllocate(t *testing.T) {
	for _, s := range bothSchedulers(t) {
		if err := s.SetTimesteps(200); err != nil {
			t.Fatal(err)
		}
		x := newLine(1024, 1).at(1)
		v := newLine(1024, 2).velocity()
		if err := s.Step(v, x); err != nil { // sizes the history buffers
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(50, func() {
			if err := s.Step(v, x); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%T: %v allocations per Step", s, allocs)
		}
	}
}

func TestConfigRejections(t *testing.T) {
	tests := []struct {
		name string
		json string
		want string // substring of the error
	}{
		{"prediction type", wanJSON(`"prediction_type": "x0"`), "prediction_type"},
		{"flow noise form", wanJSON(`"predict_x0": false`), "predict_x0"},
		{"noise form to zero", `{"_class_name": "UniPCMultistepScheduler", "predict_x0": false}`, "predict_x0"},
		{"exponential flow", wanJSON(`"use_exponential_sigmas": true`), "use_exponential_sigmas"},
		{"beta flow", wanJSON(`"use_beta_sigmas": true`), "use_beta_sigmas"},
		{"two respacings", `{"_class_name": "UniPCMultistepScheduler", "use_karras_sigmas": true, "use_beta_sigmas": true}`, "at most one"},
		{"beta schedule", `{"_class_name": "UniPCMultistepScheduler", "beta_schedule": "cosine"}`, "beta_schedule"},
		{"betas past 1", `{"_class_name": "UniPCMultistepScheduler", "trained_betas": [0.5, 1.5]}`, "betas"},
		{"one trained beta", `{"_class_name": "UniPCMultistepScheduler", "trained_betas": [0.5]}`, "trained_betas"},
		{"negative sigma_min", `{"_class_name": "UniPCMultistepScheduler", "use_karras_sigmas": true, "sigma_min": -1}`, "sigma_min"},
		{"zero sigma_max", `{"_class_name": "UniPCMultistepScheduler", "use_karras_sigmas": true, "sigma_max": 0}`, "sigma_max"},
		{"exponential to zero", `{"_class_name": "UniPCMultistepScheduler", "use_exponential_sigmas": true, "sigma_min": 0}`, "sigma_min"},
		{"thresholding ratio", wanJSON(`"thresholding": true, "dynamic_thresholding_ratio": 1.5`), "dynamic_thresholding_ratio"},
		{"thresholding max", wanJSON(`"thresholding": true, "sample_max_value": 0`), "sample_max_value"},
		{"solver type", wanJSON(`"solver_type": "bh3"`), "bh3"},
		{"solver_p", wanJSON(`"solver_p": {"x": 1}`), "solver_p"},
		{"final sigmas", wanJSON(`"final_sigmas_type": "one"`), "final_sigmas_type"},
		{"spacing", wanJSON(`"timestep_spacing": "cosine"`), "timestep_spacing"},
		{"order 0", wanJSON(`"solver_order": 0`), "solver_order"},
		{"time shift type", wanJSON(`"use_dynamic_shifting": true, "time_shift_type": "log"`), "time_shift_type"},
		{"negative shift", wanJSON(`"flow_shift": -1`), "flow_shift"},
		{"order 2 to zero", wanJSON(`"lower_order_final": false`), "lower_order_final"},
		{"bh1 to zero", wanJSON(`"solver_type": "bh1"`), "bh1"},
		{"terminal", wanJSON(`"shift_terminal": 1.5`), "shift_terminal"},
		{"bad json", `{"_class_name": "UniPCMultistepScheduler", "solver_order": "two"}`, "solver_order"},
		{"euler two reshapings", `{"_class_name": "FlowMatchEulerDiscreteScheduler", "use_beta_sigmas": true, "use_karras_sigmas": true}`, "at most one"},
		{"unknown class", `{"_class_name": "DDIMScheduler"}`, "DDIMScheduler"},
		{"no class", `{"solver_order": 2}`, "_class_name"},
		{"not json", `{`, "config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromConfig([]byte(tt.json))
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line mentioning %q", msg, tt.want)
			}
		})
	}
}

// wanJSON is Wan's UniPC scheduler_config.json with extra keys overriding.
func wanJSON(extra string) string {
	return `{"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction",
		"use_flow_sigmas": true, "flow_shift": 3.0, ` + extra + `}`
}

func TestConfigAccepts(t *testing.T) {
	s, err := FromConfig([]byte(wanJSON(`"solver_type": "midpoint", "disable_corrector": [0], "trained_betas": null, "unknown_key": 1`)))
	if err != nil {
		t.Fatal(err)
	}
	u := s.(*UniPC)
	if got := u.Config().SolverType; got != "bh2" {
		t.Errorf("midpoint maps to %q, diffusers uses bh2", got)
	}
	if u.SolverOrder() != 2 || u.Order() != 1 {
		t.Errorf("solver order %d, order %d; want 2 and 1", u.SolverOrder(), u.Order())
	}
}

// TestDynamicShiftMatchesStatic: exp(mu) / (exp(mu) + 1/t - 1) is the static
// shift by exp(mu), so mu = log(3) must give the flow_shift 3 schedule.
func TestDynamicShiftMatchesStatic(t *testing.T) {
	static, err := FromConfig([]byte(wanJSON(`"flow_shift": 3.0`)))
	if err != nil {
		t.Fatal(err)
	}
	dynamic, err := FromConfig([]byte(wanJSON(`"use_dynamic_shifting": true`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := static.SetTimesteps(12); err != nil {
		t.Fatal(err)
	}
	if err := dynamic.SetTimesteps(12); err == nil {
		t.Fatal("dynamic shifting without mu accepted")
	}
	mu := math.Log(3)
	if err := dynamic.SetTimestepsWith(12, ScheduleOptions{Mu: &mu}); err != nil {
		t.Fatal(err)
	}
	checkSigmasClose(t, dynamic.Sigmas(), static.Sigmas(), 1e-6)
	// Without dynamic shifting mu is ignored, as in diffusers.
	before := slices.Clone(static.Sigmas())
	other := 2.5
	if err := static.SetTimestepsWith(12, ScheduleOptions{Mu: &other}); err != nil {
		t.Fatalf("mu without dynamic shifting: %v (diffusers ignores it)", err)
	}
	if !slices.Equal(static.Sigmas(), before) {
		t.Error("mu changed a schedule without dynamic shifting")
	}
}

func TestShiftTerminalEndsAtTerminal(t *testing.T) {
	u, err := FromConfig([]byte(wanJSON(`"shift_terminal": 0.1`)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := FromConfig([]byte(`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0, "shift_terminal": 0.1}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Scheduler{u, f} {
		if err := s.SetTimesteps(7); err != nil {
			t.Fatal(err)
		}
		sig := s.Sigmas()
		if last := sig[len(sig)-2]; math.Abs(float64(last)-0.1) > 1e-6 {
			t.Errorf("%T: last sigma %v, want shift_terminal 0.1", s, last)
		}
		if sig[len(sig)-1] != 0 {
			t.Errorf("%T: final sigma %v, want 0", s, sig[len(sig)-1])
		}
	}
}

func TestFlowMatchInvertSigmas(t *testing.T) {
	plain, _ := FromConfig([]byte(`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0}`))
	inv, err := FromConfig([]byte(`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0, "invert_sigmas": true}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Scheduler{plain, inv} {
		if err := s.SetTimesteps(5); err != nil {
			t.Fatal(err)
		}
	}
	p, q, ts := plain.Sigmas(), inv.Sigmas(), inv.Timesteps()
	for i := 0; i < 5; i++ {
		if q[i] != 1-p[i] || ts[i] != q[i]*1000 {
			t.Errorf("step %d: inverted sigma %v timestep %v from sigma %v", i, q[i], ts[i], p[i])
		}
	}
	if q[5] != 1 {
		t.Errorf("inverted final sigma %v, want 1", q[5])
	}
}

func TestCalculateShiftEndpoints(t *testing.T) {
	c := DefaultFlowMatchEulerConfig()
	if got := c.Mu(c.BaseImageSeqLen); math.Abs(got-c.BaseShift) > 1e-12 {
		t.Errorf("mu at base length = %v, want %v", got, c.BaseShift)
	}
	if got := c.Mu(c.MaxImageSeqLen); math.Abs(got-c.MaxShift) > 1e-12 {
		t.Errorf("mu at max length = %v, want %v", got, c.MaxShift)
	}
}

func TestSolveInPlace(t *testing.T) {
	tests := []struct {
		name string
		a    []float64
		x    []float64
	}{
		{"1x1", []float64{4}, []float64{0.25}},
		{"needs pivot", []float64{0, 1, 1, 0}, []float64{2, 3}},
		{"3x3 vandermonde", []float64{1, 1, 1, -0.5, 2, 1, 0.25, 4, 1}, []float64{1, -2, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(tt.x)
			b := make([]float64, n)
			for r := 0; r < n; r++ {
				for k := 0; k < n; k++ {
					b[r] += tt.a[r*n+k] * tt.x[k]
				}
			}
			a := append([]float64(nil), tt.a...)
			solveInPlace(a, b, n)
			for i := range b {
				if math.Abs(b[i]-tt.x[i]) > 1e-12 {
					t.Fatalf("x = %v, want %v", b, tt.x)
				}
			}
		})
	}
}

func BenchmarkStep(b *testing.B) {
	// One 480p Wan 2.1 latent: 16 channels x 21 frames x 60 x 104.
	const size = 16 * 21 * 60 * 104
	u, _ := NewUniPC(WanUniPCConfig(3))
	fc := DefaultFlowMatchEulerConfig()
	fc.Shift = 3
	f, _ := NewFlowMatchEuler(fc)
	for _, s := range []Scheduler{u, f} {
		b.Run(strings.TrimPrefix(strings.TrimPrefix(typeName(s), "*sampler."), "sampler."), func(b *testing.B) {
			x := newLine(size, 1).at(1)
			v := newLine(size, 2).velocity()
			b.SetBytes(int64(size) * 4)
			for b.Loop() {
				if s.StepIndex() == 0 || s.StepIndex() >= 50 {
					if err := s.SetTimesteps(50); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Step(v, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func typeName(s Scheduler) string {
	switch s.(type) {
	case *UniPC:
		return "UniPC"
	case *FlowMatchEuler:
		return "FlowMatchEuler"
	}
	return "unknown"
}

// TestStretchNumpy1Scalars: stretch_shift_to_terminal's scale factor is a
// numpy float32 scalar over a Python float, which the reference's numpy
// 1.24 computes in float64 and the float32 array expression then rounds
// once; numpy 2 would divide in float32. Over float32 schedules the two
// differ by an ulp on some sigmas, and ours must be numpy 1.24's.
func TestStretchNumpy1Scalars(t *testing.T) {
	differ := 0
	for _, term := range []float64{0.1, 0.02, 0.3} {
		for n := 2; n <= 40; n++ {
			s := linspace(1, 1/float64(n), n)
			for i := range s {
				s[i] = r32(s[i])
			}
			got := slices.Clone(s)
			stretchToTerminal(got, term, f32)
			last := r32(1 - s[n-1])
			numpy1, numpy2 := r32(last/(1-term)), r32(last/r32(1-term))
			for i, v := range s {
				want := r32(1 - r32(r32(1-v)/numpy1))
				if got[i] != want {
					t.Fatalf("terminal %g, n %d, sigma %d: %v, numpy 1.24 gives %v", term, n, i, got[i], want)
				}
				if r32(1-r32(r32(1-v)/numpy2)) != want {
					differ++
				}
			}
		}
	}
	if differ == 0 {
		t.Fatal("no sigma tells numpy 1.24's scalar division from numpy 2's: the test cannot fail")
	}
}
