package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"ferry/dataset"
	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/model/wan"
	"ferry/planner"
	"ferry/residency"
	"ferry/train"
)

// ferry train's planning: --plan auto (the default) and --batch-size auto
// ask planner.ChooseTraining for the fastest placement and knob set that
// fit --device-mem and --host-mem (knobs given on the command line stay
// as given), and the report carries the planner's prediction for the run
// as `predicted`, beside `measured`.

// batchFlag is --batch-size: a number, or auto.
type batchFlag struct {
	n    *int
	auto *bool
}

func (b batchFlag) String() string {
	if b.auto != nil && *b.auto {
		return "auto"
	}
	if b.n == nil {
		return "1"
	}
	return strconv.Itoa(*b.n)
}

func (b batchFlag) Set(s string) error {
	n, auto, ok := parseBatch(s)
	if !ok {
		return errors.New("want a positive number or auto")
	}
	if !auto {
		*b.n = n
	}
	*b.auto = auto
	return nil
}

// parseBatch reads a --batch-size: a positive number, or auto.
func parseBatch(s string) (n int, auto, ok bool) {
	if strings.EqualFold(s, "auto") {
		return 0, true, true
	}
	n, err := strconv.Atoi(s)
	return n, false, err == nil && n > 0
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// sampleShape is the largest latent [C, F, H, W] the run trains on (the
// fixed batch's, or the cache's largest bucket's) and the text length; a
// fixed batch also sets the batch size.
func sampleShape(f *trainFlags) ([]int, int, error) {
	if f.fixedBatch != "" {
		b, err := readFixedBatch(f.fixedBatch)
		if err != nil {
			return nil, 0, err
		}
		f.batch = b.Samples()
		return b.LatentShape[1:], b.ContextShape[1], nil
	}
	c, err := dataset.Open(f.data)
	if err != nil {
		return nil, 0, userf("--data: %v", err)
	}
	var best []int
	for _, b := range c.Buckets() {
		if s := b.LatentShape; len(s) == 4 && (best == nil || s[1]*s[2]*s[3] > best[1]*best[2]*best[3]) {
			best = s
		}
	}
	if best == nil {
		return nil, 0, userf("--data %s holds no samples", f.data)
	}
	return best, train.TextLen, nil
}

// trainPlanning is what the planner needs of a run.
func trainPlanning(f *trainFlags, cfg wan.Config) (*planner.Profile, hwprofile.Profile, planner.TrainRequest, planner.Budgets, error) {
	var req planner.TrainRequest
	shape, textLen, err := sampleShape(f)
	if err != nil {
		return nil, hwprofile.Profile{}, req, planner.Budgets{}, err
	}
	prof, err := planner.NewTrainProfile(f.model, cfg, dtype.BF16)
	if err != nil {
		return nil, hwprofile.Profile{}, req, planner.Budgets{}, asUser(err)
	}
	prof.Compute = f.knobs.dtype
	hw, _, err := hwprofile.LoadOrDefault("")
	if err != nil {
		return nil, hwprofile.Profile{}, req, planner.Budgets{}, asUser(fmt.Errorf("%w (run ferry calibrate again)", err))
	}
	noteHardware(hw)
	// Latent [C, F, H, W] back to the pixels the planner's strides take.
	req = planner.TrainRequest{Batch: f.batch, Frames: (shape[1]-1)*4 + 1, Height: shape[2] * 8, Width: shape[3] * 8, TextLen: textLen,
		Full: f.full, LoRARank: f.loraRank, LoRATargets: f.targets, EMA: f.emaDecay > 0}
	b := planningBudgets(f.deviceMem.bytes, f.hostMem.bytes)
	if f.hostMem.bytes == 0 {
		b.HostBytes = 0 // ferry train's host tier is unlimited unless --host-mem says
	}
	return prof, hw, req, b, nil
}

// trainSearch fixes the knobs the command line gave a value other than
// auto.
func trainSearch(f *trainFlags) planner.TrainSearch {
	s := planner.TrainSearch{DType: []dtype.DType{f.knobs.dtype}}
	if !f.knobs.free["checkpointing"] {
		s.Checkpointing = []string{f.knobs.checkpointing}
	}
	if !f.knobs.free["activation-tier"] {
		s.ActivationTier = []string{f.knobs.activationTier}
	}
	if !f.knobs.free["ema-tier"] {
		s.EMATier = []string{f.knobs.emaTier}
	}
	return s
}

// chooseTrainPlan is --plan auto: the fastest placement and knob set that
// fit; it sets the knobs the command line left free to the chosen ones.
func chooseTrainPlan(f *trainFlags, cfg wan.Config) (*residency.Plan, error) {
	prof, hw, req, b, err := trainPlanning(f, cfg)
	if err != nil {
		return nil, err
	}
	choice, _, _, err := planner.ChooseTraining(prof, hw, req, b, trainSearch(f))
	if err != nil {
		return nil, trainPlanError(err)
	}
	k := choice.Knobs
	f.knobs.checkpointing, f.knobs.activationTier, f.knobs.emaTier = k.Checkpointing, k.ActivationTier, k.EMATier
	if err := f.knobs.check(); err != nil {
		return nil, err
	}
	plan := choice.Plan
	// The planner names the transformer component as train does.
	if cp, ok := plan.Components[planner.Transformer]; ok && planner.Transformer != train.ComponentName {
		plan.Components = map[string]residency.ComponentPlan{train.ComponentName: cp}
	}
	plan.Name = "auto (" + plan.Name + ")"
	return plan, nil
}

// chooseTrainBatch is --batch-size auto: the largest micro-batch some
// placement and knob set fit (the plan is chosen again for it when the
// run starts).
func chooseTrainBatch(f *trainFlags, cfg wan.Config) error {
	if f.fixedBatch != "" {
		return userf("--batch-size auto picks a batch for --data; a --fixed-batch holds its own")
	}
	prof, hw, req, b, err := trainPlanning(f, cfg)
	if err != nil {
		return err
	}
	s := trainSearch(f)
	s.AutoBatch = true
	choice, _, _, err := planner.ChooseTraining(prof, hw, req, b, s)
	if err != nil {
		return trainPlanError(err)
	}
	f.batch = choice.Batch
	return nil
}

// trainPlanError makes a budget nothing fits the user's one line.
func trainPlanError(err error) error {
	if _, ok := planner.AsTrainInfeasible(err); ok {
		return userf("%v (raise --device-mem/--host-mem, or lower --batch-size)", err)
	}
	return asUser(err)
}

// predictTrainRun is the planner's prediction for the run as it was set
// up (plan and knobs resolved), for the report; nil when it cannot be made.
func predictTrainRun(f *trainFlags, cfg wan.Config) *planner.TrainPrediction {
	prof, hw, req, b, err := trainPlanning(f, cfg)
	if err != nil || f.stream.plan == nil {
		return nil
	}
	plan := &residency.Plan{Name: f.stream.plan.Name, Components: map[string]residency.ComponentPlan{
		planner.Transformer: f.stream.plan.For(train.ComponentName)}}
	k := planner.TrainKnobs{Checkpointing: f.knobs.checkpointing, ActivationTier: f.knobs.activationTier, DType: f.knobs.dtype, EMATier: f.knobs.emaTier}
	pred, err := planner.PredictTraining(prof, hw, plan, req, k, b)
	if err != nil {
		return nil
	}
	return &pred
}
