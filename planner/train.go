package planner

import (
	"fmt"
	"strings"

	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/lora"
	"ferry/model/wan"
	"ferry/residency"
)

// Training steps
//
// PredictTraining replays one training step the way wanscript.go replays a
// forward: trainscript.go mirrors model/wan's ForwardTrain and Backward
// allocation by allocation (each block's saved tensors, the backward's
// temporaries, the recomputation under checkpointing), trainsim.go drives
// them through the executor model in the training order (forward embed,
// blocks, out; backward out, blocks in reverse, embed) with
// residency's Component.Order semantics, applies Tape.stash/unstash
// (checkpointing, bf16 storage, the host activation store's Put/Get with
// one block prefetched), and lays out what lives across steps as train
// does: LoRA adapters and their gradients on the device; in full
// fine-tuning the host tier's masters, gradients and moments, working
// copies read from the masters, one block's gradient buffer during the
// backward, and each block invalidated after its update. The tests run the
// real step (planner) and ferry train (cli) and require the same device
// peak. ChooseTraining (trainchoose.go) searches placements and knobs.

// Activation checkpointing modes (TrainKnobs.Checkpointing).
const (
	CheckpointNone      = "none"
	CheckpointBlock     = "block"
	CheckpointSelective = "selective"
)

// Tiers of the saved activations and of the EMA (TrainKnobs).
const (
	TierDevice = "device"
	TierHostT  = "host"
)

// TrainKnobs are the memory savings of a training step (ferry train's
// --checkpointing, --activation-tier, --dtype, --ema-tier).
type TrainKnobs struct {
	Checkpointing  string      `json:"checkpointing"`
	ActivationTier string      `json:"activation_tier"`
	DType          dtype.DType `json:"-"`
	// EMATier is where the EMA lives when the request keeps one.
	EMATier string `json:"ema_tier"`
}

// DTypeName is the knob's --dtype value.
func (k TrainKnobs) DTypeName() string {
	if k.DType == dtype.BF16 {
		return "bf16"
	}
	return "fp32"
}

func (k TrainKnobs) String() string {
	return fmt.Sprintf("dtype=%s checkpointing=%s activations=%s ema=%s", k.DTypeName(), k.Checkpointing, k.ActivationTier, k.EMATier)
}

func (k TrainKnobs) normalized() TrainKnobs {
	if k.Checkpointing == "" {
		k.Checkpointing = CheckpointNone
	}
	if k.ActivationTier == "" {
		k.ActivationTier = TierDevice
	}
	if k.EMATier == "" {
		k.EMATier = TierHostT
	}
	if k.DType != dtype.BF16 {
		k.DType = dtype.F32
	}
	return k
}

func (k TrainKnobs) validate() error {
	switch k.Checkpointing {
	case CheckpointNone, CheckpointBlock, CheckpointSelective:
	default:
		return fmt.Errorf("planner: checkpointing %q: want none, block or selective", k.Checkpointing)
	}
	for _, t := range []struct{ what, v string }{{"activation tier", k.ActivationTier}, {"EMA tier", k.EMATier}} {
		if t.v != TierDevice && t.v != TierHostT {
			return fmt.Errorf("planner: %s %q: want device or host", t.what, t.v)
		}
	}
	return nil
}

// TrainRequest is the shape of one training step: the samples' size in
// pixels (as ferry cache encoded them; tokens follow from the VAE's and the
// transformer's strides), the micro-batch, and what trains.
type TrainRequest struct {
	Batch   int `json:"batch"`
	Frames  int `json:"frames"`
	Height  int `json:"height"`
	Width   int `json:"width"`
	TextLen int `json:"text_len"`
	// Full trains every transformer weight (fp32 master weights and AdamW
	// state on the host); otherwise LoRA adapters of LoRARank on the
	// Linears LoRATargets select (nil: lora.DefaultTargets).
	Full        bool     `json:"full,omitempty"`
	LoRARank    int      `json:"lora_rank,omitempty"`
	LoRATargets []string `json:"lora_targets,omitempty"`
	// EMA keeps an exponential moving average of the trained weights.
	EMA bool `json:"ema,omitempty"`
}

func (r TrainRequest) normalized() TrainRequest {
	if r.Batch == 0 {
		r.Batch = 1
	}
	if r.TextLen == 0 {
		r.TextLen = 512
	}
	if !r.Full && r.LoRARank == 0 {
		r.LoRARank = 16
	}
	if !r.Full && r.LoRATargets == nil {
		r.LoRATargets = lora.DefaultTargets
	}
	return r
}

// asRequest is the inference request of the same shape (for the strides).
func (r TrainRequest) asRequest() Request {
	return Request{Batch: r.Batch, Frames: r.Frames, Height: r.Height, Width: r.Width, TextLen: r.TextLen, Steps: 1}
}

// Validate checks the request against the model.
func (r TrainRequest) Validate(p *Profile) error {
	if err := r.asRequest().Validate(p); err != nil {
		return err
	}
	if !r.Full && r.LoRARank <= 0 {
		return fmt.Errorf("planner: LoRA rank %d: must be > 0", r.LoRARank)
	}
	return nil
}

// Tokens is the transformer's sequence length per sample.
func (r TrainRequest) Tokens(p *Profile) int { return r.asRequest().tokens(p) }

// TrainPrediction is what a training step is expected to cost. Its JSON
// is the train report's `predicted` object.
type TrainPrediction struct {
	Model   string       `json:"model"`
	Plan    string       `json:"plan"`
	Request TrainRequest `json:"request"`
	Knobs   TrainKnobs   `json:"knobs"`
	DType   string       `json:"dtype"`
	Budgets Budgets      `json:"budgets"`
	Tokens  int          `json:"tokens"`
	Layers  int          `json:"layers"`
	// Placement of the transformer's blocks.
	Placement  residency.Placement `json:"placement"`
	Tier       residency.Tier      `json:"tier,omitempty"`
	Prefetch   int                 `json:"prefetch,omitempty"`
	Persistent int                 `json:"persistent,omitempty"`

	PeakDeviceBytes         int64 `json:"peak_device_bytes"`
	PeakDeviceReservedBytes int64 `json:"peak_device_reserved_bytes"`
	PeakHostBytes           int64 `json:"peak_host_bytes"`
	PeakRSSBytes            int64 `json:"peak_rss_bytes"`

	// What the peaks are made of.
	WeightDeviceBytes int64 `json:"weight_device_bytes"`
	TrainableBytes    int64 `json:"trainable_bytes"`
	// SavedBytes is what the forward keeps per block for the backward
	// (batch included), before checkpointing drops it.
	SavedBytes int64 `json:"saved_bytes_per_block"`
	// InputBytes is one block's input (all block checkpointing keeps).
	InputBytes int64 `json:"input_bytes_per_block"`
	// AttentionWeightsBytes is what materialised [L, L] attention
	// probabilities would take (per head and sample summed): saved by
	// never materialising them.
	AttentionWeightsBytes int64 `json:"attention_weights_bytes"`
	HostStateBytes        int64 `json:"host_state_bytes"`

	StepS     float64 `json:"step_s"`
	ForwardS  float64 `json:"forward_s"`
	BackwardS float64 `json:"backward_s"`
	// RecomputeS is the backward's recomputation under checkpointing.
	RecomputeS float64 `json:"recompute_s"`
	// Copies: weights streamed (forward, backward), stalls waiting for them,
	// activation offload and the host optimizer.
	WeightCopyS      float64 `json:"weight_copy_s"`
	StallForwardS    float64 `json:"stall_forward_s"`
	StallBackwardS   float64 `json:"stall_backward_s"`
	ActivationCopyS  float64 `json:"activation_copy_s"`
	ActivationStallS float64 `json:"activation_stall_s"`
	OptimizerS       float64 `json:"optimizer_s"`
	SamplesPerSecond float64 `json:"samples_per_s"`
	Fits             bool    `json:"fits"`
	Problem          string  `json:"problem,omitempty"`
}

// PredictTraining simulates one training step of req under plan (the
// transformer's placement) and knobs on hw within the budgets. A plan
// that does not fit comes back with Fits false and the reason; errors are
// for invalid input.
func PredictTraining(p *Profile, hw hwprofile.Profile, plan *residency.Plan, req TrainRequest, k TrainKnobs, b Budgets) (TrainPrediction, error) {
	req, k = req.normalized(), k.normalized()
	if err := req.Validate(p); err != nil {
		return TrainPrediction{}, err
	}
	if err := k.validate(); err != nil {
		return TrainPrediction{}, err
	}
	if plan == nil {
		plan = &residency.Plan{Name: "resident"}
	}
	if err := plan.Validate(); err != nil {
		return TrainPrediction{}, err
	}
	if err := hw.Validate(); err != nil {
		return TrainPrediction{}, err
	}
	if p.Component(Transformer) == nil {
		return TrainPrediction{}, fmt.Errorf("planner: %s has no transformer to train", p.Name)
	}
	pred := simulateTraining(p, hw, plan, req, k, b)
	pred.Fits = true
	if pred.Problem = pred.overBudget(); pred.Problem != "" {
		pred.Fits = false
	} else if tight := (Budgets{DeviceBytes: effective(b.DeviceBytes), HostBytes: effective(b.HostBytes)}); tight.DeviceBytes != b.DeviceBytes || tight.HostBytes != b.HostBytes {
		check := simulateTraining(p, hw, plan, req, k, tight)
		if check.Problem != "" {
			pred.Fits, pred.Problem = false, "within 2% of the budget: "+check.Problem
		}
	}
	return pred, nil
}

func (pr TrainPrediction) overBudget() string {
	return overBudget(pr.Problem, pr.Budgets, pr.PeakDeviceReservedBytes, pr.PeakHostBytes, pr.PeakRSSBytes)
}

// DescribePlacement is a short summary of the transformer's placement.
func (pr TrainPrediction) DescribePlacement() string {
	s := string(pr.Placement)
	if pr.Placement == residency.Stream {
		s += fmt.Sprintf(" k=%d n=%d", pr.Prefetch, pr.Persistent)
	}
	if pr.Placement == residency.Stream || pr.Placement == residency.Onload {
		s += " from " + string(pr.Tier)
	}
	return s
}

// adaptedNames are the block-relative Linear names ("attn1.to_q") the
// targets select in a block.
func adaptedNames(p *Profile, targets []string) map[string]bool {
	names, _ := p.Wan.LinearShapes()
	out := map[string]bool{}
	for _, n := range lora.Targets(names, targets) {
		if rest, ok := strings.CutPrefix(n, "blocks.0."); ok {
			out[rest] = true
		}
	}
	return out
}

// NewTrainProfile profiles a Wan transformer alone, as training uses it:
// its blocks' parameters stored in storage (the checkpoint's dtype), GEMM
// weights marked for a bf16 device copy, and Wan 2.1's VAE strides for
// the sample sizes.
func NewTrainProfile(name string, cfg wan.Config, storage dtype.DType) (*Profile, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("planner: %s: %w", name, err)
	}
	tc := ComponentFromParams(Transformer, storage, cfg.Params())
	matrix, err := residency.MatrixWeights(wan.New(cfg).Component(Transformer, nil))
	if err != nil {
		return nil, fmt.Errorf("planner: %s: %w", name, err)
	}
	tc.MarkMatrices(cfg.Params(), matrix)
	return &Profile{Name: name, Compute: dtype.F32, Wan: cfg, Coder: Wan21VAE(), Components: []*ComponentProfile{tc}}, nil
}
