package sampler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// UniPCConfig is the full key set of diffusers' UniPCMultistepScheduler
// config (scheduler_config.json). Keys missing from a file take diffusers'
// constructor defaults (DefaultUniPCConfig); unknown keys are ignored, as
// diffusers ignores them.
type UniPCConfig struct {
	NumTrainTimesteps        int       `json:"num_train_timesteps"`
	BetaStart                float64   `json:"beta_start"`
	BetaEnd                  float64   `json:"beta_end"`
	BetaSchedule             string    `json:"beta_schedule"`
	TrainedBetas             []float64 `json:"trained_betas"`
	SolverOrder              int       `json:"solver_order"`
	PredictionType           string    `json:"prediction_type"`
	Thresholding             bool      `json:"thresholding"`
	DynamicThresholdingRatio float64   `json:"dynamic_thresholding_ratio"`
	SampleMaxValue           float64   `json:"sample_max_value"`
	PredictX0                bool      `json:"predict_x0"`
	SolverType               string    `json:"solver_type"`
	LowerOrderFinal          bool      `json:"lower_order_final"`
	DisableCorrector         []int     `json:"disable_corrector"`
	// SolverP is another scheduler used as predictor; only null is supported.
	SolverP              json.RawMessage `json:"solver_p"`
	UseKarrasSigmas      bool            `json:"use_karras_sigmas"`
	UseExponentialSigmas bool            `json:"use_exponential_sigmas"`
	UseBetaSigmas        bool            `json:"use_beta_sigmas"`
	UseFlowSigmas        bool            `json:"use_flow_sigmas"`
	FlowShift            float64         `json:"flow_shift"`
	TimestepSpacing      string          `json:"timestep_spacing"`
	StepsOffset          int             `json:"steps_offset"`
	FinalSigmasType      string          `json:"final_sigmas_type"`
	RescaleBetasZeroSNR  bool            `json:"rescale_betas_zero_snr"`
	UseDynamicShifting   bool            `json:"use_dynamic_shifting"`
	TimeShiftType        string          `json:"time_shift_type"`
	SigmaMin             *float64        `json:"sigma_min"`
	SigmaMax             *float64        `json:"sigma_max"`
	ShiftTerminal        *float64        `json:"shift_terminal"`
}

// DefaultUniPCConfig returns diffusers' constructor defaults. Note that they
// are not Wan's values: Wan's scheduler_config.json sets flow_prediction,
// use_flow_sigmas and flow_shift.
func DefaultUniPCConfig() UniPCConfig {
	return UniPCConfig{
		NumTrainTimesteps:        1000,
		BetaStart:                0.0001,
		BetaEnd:                  0.02,
		BetaSchedule:             "linear",
		SolverOrder:              2,
		PredictionType:           "epsilon",
		DynamicThresholdingRatio: 0.995,
		SampleMaxValue:           1.0,
		PredictX0:                true,
		SolverType:               "bh2",
		LowerOrderFinal:          true,
		FlowShift:                1.0,
		TimestepSpacing:          "linspace",
		FinalSigmasType:          "zero",
		TimeShiftType:            "exponential",
	}
}

// WanUniPCConfig returns the UniPC config Wan 2.1 ships (flow prediction,
// flow sigmas) with the given flow shift: 3.0 for 480p, 5.0 for 720p.
func WanUniPCConfig(flowShift float64) UniPCConfig {
	c := DefaultUniPCConfig()
	c.PredictionType = "flow_prediction"
	c.UseFlowSigmas = true
	c.FlowShift = flowShift
	return c
}

// ParseUniPCConfig reads a scheduler_config.json over the defaults.
func ParseUniPCConfig(raw []byte) (UniPCConfig, error) {
	c := DefaultUniPCConfig()
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("sampler: %s config: %w", ClassUniPC, err)
	}
	return c, nil
}

// validate rejects what this implementation does not compute, one line each.
// It also maps the solver types diffusers renames (midpoint, heun, logrho are
// bh2 there).
func (c *UniPCConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sampler: %s: "+format, append([]any{ClassUniPC}, args...)...)
	}
	switch c.SolverType {
	case "bh1", "bh2":
	case "midpoint", "heun", "logrho":
		c.SolverType = "bh2"
	default:
		return bad("solver_type %q is not supported (bh1, bh2)", c.SolverType)
	}
	switch {
	case c.NumTrainTimesteps < 1:
		return bad("num_train_timesteps must be positive, got %d", c.NumTrainTimesteps)
	case c.SolverOrder < 1:
		return bad("solver_order must be positive, got %d", c.SolverOrder)
	case !slices.Contains([]string{"epsilon", "sample", "v_prediction", "flow_prediction"}, c.PredictionType):
		return bad("prediction_type %q is not supported (epsilon, sample, v_prediction, flow_prediction)", c.PredictionType)
	case !c.PredictX0 && c.PredictionType == "flow_prediction":
		// diffusers' convert_model_output raises for it.
		return bad("predict_x0=false is not supported with flow_prediction (diffusers has no noise form of it)")
	case c.Thresholding && !(c.DynamicThresholdingRatio >= 0 && c.DynamicThresholdingRatio <= 1):
		return bad("dynamic_thresholding_ratio must be in [0, 1] (a quantile), got %v", c.DynamicThresholdingRatio)
	case c.Thresholding && !(c.SampleMaxValue > 0):
		return bad("sample_max_value must be a positive number (x0 is divided by it), got %v", c.SampleMaxValue)
	case countTrue(c.UseKarrasSigmas, c.UseExponentialSigmas, c.UseBetaSigmas) > 1:
		return bad("set at most one of use_karras_sigmas, use_exponential_sigmas and use_beta_sigmas")
	case c.UseFlowSigmas && (c.UseExponentialSigmas || c.UseBetaSigmas):
		// diffusers derives them from the betas (sigmas up to 157) and
		// its flow-sigma step then takes the log of 1 - sigma < 0.
		return bad("use_exponential_sigmas and use_beta_sigmas are not supported with flow sigmas (diffusers' flow step gives NaN with them); use FlowMatchEulerDiscreteScheduler for them")
	case c.UseExponentialSigmas && c.SigmaMin != nil && *c.SigmaMin == 0:
		return bad("use_exponential_sigmas needs a positive sigma_min (it takes its log), got 0")
	case !isNull(c.SolverP):
		return bad("solver_p is not supported (must be null)")
	case c.FinalSigmasType != "zero" && c.FinalSigmasType != "sigma_min":
		return bad("final_sigmas_type %q is not supported (zero, sigma_min)", c.FinalSigmasType)
	case c.SolverType == "bh1" && c.FinalSigmasType == "zero":
		// The last predictor steps to sigma 0, where bh1's B(h) = h is
		// -inf; diffusers multiplies it by the residual (0 at first
		// order, finite above) and returns NaN or inf latents.
		return bad("solver_type=bh1 with final_sigmas_type=zero is not supported (diffusers' last step multiplies B(h) = -inf by the residual: NaN latents); use solver_type=bh2 or final_sigmas_type=sigma_min")
	case !c.LowerOrderFinal && c.SolverOrder > 1 && c.FinalSigmasType == "zero":
		// The last multistep update to sigma 0 divides by r_k = 0 there;
		// diffusers returns inf/NaN latents.
		return bad("lower_order_final=false with final_sigmas_type=zero is not supported (the last step divides by zero)")
	case !c.PredictX0 && c.FinalSigmasType == "zero":
		// The noise form's last step multiplies sigma_t = 0 by
		// h_phi_1 = expm1(inf); diffusers returns NaN latents.
		return bad("predict_x0=false with final_sigmas_type=zero is not supported (diffusers' last step multiplies sigma 0 by an infinite h_phi_1: NaN latents); use final_sigmas_type=sigma_min")
	}
	if err := checkSigmaRange(c.SigmaMin, c.SigmaMax); err != nil {
		return bad("%v", err)
	}
	if err := checkSpacing(c.TimestepSpacing); err != nil {
		return bad("%v", err)
	}
	if err := checkBetas(c.BetaSchedule, c.TrainedBetas); err != nil {
		return bad("%v", err)
	}
	if err := checkShift(c.UseDynamicShifting, c.FlowShift, "flow_shift", c.TimeShiftType, c.ShiftTerminal); err != nil {
		return bad("%v", err)
	}
	return nil
}

// FlowMatchEulerConfig is the full key set of diffusers'
// FlowMatchEulerDiscreteScheduler config. Missing keys take the defaults of
// DefaultFlowMatchEulerConfig; unknown keys are ignored.
type FlowMatchEulerConfig struct {
	NumTrainTimesteps    int      `json:"num_train_timesteps"`
	Shift                float64  `json:"shift"`
	UseDynamicShifting   bool     `json:"use_dynamic_shifting"`
	BaseShift            float64  `json:"base_shift"`
	MaxShift             float64  `json:"max_shift"`
	BaseImageSeqLen      int      `json:"base_image_seq_len"`
	MaxImageSeqLen       int      `json:"max_image_seq_len"`
	InvertSigmas         bool     `json:"invert_sigmas"`
	ShiftTerminal        *float64 `json:"shift_terminal"`
	UseKarrasSigmas      bool     `json:"use_karras_sigmas"`
	UseExponentialSigmas bool     `json:"use_exponential_sigmas"`
	UseBetaSigmas        bool     `json:"use_beta_sigmas"`
	TimeShiftType        string   `json:"time_shift_type"`
	StochasticSampling   bool     `json:"stochastic_sampling"`
	// SigmaMin and SigmaMax are not constructor arguments, but diffusers
	// keeps unknown config keys as hidden config entries, and its Karras,
	// exponential and beta respacings read these two where a config
	// carries them (nil: the schedule's own ends).
	SigmaMin *float64 `json:"sigma_min"`
	SigmaMax *float64 `json:"sigma_max"`
}

// DefaultFlowMatchEulerConfig returns diffusers' constructor defaults.
func DefaultFlowMatchEulerConfig() FlowMatchEulerConfig {
	return FlowMatchEulerConfig{
		NumTrainTimesteps: 1000,
		Shift:             1.0,
		BaseShift:         0.5,
		MaxShift:          1.15,
		BaseImageSeqLen:   256,
		MaxImageSeqLen:    4096,
		TimeShiftType:     "exponential",
	}
}

// ParseFlowMatchEulerConfig reads a scheduler_config.json over the defaults.
func ParseFlowMatchEulerConfig(raw []byte) (FlowMatchEulerConfig, error) {
	c := DefaultFlowMatchEulerConfig()
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("sampler: %s config: %w", ClassFlowMatchEuler, err)
	}
	return c, nil
}

// Mu returns the dynamic-shift mu for imageSeqLen latent tokens with this
// config's base/max shift and sequence lengths, as FluxPipeline computes it.
func (c FlowMatchEulerConfig) Mu(imageSeqLen int) float64 {
	return CalculateShift(imageSeqLen, c.BaseImageSeqLen, c.MaxImageSeqLen, c.BaseShift, c.MaxShift)
}

func (c *FlowMatchEulerConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sampler: %s: "+format, append([]any{ClassFlowMatchEuler}, args...)...)
	}
	switch {
	case c.NumTrainTimesteps < 1:
		return bad("num_train_timesteps must be positive, got %d", c.NumTrainTimesteps)
	case countTrue(c.UseKarrasSigmas, c.UseExponentialSigmas, c.UseBetaSigmas) > 1:
		return bad("set at most one of use_karras_sigmas, use_exponential_sigmas and use_beta_sigmas")
	}
	if err := checkSigmaRange(c.SigmaMin, c.SigmaMax); err != nil {
		return bad("%v", err)
	}
	if err := checkShift(c.UseDynamicShifting, c.Shift, "shift", c.TimeShiftType, c.ShiftTerminal); err != nil {
		return bad("%v", err)
	}
	return nil
}

// checkShift validates the shift settings both schedulers share.
func checkShift(dynamic bool, shift float64, shiftKey, timeShiftType string, terminal *float64) error {
	if dynamic {
		if timeShiftType != "exponential" && timeShiftType != "linear" {
			return fmt.Errorf("time_shift_type %q is not supported (exponential, linear)", timeShiftType)
		}
	} else if !(shift > 0) || math.IsInf(shift, 0) {
		return fmt.Errorf("%s must be a positive number, got %v", shiftKey, shift)
	}
	if terminal != nil && *terminal != 0 && !(*terminal < 1) {
		return fmt.Errorf("shift_terminal must be below 1, got %v", *terminal)
	}
	return nil
}

// checkSigmaRange checks the sigma_min and sigma_max a Karras,
// exponential or beta respacing reads in place of the schedule's ends.
func checkSigmaRange(lo, hi *float64) error {
	switch {
	case lo != nil && !(*lo >= 0 && *lo < math.Inf(1)):
		return fmt.Errorf("sigma_min must be a non-negative number, got %v", *lo)
	case hi != nil && !(*hi > 0 && *hi < math.Inf(1)):
		return fmt.Errorf("sigma_max must be a positive number, got %v", *hi)
	}
	return nil
}

// checkSpacing accepts the timestep spacings diffusers knows. With flow
// sigmas the timesteps come from the sigmas, so the spacing has no effect,
// but diffusers still rejects unknown values.
func checkSpacing(spacing string) error {
	switch spacing {
	case "linspace", "leading", "trailing":
		return nil
	}
	return fmt.Errorf("timestep_spacing %q is not supported (linspace, leading, trailing)", spacing)
}

// checkBetas accepts the beta schedules diffusers' constructor accepts.
func checkBetas(schedule string, trained []float64) error {
	if trained != nil {
		return nil
	}
	switch schedule {
	case "linear", "scaled_linear", "squaredcos_cap_v2":
		return nil
	}
	return fmt.Errorf("beta_schedule %q is not supported", schedule)
}

func countTrue(flags ...bool) int {
	n := 0
	for _, f := range flags {
		if f {
			n++
		}
	}
	return n
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
