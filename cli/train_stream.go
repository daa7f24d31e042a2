package cli

import (
	"flag"
	"strings"

	"ferry/model/wan"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
	"ferry/train"
)

// trainStream are ferry train's residency flags: --plan places the
// transformer's weights (frozen with LoRA, the working copies of the
// host-tier master weights with --full) as generate places them, and
// --trace writes the run's Chrome trace. --device-mem and --host-mem are
// the budgets, hard caps on both.
type trainStream struct {
	spec, trace string
	plan        *residency.Plan
	full        bool // --full: the weights come from the host master copy
}

func (s *trainStream) define(fs *flag.FlagSet) {
	fs.StringVar(&s.spec, "plan", "", "where the transformer's weights live: a preset ("+strings.Join(planner.PresetNames(), ", ")+") or a plan file (.json/.yaml); default auto")
	fs.StringVar(&s.trace, "trace", "", "write a Chrome trace (JSON) here: each step's forward and backward, compute, copies and stalls")
}

// resolve builds the plan --plan asks for. Presets that size themselves
// for an inference request (vram-limit) are refused: a training step is
// not one. With --full the weights' copy between uses is the master copy
// in the host tier that AdamW updates (train.MasterPlan).
func (s *trainStream) resolve(f *trainFlags, cfg wan.Config) (*residency.Plan, error) {
	var plan *residency.Plan
	switch spec := strings.ToLower(s.spec); {
	case spec == "" || spec == "auto":
		p, err := chooseTrainPlan(f, cfg) // the planner's training search
		if err != nil {
			return nil, err
		}
		plan = p
	case spec == "vram-limit":
		return nil, userf("--plan vram-limit sizes a plan for an inference request; for training give resident, onload, stream, stream-disk, sequential-offload, group-offload or a plan file")
	default:
		p, err := resolvePlan(s.spec)
		if err != nil {
			return nil, err
		}
		plan = p
	}
	cp := plan.For(train.ComponentName)
	if cp.Placement == residency.Host {
		return nil, userf("--plan %s computes the transformer on the host; training computes it on the device (give resident, onload or stream)", planName(plan))
	}
	if f.full {
		plan = train.MasterPlan(plan)
	}
	s.plan, s.full = plan, f.full
	return plan, nil
}

// residency is the net's executor side over the runtime.
func (s *trainStream) residency(rt *pipeline.Runtime) *train.Residency {
	return &train.Residency{Exec: rt.Exec, Host: rt.Host, Trace: rt.Trace}
}

// trainStreaming is the report's account of the weights' residency: the
// plan, and the streaming stalls and copy time of the forward and the
// backward passes (totals over the run and means per step).
type trainStreaming struct {
	Plan          *residency.Plan `json:"plan"`
	Placement     string          `json:"placement"`
	Forward       streamPhase     `json:"forward"`
	Backward      streamPhase     `json:"backward"`
	BytesCopied   int64           `json:"bytes_copied"`
	BytesReadDisk int64           `json:"bytes_read_disk"`
	Loads         int             `json:"loads"`
}

// streamPhase is one pass's streaming: CopyWait is the compute stalled
// waiting for weights, Copy the copy worker's time moving them (copies
// that started during the pass).
type streamPhase struct {
	CopyWaitS        float64 `json:"copy_wait_s"`
	CopyS            float64 `json:"copy_s"`
	Loads            int     `json:"loads"`
	CopyWaitPerStepS float64 `json:"copy_wait_per_step_s"`
	CopyPerStepS     float64 `json:"copy_per_step_s"`
}

// streaming reads the executor's figures after steps optimizer steps.
func (s *trainStream) streaming(rt *pipeline.Runtime, steps int) trainStreaming {
	st := rt.Exec.Stats()
	out := trainStreaming{Plan: s.plan, Placement: placementText(s.plan.For(train.ComponentName)),
		BytesCopied: st.BytesCopied, BytesReadDisk: st.BytesReadDisk, Loads: st.Loads}
	if s.full {
		// The source of full fine-tuning's working copies is the master
		// copy in the host tier, whatever the plan's tier says.
		out.Placement = strings.Replace(out.Placement, "from disk", "from the host master weights", 1)
	}
	phase := func(name string) streamPhase {
		p := st.Phases[name]
		sp := streamPhase{CopyWaitS: p.CopyWait.Seconds(), CopyS: p.CopyTime.Seconds(), Loads: p.Loads}
		if steps > 0 {
			sp.CopyWaitPerStepS, sp.CopyPerStepS = sp.CopyWaitS/float64(steps), sp.CopyS/float64(steps)
		}
		return sp
	}
	out.Forward, out.Backward = phase(train.PhaseForward), phase(train.PhaseBackward)
	return out
}
