package cli

import (
	"flag"

	"ferry/dtype"
	"ferry/model/wan"
	"ferry/pipeline"
	"ferry/residency"
	"ferry/train"
)

// trainKnobs are ferry train's memory knobs: --checkpointing,
// --activation-tier, --ema-tier and --dtype.
type trainKnobs struct {
	checkpointing, activationTier, emaTier, dtypeName string
	mode                                              wan.Checkpointing
	dtype                                             dtype.DType
	// free names the knobs left to auto (--plan auto chooses them).
	free map[string]bool
}

func (k *trainKnobs) define(fs *flag.FlagSet) {
	fs.StringVar(&k.checkpointing, "checkpointing", "auto",
		"what each block keeps for its backward: none, selective (its input and self-attention output; the rest is recomputed) or block (its input; its forward is recomputed); auto: the planner's choice under --plan auto, none under a given plan")
	fs.StringVar(&k.activationTier, "activation-tier", "auto",
		"where kept activations wait between forward and backward: device, or host (copied back ahead of each block's backward); auto: the planner's choice under --plan auto, device under a given plan")
	fs.StringVar(&k.emaTier, "ema-tier", "auto",
		"where the EMA of --ema-decay lives: host or device; auto: the planner's choice under --plan auto, host under a given plan")
	fs.StringVar(&k.dtypeName, "dtype", "auto",
		"bf16 (products and saved activations in bf16; master weights, gradients and optimizer state fp32) or fp32; auto: bf16 where the CPU has AVX512-BF16 and ferry calibrate did not measure it slower than fp32 here")
}

// knobDefaults are what auto means under a given plan (the planner
// replaces them under --plan auto).
var knobDefaults = map[string]string{"checkpointing": "none", "activation-tier": "device", "ema-tier": "host"}

// check parses the knobs; auto becomes the given-plan default, and the
// knob is recorded as free for --plan auto to choose.
func (k *trainKnobs) check() error {
	for _, p := range []struct {
		v    *string
		name string
	}{{&k.checkpointing, "checkpointing"}, {&k.activationTier, "activation-tier"}, {&k.emaTier, "ema-tier"}} {
		if *p.v == "auto" {
			if k.free == nil {
				k.free = map[string]bool{}
			}
			k.free[p.name] = true
			*p.v = knobDefaults[p.name]
		}
	}
	mode, err := wan.ParseCheckpointing(k.checkpointing)
	if err != nil {
		return userf("--checkpointing %s: give none, selective, block or auto", k.checkpointing)
	}
	k.mode = mode
	if k.dtype, err = parseComputeDType(k.dtypeName); err != nil {
		return err
	}
	k.dtypeName = "fp32"
	if k.dtype == dtype.BF16 {
		k.dtypeName = "bf16"
	}
	if k.activationTier != "device" && k.activationTier != "host" {
		return userf("--activation-tier %s: give device, host or auto", k.activationTier)
	}
	if k.emaTier != "device" && k.emaTier != "host" {
		return userf("--ema-tier %s: give host, device or auto", k.emaTier)
	}
	return nil
}

// apply sets the net's training options from the knobs and returns the
// host activation store (nil with --activation-tier device).
func (k *trainKnobs) apply(opt *train.WanOptions, rt *pipeline.Runtime) *residency.HostActivations {
	opt.Train = wan.TrainOptions{Checkpointing: k.mode, DType: k.dtype}
	if k.activationTier != "host" {
		return nil
	}
	store := residency.NewHostActivations(rt.Device, rt.Host)
	opt.Train.Store = store
	return store
}

// trainMemory is the report's account of the memory knobs: what the
// tape held (measured, at the run's largest forward) and what each saving
// freed, measured or, where labelled, computed.
type trainMemory struct {
	// TapeBlocks is each transformer block's tape after its forward.
	TapeBlocks []wan.BlockTape `json:"tape_blocks"`
	// TapeTotal sums them; TapeDeviceBytes is Tape.Bytes after the
	// forward (what the tape held on the device, the embed and out
	// blocks' parts included, the host store's not).
	TapeTotal       wan.BlockTape `json:"tape_total"`
	TapeDeviceBytes int64         `json:"tape_device_bytes"`
	// CheckpointingFreedBytes is what checkpointing dropped: the saved
	// activations minus what the mode kept (each block's input is kept
	// apart from them); BF16FreedBytes what storing them bf16 saved.
	CheckpointingFreedBytes int64 `json:"checkpointing_freed_bytes"`
	BF16FreedBytes          int64 `json:"bf16_tape_freed_bytes"`
	// ActivationsOnHost is what the host store moved and waited for.
	ActivationsOnHost *residency.ActivationStats `json:"activations_on_host,omitempty"`
	// EMADeviceBytes is the device EMA's size (measured); EMAHostFreedBytes
	// what keeping it on the host frees on the device: exactly the
	// trainable bytes (float32).
	EMADeviceBytes    int64 `json:"ema_device_bytes,omitempty"`
	EMAHostFreedBytes int64 `json:"ema_host_freed_bytes,omitempty"`
	// AttentionWeightsComputed is what materialising the attention
	// probabilities would take at the run's shape (computed: ferry's
	// attention never does).
	AttentionWeightsComputed wan.AttentionWeights `json:"attention_weights_avoided_computed"`
}

// memory fills the report's memory section after the run.
func (k *trainKnobs) memory(net *train.WanNet, tr *train.Trainer, store *residency.HostActivations) trainMemory {
	st := net.TapeStats()
	tot := st.Total()
	m := trainMemory{TapeBlocks: st.Blocks, TapeTotal: tot, TapeDeviceBytes: st.Device,
		CheckpointingFreedBytes: tot.Saved - tot.Kept, BF16FreedBytes: tot.Kept - tot.Stored,
		AttentionWeightsComputed: net.Config().AttentionWeightBytes(st.Batch, st.Tokens, st.TextLen)}
	if store != nil {
		s := store.Stats()
		m.ActivationsOnHost = &s
	}
	if e := tr.EMA(); e != nil {
		var n int64
		for _, p := range net.Params() {
			n += 4 * int64(len(p.Data))
		}
		if e.OnDevice() {
			m.EMADeviceBytes = e.DeviceBytes()
		} else {
			m.EMAHostFreedBytes = n
		}
	}
	return m
}
