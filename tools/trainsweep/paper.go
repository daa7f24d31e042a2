package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// paperBudgets are the device budgets of the paper-scale table.
var paperBudgets = []string{"24GiB", "16GiB", "12GiB"}

// paperRow is one row of savings at paper scale: the planner's choice
// with the row's knobs fixed.
type paperRow struct {
	name    string
	fixed   []string // ferry plan --train flags
	results map[string]paperResult
}

type paperResult struct {
	batch, swapped            int
	device, host, stepS, sps  float64
	placement, knobs, refused string
}

// paperRows are the sweep's rows as ferry plan --train flags (the
// baseline's resident weights and no checkpointing do not fit 14B at
// these budgets: the table says what they would need).
func paperRows() []*paperRow {
	base := []string{"--dtype", "fp32", "--checkpointing", "none", "--activation-tier", "device", "--ema-tier", "device", "--plan", "resident"}
	with := func(pairs ...string) []string {
		out := append([]string(nil), base...)
		for i := 0; i < len(pairs); i += 2 {
			for j := 0; j < len(out); j += 2 {
				if out[j] == pairs[i] {
					out[j+1] = pairs[i+1]
				}
			}
		}
		return out
	}
	return []*paperRow{
		{name: "baseline", fixed: base},
		{name: "+bf16", fixed: with("--dtype", "bf16")},
		{name: "+block checkpointing", fixed: with("--dtype", "bf16", "--checkpointing", "block")},
		{name: "+EMA on host", fixed: with("--dtype", "bf16", "--checkpointing", "block", "--ema-tier", "host")},
		{name: "+activation offload", fixed: with("--dtype", "bf16", "--checkpointing", "block", "--ema-tier", "host", "--activation-tier", "host")},
		{name: "+streamed weights", fixed: with("--dtype", "bf16", "--checkpointing", "block", "--ema-tier", "host", "--activation-tier", "host", "--plan", "stream")},
		{name: "auto", fixed: []string{"--dtype", "bf16"}},
	}
}

// paper writes ferry plan --train for Wan-14B at 480x832x81: per budget
// the auto plan in full, and the table of savings.
func paper(o options) error {
	common := []string{"plan", "--train", "--arch", "wan2.1-t2v-14b", "--width", "832", "--height", "480", "--frames", "81",
		"--lora-rank", fmt.Sprint(o.loraRank), "--host-mem", o.paperHost}
	if o.emaDecay > 0 {
		common = append(common, "--ema")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Training plans at paper scale: Wan2.1-T2V-14B, 832x480, 81 frames, LoRA rank %d\n\n", o.loraRank)
	fmt.Fprintf(&b, "Predicted by `ferry plan --train` on %s, %s, hardware profile %s (the step times are this CPU's, not a GPU's). "+
		"Host budget %s, an EMA kept (`--ema`). No run: a 14B training step does not fit this machine.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), hwSource(), o.paperHost)
	rs := paperRows()
	for _, dev := range paperBudgets {
		args := append(append([]string(nil), common...), "--device-mem", dev, "--batch-size", "auto", "--dtype", "bf16")
		out, _ := exec.Command(o.bin, args...).CombinedOutput()
		fmt.Fprintf(&b, "## %s device\n\n```sh\n$ %s %s\n%s```\n\n", dev, o.bin, strings.Join(args, " "), out)
		for _, r := range rs {
			if r.results == nil {
				r.results = map[string]paperResult{}
			}
			r.results[dev] = planJSON(o.bin, append(append(append([]string(nil), common...), "--device-mem", dev, "--batch-size", "auto"), r.fixed...))
			fmt.Fprintf(os.Stderr, "%s at %s: %+v\n", r.name, dev, r.results[dev])
		}
	}
	b.WriteString("## Savings added in turn (largest batch that fits, `--batch-size auto`)\n\n")
	b.WriteString("| row | flags | " + strings.Join(paperBudgets, " | ") + " |\n|---|---|" + strings.Repeat("---|", len(paperBudgets)) + "\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | `%s` |", r.name, strings.Join(r.fixed, " "))
		for _, dev := range paperBudgets {
			res := r.results[dev]
			if res.refused != "" {
				fmt.Fprintf(&b, " %s |", strings.ReplaceAll(res.refused, "|", "/"))
				continue
			}
			fmt.Fprintf(&b, " batch %d, %s (%d blocks swapped), %s; device %.1f GiB, host %.1f GiB, step %.1f s |",
				res.batch, res.placement, res.swapped, res.knobs, res.device, res.host, res.stepS)
		}
		b.WriteString("\n")
	}
	b.WriteString(anchors)
	return writeOut(o.paperOut, b.String())
}

// anchors is what the reference trainers say about the same model (their
// own documentation; a GPU, fp8 base weights allowed).
const anchors = `
## Anchors

- musubi-tuner (kohya-ss/musubi-tuner, README "Hardware Requirements"): "VRAM: 12GB or more recommended for image
  training, 24GB or more for video training"; docs/wan.md: "fp8 support and memory reduction by block swap: ...
  training with 720x1280 images with 24GB VRAM". Its 14B examples combine ` + "`--fp8_base`" + ` (base weights in fp8: half of
  ferry's bf16 blocks), ` + "`--gradient_checkpointing`" + ` and ` + "`--blocks_to_swap N`" + ` (N of the 40 blocks kept in host RAM).
- The plans above keep bf16 base weights: a block costs twice fp8's bytes on the device, streamed or not. The planner's smallest device budget for this shape is the figure to set beside "24GB or more".
`

// planJSON runs ferry plan --train --json and reads its choice.
func planJSON(bin string, args []string) paperResult {
	out, err := exec.Command(bin, append(args, "--json")...).CombinedOutput()
	if err != nil {
		s := strings.TrimSpace(string(out))
		s = strings.TrimPrefix(s, "ferry plan: ")
		return paperResult{refused: shortInfeasible(s)}
	}
	var v struct {
		Choice struct {
			Batch int `json:"batch"`
			Knobs struct {
				Checkpointing  string `json:"checkpointing"`
				ActivationTier string `json:"activation_tier"`
				EMATier        string `json:"ema_tier"`
			} `json:"knobs"`
		} `json:"choice"`
		Predicted struct {
			Reserved   int64   `json:"peak_device_reserved_bytes"`
			Host       int64   `json:"peak_host_bytes"`
			StepS      float64 `json:"step_s"`
			SPS        float64 `json:"samples_per_s"`
			Placement  string  `json:"placement"`
			DType      string  `json:"dtype"`
			Tier       string  `json:"tier"`
			Prefetch   int     `json:"prefetch"`
			Persistent int     `json:"persistent"`
		} `json:"predicted"`
		Swapped int `json:"blocks_swapped"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return paperResult{refused: "unreadable JSON: " + err.Error()}
	}
	p := v.Predicted
	place := p.Placement
	if place == "stream" {
		place = fmt.Sprintf("stream k=%d n=%d from %s", p.Prefetch, p.Persistent, p.Tier)
	}
	k := v.Choice.Knobs
	return paperResult{batch: v.Choice.Batch, swapped: v.Swapped, device: gib(p.Reserved), host: gib(p.Host), stepS: p.StepS, sps: p.SPS,
		placement: place, knobs: fmt.Sprintf("%s, ckpt %s, act %s, EMA %s", v.Predicted.DType, k.Checkpointing, k.ActivationTier, k.EMATier)}
}

// shortInfeasible keeps what a refusal says the budgets would need.
func shortInfeasible(s string) string {
	if i := strings.Index(s, "the smallest that would fit is "); i >= 0 {
		rest := s[i+len("the smallest that would fit is "):]
		if j := strings.Index(rest, " (over"); j >= 0 {
			rest = rest[:j]
		}
		return "none fits; needs " + rest
	}
	return oneLine(s)
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }
