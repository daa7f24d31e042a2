package planner

import (
	"strings"
	"testing"

	"ferry/hwprofile"
)

// chooseReq is a small LoRA request on the tiny config.
func chooseReq() TrainRequest {
	return TrainRequest{Batch: 1, Frames: 5, Height: 64, Width: 96, TextLen: 24, LoRARank: 4}
}

// short is the measured row: Wan 1.3B at 256x256, 17 frames
// (1280 tokens per sample), LoRA rank 32.
func short(t *testing.T) (*Profile, TrainRequest) {
	t.Helper()
	p, err := Builtin("wan2.1-t2v-1.3b")
	if err != nil {
		t.Fatal(err)
	}
	return p, TrainRequest{Batch: 1, Frames: 17, Height: 256, Width: 256, LoRARank: 32}
}

func reasonFor(t *testing.T, rs []TrainReason, saving string) TrainReason {
	t.Helper()
	for _, r := range rs {
		if strings.HasPrefix(r.Saving, saving) {
			return r
		}
	}
	t.Fatalf("no reason for %q in %v", saving, rs)
	return TrainReason{}
}

// TestChooseTrainingOffload: where the activations fit on the device,
// auto keeps them there and says the copies cost more than they save;
// where the budget needs them gone and checkpointing is ruled out, it
// offloads them.
func TestChooseTrainingOffload(t *testing.T) {
	p, req := short(t)
	hw := hwprofile.Default()
	none := TrainSearch{Checkpointing: []string{CheckpointNone}}
	_, free, reasons, err := ChooseTraining(p, hw, req, Budgets{}, none)
	if err != nil {
		t.Fatal(err)
	}
	if free.Knobs.ActivationTier != TierDevice {
		t.Fatalf("unlimited budget: activations on the %s, want the device", free.Knobs.ActivationTier)
	}
	r := reasonFor(t, reasons, "activation offload")
	if r.Chosen || !strings.Contains(r.Why, "cost more than they save") {
		t.Errorf("offload reason %q: want not chosen because its copies cost more than they save", r)
	}
	off, err := PredictTraining(p, hw, residentPlan(), req, TrainKnobs{Checkpointing: CheckpointNone, ActivationTier: TierHostT}, Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	if off.StepS <= free.StepS {
		t.Errorf("offloading predicted %.4f s, not slower than %.4f s: the reason would be wrong", off.StepS, free.StepS)
	}
	// A budget between the two peaks: only offloading fits.
	if off.PeakDeviceReservedBytes >= free.PeakDeviceReservedBytes {
		t.Fatalf("offloading peaks at %d, no less than %d", off.PeakDeviceReservedBytes, free.PeakDeviceReservedBytes)
	}
	b := Budgets{DeviceBytes: budgetFor(off.PeakDeviceReservedBytes)}
	if b.DeviceBytes >= free.PeakDeviceReservedBytes {
		t.Fatalf("the peaks with and without offloading (%d, %d) are within one rounding step", off.PeakDeviceReservedBytes, free.PeakDeviceReservedBytes)
	}
	none.Plan = residentPlan() // streaming the weights would fit too
	choice, pred, reasons, err := ChooseTraining(p, hw, req, b, none)
	if err != nil {
		t.Fatal(err)
	}
	if choice.Knobs.ActivationTier != TierHostT || !pred.Fits {
		t.Errorf("budget %d: chose %v (fits %v), want activations on the host", b.DeviceBytes, choice.Knobs, pred.Fits)
	}
	if r := reasonFor(t, reasons, "activation offload"); !r.Chosen {
		t.Errorf("offload reason %q: want chosen", r)
	}
}

// TestChooseTrainingNothingFits: a budget nothing fits gets one line
// naming the smallest budgets, and those budgets do fit.
func TestChooseTrainingNothingFits(t *testing.T) {
	p, req := short(t)
	hw := hwprofile.Default()
	b := Budgets{DeviceBytes: 256 << 20, HostBytes: 16 << 30}
	_, _, _, err := ChooseTraining(p, hw, req, b, TrainSearch{})
	e, ok := AsTrainInfeasible(err)
	if !ok {
		t.Fatalf("err = %v, want a TrainInfeasibleError", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "smallest") {
		t.Errorf("message %q: want one line naming the smallest budgets", msg)
	}
	if e.MinDeviceBytes <= b.DeviceBytes {
		t.Fatalf("smallest device budget %d is not above the one given %d", e.MinDeviceBytes, b.DeviceBytes)
	}
	b.DeviceBytes = e.MinDeviceBytes
	if _, pred, _, err := ChooseTraining(p, hw, req, b, TrainSearch{}); err != nil || !pred.Fits {
		t.Errorf("with the named device budget %d: %v (fits %v)", e.MinDeviceBytes, err, pred.Fits)
	}
	b.DeviceBytes = e.MinDeviceBytes - budgetStep
	if _, _, _, err := ChooseTraining(p, hw, req, b, TrainSearch{}); err == nil {
		t.Errorf("a device budget one step under the named %d still fits: it was not the smallest", e.MinDeviceBytes)
	}
}

// TestChooseTrainingAutoBatch: the batch auto picks fits, one more does
// not, under any plan and knobs.
func TestChooseTrainingAutoBatch(t *testing.T) {
	p := tinyTrainProfile(t, tinyTrainConfig())
	hw := hwprofile.Default()
	req := chooseReq()
	one, err := PredictTraining(p, hw, residentPlan(), req, TrainKnobs{}, Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	b := Budgets{DeviceBytes: 3 * one.PeakDeviceReservedBytes}
	choice, pred, _, err := ChooseTraining(p, hw, req, b, TrainSearch{AutoBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if choice.Batch < 2 || !pred.Fits || pred.Request.Batch != choice.Batch {
		t.Fatalf("auto batch %d (prediction's %d, fits %v) under 3x the batch-1 peak", choice.Batch, pred.Request.Batch, pred.Fits)
	}
	more := req
	more.Batch = choice.Batch + 1
	if _, _, _, err := ChooseTraining(p, hw, more, b, TrainSearch{}); err == nil {
		t.Errorf("batch %d also fits: auto picked %d", more.Batch, choice.Batch)
	}
}
