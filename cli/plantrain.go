package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"ferry/dtype"
	"ferry/lora"
	"ferry/planner"
	"ferry/residency"
	"ferry/tensor"
)

// trainPlanFlags are `ferry plan --train`'s own flags.
type trainPlanFlags struct {
	on                           bool
	arch                         string
	batch                        string
	loraRank                     int
	loraTargets                  string
	full, ema                    bool
	checkpointing, actTier, emaT string
}

func (t *trainPlanFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&t.on, "train", false, "plan a training step (ferry train) instead of a generation")
	fs.StringVar(&t.arch, "arch", "", "with --train: a built-in architecture instead of --model ("+joinNames(planner.BuiltinNames())+")")
	fs.StringVar(&t.batch, "batch-size", "1", "with --train: samples per micro-batch, or auto (the largest that fits)")
	fs.IntVar(&t.loraRank, "lora-rank", 16, "with --train: LoRA rank")
	fs.StringVar(&t.loraTargets, "lora-targets", strings.Join(lora.DefaultTargets, ","), "with --train: Linears the LoRA adapts")
	fs.BoolVar(&t.full, "full", false, "with --train: full fine-tuning instead of LoRA")
	fs.BoolVar(&t.ema, "ema", false, "with --train: the run keeps an EMA (--ema-decay > 0)")
	fs.StringVar(&t.checkpointing, "checkpointing", "auto", "with --train: none, block, selective or auto")
	fs.StringVar(&t.actTier, "activation-tier", "auto", "with --train: device, host or auto")
	fs.StringVar(&t.emaT, "ema-tier", "auto", "with --train: host, device or auto")
}

// request builds the training request from the shape flags.
func (t *trainPlanFlags) request(frames, height, width, textLen int) (planner.TrainRequest, bool, error) {
	req := planner.TrainRequest{Frames: frames, Height: height, Width: width, TextLen: textLen, Full: t.full, EMA: t.ema}
	n, auto, ok := parseBatch(t.batch)
	if !ok {
		return req, false, userf("--batch-size %q: want a positive number or auto", t.batch)
	}
	req.Batch = 1
	if !auto {
		req.Batch = n
	}
	if !t.full {
		if t.loraRank <= 0 {
			return req, false, userf("--lora-rank %d: must be > 0", t.loraRank)
		}
		req.LoRARank = t.loraRank
		req.LoRATargets = splitList(t.loraTargets)
	}
	return req, auto, nil
}

// search turns the knob flags into what ChooseTraining may choose.
func (t *trainPlanFlags) search(dt dtype.DType, auto bool) (planner.TrainSearch, error) {
	s := planner.TrainSearch{DType: []dtype.DType{dt}, AutoBatch: auto}
	one := func(flagName, v string, allowed ...string) ([]string, error) {
		if v == "auto" {
			return nil, nil
		}
		for _, a := range allowed {
			if v == a {
				return []string{v}, nil
			}
		}
		return nil, userf("--%s %q: want %s or auto", flagName, v, strings.Join(allowed, ", "))
	}
	var err error
	if s.Checkpointing, err = one("checkpointing", t.checkpointing, planner.CheckpointNone, planner.CheckpointBlock, planner.CheckpointSelective); err != nil {
		return s, err
	}
	if s.ActivationTier, err = one("activation-tier", t.actTier, planner.TierDevice, planner.TierHostT); err != nil {
		return s, err
	}
	if s.EMATier, err = one("ema-tier", t.emaT, planner.TierHostT, planner.TierDevice); err != nil {
		return s, err
	}
	return s, nil
}

// planTrain is `ferry plan --train`: it predicts the given plan and knobs
// or chooses them, and prints the prediction and why each saving was or
// was not chosen.
func planTrain(e *env, t *trainPlanFlags, pf *planFlags, model string, frames, height, width, textLen int, b planner.Budgets, asJSON bool) error {
	spec := model
	if t.arch != "" {
		if model != "" {
			return userf("give --model or --arch, not both")
		}
		spec = t.arch
	}
	if spec == "" {
		return userf("--model DIR or --arch NAME is required (one of %s)", joinNames(planner.BuiltinNames()))
	}
	prof, err := profileOf(spec)
	if err != nil {
		return err
	}
	req, auto, err := t.request(frames, height, width, textLen)
	if err != nil {
		return err
	}
	if err := req.Validate(prof); err != nil {
		return asUser(err)
	}
	hw, err := pf.hardware(prof)
	if err != nil {
		return err
	}
	dt, err := pf.computeDType()
	if err != nil {
		return err
	}
	s, err := t.search(dt, auto)
	if err != nil {
		return err
	}
	if pf.spec != "" && pf.spec != "auto" {
		if s.Plan, err = resolvePlan(pf.spec); err != nil {
			return err
		}
	}
	choice, pred, reasons, err := planner.ChooseTraining(prof, hw, req, b, s)
	if err != nil {
		return asUser(err)
	}
	if asJSON {
		return writeTrainPlanJSON(e.stdout, choice, pred, reasons)
	}
	printTrainPlan(e.stdout, prof, choice, pred, reasons)
	return nil
}

func writeTrainPlanJSON(w io.Writer, c planner.TrainChoice, p planner.TrainPrediction, r []planner.TrainReason) error {
	out := struct {
		Choice     planner.TrainChoice     `json:"choice"`
		Predicted  planner.TrainPrediction `json:"predicted"`
		Reasons    []planner.TrainReason   `json:"reasons"`
		SwappedOut int                     `json:"blocks_swapped"`
	}{c, p, r, swappedBlocks(p, c.Plan)}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// swappedBlocks is how many transformer blocks the plan does not keep on
// the device (musubi-tuner's --blocks_to_swap counts these): persistent
// counts the embed block first.
func swappedBlocks(p planner.TrainPrediction, plan *residency.Plan) int {
	if p.Placement != residency.Stream {
		return 0
	}
	n := plan.For(planner.Transformer).Persistent
	return max(0, p.Layers-max(0, n-1))
}

func printTrainPlan(w io.Writer, prof *planner.Profile, c planner.TrainChoice, p planner.TrainPrediction, reasons []planner.TrainReason) {
	mode := fmt.Sprintf("LoRA rank %d", p.Request.LoRARank)
	if p.Request.Full {
		mode = "full fine-tuning"
	}
	fmt.Fprintf(w, "training %s: %dx%dx%d (%d tokens per sample), batch %d, %s\n", prof.Name, p.Request.Height, p.Request.Width, p.Request.Frames, p.Tokens, c.Batch, mode)
	swap := ""
	if n := swappedBlocks(p, c.Plan); n > 0 {
		swap = fmt.Sprintf(" (%d of %d blocks swapped)", n, p.Layers)
	}
	fmt.Fprintf(w, "plan: %s%s; %s\n", p.DescribePlacement(), swap, planner.DescribeTrainKnobs(c.Knobs, p.Request.EMA))
	budget := func(n int64) string {
		if n <= 0 {
			return "unlimited"
		}
		return tensor.FormatBytes(n)
	}
	fmt.Fprintf(w, "predicted: device peak %s (budget %s), host peak %s (budget %s), RSS %s\n",
		tensor.FormatBytes(p.PeakDeviceReservedBytes), budget(p.Budgets.DeviceBytes), tensor.FormatBytes(p.PeakHostBytes), budget(p.Budgets.HostBytes), tensor.FormatBytes(p.PeakRSSBytes))
	fmt.Fprintf(w, "step %.2f s (%.2f samples/s): forward %.2f, backward %.2f (recompute %.2f), weight stalls %.2f/%.2f, activation copies %.2f, optimizer %.2f\n",
		p.StepS, p.SamplesPerSecond, p.ForwardS, p.BackwardS, p.RecomputeS, p.StallForwardS, p.StallBackwardS, p.ActivationCopyS, p.OptimizerS)
	fmt.Fprintf(w, "memory: weights on the device %s, trainable %s, per block saved %s (input %s), host state %s\n",
		tensor.FormatBytes(p.WeightDeviceBytes), tensor.FormatBytes(p.TrainableBytes), tensor.FormatBytes(p.SavedBytes), tensor.FormatBytes(p.InputBytes), tensor.FormatBytes(p.HostStateBytes))
	for _, r := range reasons {
		fmt.Fprintf(w, "  %s\n", r)
	}
}
