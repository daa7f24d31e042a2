package sampler

import (
	"testing"
)

// FuzzFromConfig: any scheduler_config.json either is refused with an
// error or gives a scheduler whose schedule and steps run without a panic.
func FuzzFromConfig(f *testing.F) {
	for _, seed := range []string{
		wanJSON(`"solver_order": 3`),
		wanJSON(`"solver_order": 1000000000`),
		wanJSON(`"thresholding": true, "sample_max_value": 2`),
		wanJSON(`"final_sigmas_type": "sigma_min", "lower_order_final": false`),
		wanJSON(`"use_dynamic_shifting": true`),
		`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0, "use_beta_sigmas": true}`,
		`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 5.0, "use_karras_sigmas": true, "shift_terminal": 0.1}`,
		`{"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 1.0, "use_exponential_sigmas": true, "invert_sigmas": true}`,
		`{"_class_name": "FlowMatchEulerDiscreteScheduler", "stochastic_sampling": true}`,
		`{"_class_name": "UniPCMultistepScheduler", "final_sigmas_type": "sigma_min", "predict_x0": false, "solver_order": 3}`,
		`{"_class_name": "UniPCMultistepScheduler", "use_karras_sigmas": true, "prediction_type": "v_prediction", "timestep_spacing": "trailing"}`,
		`{"_class_name": "UniPCMultistepScheduler", "use_beta_sigmas": true, "beta_schedule": "squaredcos_cap_v2", "rescale_betas_zero_snr": true}`,
		`{"_class_name": "UniPCMultistepScheduler", "trained_betas": [0.1, 0.2, 0.3], "timestep_spacing": "leading", "steps_offset": 5}`,
		wanJSON(`"use_karras_sigmas": true, "sigma_min": 0.002, "sigma_max": 80`),
	} {
		f.Add([]byte(seed), uint8(4))
	}
	f.Fuzz(func(t *testing.T, raw []byte, steps uint8) {
		s, err := FromConfig(raw)
		if err != nil {
			return
		}
		if n, ok := s.(Noisy); ok {
			n.SetNoise(func(dst []float32) { clear(dst) })
		}
		n := int(steps%32) + 1
		if err := s.SetTimesteps(n); err != nil {
			return
		}
		x, v := make([]float32, 8), make([]float32, 8)
		for i := range x {
			x[i], v[i] = float32(i)-4, 0.5
		}
		for range n {
			if err := s.Step(v, x); err != nil {
				t.Fatalf("step: %v", err)
			}
		}
	})
}

// TestHugeSolverOrder: a solver_order far above the steps takes memory for
// the orders the steps reach, not for solver_order (a config with 1e9
// allocated 8e18 bytes and crashed before).
func TestHugeSolverOrder(t *testing.T) {
	s, err := FromConfig([]byte(wanJSON(`"solver_order": 1000000000`)))
	if err != nil {
		t.Fatal(err)
	}
	small, err := FromConfig([]byte(wanJSON(`"solver_order": 3`)))
	if err != nil {
		t.Fatal(err)
	}
	// With three steps the orders reached are those of solver_order 3.
	l := newLine(16, 9)
	var outs [2][]float32
	for k, sc := range []Scheduler{s, small} {
		if err := sc.SetTimesteps(3); err != nil {
			t.Fatal(err)
		}
		x := l.at(sc.Sigmas()[0])
		for range 3 {
			if err := sc.Step(l.velocity(), x); err != nil {
				t.Fatal(err)
			}
		}
		outs[k] = x
	}
	if d, _ := maxAbsDiff(outs[0], outs[1]); d != 0 {
		t.Errorf("solver_order 1e9 and 3 differ by %g over three steps", d)
	}
}
