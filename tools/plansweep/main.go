// Command plansweep checks the planner against real runs: for each device
// budget and plan (presets, auto) it runs `ferry generate --report` in a
// fresh process and prints predicted beside measured peak device bytes and
// total time as a Markdown table, then a summary per budget: the plan auto
// chose, and the fastest preset that ran under the same budget.
//
// With --repeat N every run is done N times in rounds (all budgets and plans
// once, then again), so machine noise hits every plan alike; times are the
// medians and "spread" is (max-min)/median of a plan's runs.
//
// Each run starts --gap after the last one that ran (a refused plan frees
// nothing), so that it finds its fresh memory cold, as a run started by
// hand does: on a VM whose balloon reports free memory to the host, memory
// a run freed a moment ago is cheap to touch again, and some seconds later
// it is not (see hwprofile's first-touch probe). Here 6 s after a process
// freed 8 GiB, 5.5 GiB of it were still cheap; after 30 s none was.
//
//	go run ./tools/plansweep --model .cache/wan-tiny --shape 64x64x5 --steps 4 \
//	    --plans auto,level0,level1,level2,level3,stream --budgets 0,48MiB,4MiB --repeat 3
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

type component struct {
	Placement string `json:"placement"`
	Tier      string `json:"tier"`
	Prefetch  int    `json:"prefetch"`
	Persist   int    `json:"persistent"`
}

type report struct {
	Plan struct {
		Name       string               `json:"name"`
		Components map[string]component `json:"components"`
		Run        struct {
			FFNChunk int    `json:"ffn_chunk"`
			CFG      string `json:"cfg"`
			VAETile  int    `json:"vae_tile"`
		} `json:"run"`
	} `json:"plan"`
	Budget struct {
		Device int64 `json:"device_bytes"`
	} `json:"budget"`
	Measured struct {
		PeakDevice   int64   `json:"peak_device_bytes"`
		PeakReserved int64   `json:"peak_device_reserved_bytes"`
		TotalS       float64 `json:"total_s"`
	} `json:"measured"`
	Predicted *struct {
		PeakDevice int64   `json:"peak_device_bytes"`
		TotalS     float64 `json:"total_s"`
		// Components are the model's own: a preset places every
		// component a Wan folder may have.
		Components []struct {
			Name string `json:"name"`
		} `json:"components"`
	} `json:"predicted"`
}

// cell is one (budget, plan): its reports, one per round, or why it did
// not run.
type cell struct {
	budget, plan string
	runs         []report
	refused      string
}

func main() {
	bin := flag.String("ferry", "bin/ferry", "the ferry binary")
	model := flag.String("model", ".cache/wan-tiny", "model folder")
	shape := flag.String("shape", "64x64x5", "WIDTHxHEIGHTxFRAMES")
	steps := flag.String("steps", "4", "steps")
	plans := flag.String("plans", "auto,level0,level1,level2,level3,resident,onload,stream,stream-disk,model-offload,sequential-offload,group-offload,vram-limit", "plans, comma-separated")
	budgets := flag.String("budgets", "0", "device budgets, comma-separated (0: unlimited)")
	host := flag.String("host-mem", "", "host budget")
	repeat := flag.Int("repeat", 1, "runs of each plan, in rounds")
	keep := flag.String("keep", "", "folder to keep every run's report in (BUDGET-PLAN-ROUND.json)")
	gap := flag.Duration("gap", 30*time.Second, "pause before each run, so that the memory the last one freed is cold again")
	flag.Parse()
	var w, h, f int
	if _, err := fmt.Sscanf(*shape, "%dx%dx%d", &w, &h, &f); err != nil {
		fail("--shape %q: want WIDTHxHEIGHTxFRAMES", *shape)
	}
	dir, err := os.MkdirTemp("", "plansweep-*")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	var cells []*cell
	for _, b := range strings.Split(*budgets, ",") {
		for _, p := range strings.Split(*plans, ",") {
			cells = append(cells, &cell{budget: b, plan: p})
		}
	}
	ran := false // whether the last command ran a request (a refusal frees nothing to wait for)
	for round := range max(1, *repeat) {
		for _, c := range cells {
			if c.refused != "" {
				continue
			}
			if ran {
				time.Sleep(*gap)
			}
			fmt.Fprintf(os.Stderr, "round %d: %s at %s\n", round+1, c.plan, c.budget)
			args := []string{"generate", "--model", *model, "--prompt", "A cat walks on the grass, realistic",
				"--width", fmt.Sprint(w), "--height", fmt.Sprint(h), "--frames", fmt.Sprint(f), "--steps", *steps,
				"--plan", c.plan, "--out", filepath.Join(dir, "v.safetensors"), "--report", filepath.Join(dir, "r.json"), "--quiet"}
			if c.budget != "0" {
				args = append(args, "--device-mem", c.budget)
			}
			if *host != "" {
				args = append(args, "--host-mem", *host)
			}
			r, err := run(*bin, args, dir)
			ran = err == nil
			if err != nil {
				c.refused = err.Error()
				continue
			}
			c.runs = append(c.runs, r)
			if *keep != "" {
				if err := keepReport(dir, *keep, fmt.Sprintf("%s-%s-%d.json", c.budget, c.plan, round+1)); err != nil {
					fail("%v", err)
				}
			}
		}
	}
	printRuns(cells)
	printSummary(cells, strings.Split(*budgets, ","))
}

// run runs one generate and reads its report.
func run(bin string, args []string, dir string) (report, error) {
	rep := filepath.Join(dir, "r.json")
	os.Remove(rep)
	os.Remove(filepath.Join(dir, "v.safetensors"))
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return report{}, fmt.Errorf("%s", strings.TrimSpace(string(out)))
	}
	var r report
	data, err := os.ReadFile(rep)
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	if err != nil || r.Predicted == nil {
		return report{}, fmt.Errorf("no prediction in the report (%v)", err)
	}
	return r, nil
}

func printRuns(cells []*cell) {
	fmt.Printf("| budget | plan | chosen | predicted peak | measured peak (reserved) | error | predicted time | measured time | spread | error |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		if len(c.runs) == 0 {
			fmt.Printf("| %s | %s | refused: %s |\n", c.budget, c.plan, shorten(c.refused))
			continue
		}
		r := c.runs[0]
		m, pr := r.Measured, r.Predicted
		t := c.medianS()
		over := ""
		if r.Budget.Device > 0 && m.PeakReserved > r.Budget.Device {
			over = " OVER BUDGET"
		}
		fmt.Printf("| %s | %s | %s | %s | %s (%s)%s | %+.1f%% | %.2fs | %.2fs | %.0f%% | %+.0f%% |\n", c.budget, c.plan, describe(r),
			mib(pr.PeakDevice), mib(m.PeakDevice), mib(m.PeakReserved), over, pct(pr.PeakDevice, m.PeakDevice),
			pr.TotalS, t, 100*c.spread(), 100*(pr.TotalS-t)/t)
	}
}

// printSummary compares, per budget, auto with the fastest preset that ran.
func printSummary(cells []*cell, budgets []string) {
	fmt.Printf("\n| budget | auto's plan | predicted / measured peak | predicted / measured time | fastest preset | its time | auto / fastest |\n|---|---|---|---|---|---|---|\n")
	for _, b := range budgets {
		var auto, best *cell
		for _, c := range cells {
			if c.budget != b || len(c.runs) == 0 {
				continue
			}
			if c.plan == "auto" {
				auto = c
			} else if best == nil || c.medianS() < best.medianS() {
				best = c
			}
		}
		if auto == nil {
			fmt.Printf("| %s | did not run | | | | | |\n", b)
			continue
		}
		r := auto.runs[0]
		line := fmt.Sprintf("| %s | %s | %s / %s | %.2fs / %.2fs", b, describe(r), mib(r.Predicted.PeakDevice), mib(r.Measured.PeakDevice), r.Predicted.TotalS, auto.medianS())
		if best == nil {
			fmt.Printf("%s | none fits | | |\n", line)
			continue
		}
		fmt.Printf("%s | %s | %.2fs | %.2f |\n", line, best.plan, best.medianS(), auto.medianS()/best.medianS())
	}
}

func (c *cell) times() []float64 {
	var ts []float64
	for _, r := range c.runs {
		ts = append(ts, r.Measured.TotalS)
	}
	sort.Float64s(ts)
	return ts
}

func (c *cell) medianS() float64 {
	ts := c.times()
	if len(ts)%2 == 1 {
		return ts[len(ts)/2]
	}
	return (ts[len(ts)/2-1] + ts[len(ts)/2]) / 2
}

func (c *cell) spread() float64 {
	ts := c.times()
	return (ts[len(ts)-1] - ts[0]) / c.medianS()
}

// describe abbreviates a plan: per component its placement (tier, prefetch,
// persistent blocks), then the run options that are set.
func describe(r report) string {
	short := map[string]string{"text_encoder": "te", "transformer": "dit", "vae": "vae"}
	var parts []string
	for _, n := range componentNames(r) {
		c := r.Plan.Components[n]
		s := c.Placement
		if s == "" {
			s = "resident"
		}
		if c.Placement == "stream" {
			s += fmt.Sprintf("/k%d", c.Prefetch)
			if c.Persist > 0 {
				s += fmt.Sprintf("n%d", c.Persist)
			}
		}
		if c.Tier == "disk" {
			s += "/disk"
		}
		name := short[n]
		if name == "" {
			name = n
		}
		parts = append(parts, name+"="+s)
	}
	if r.Plan.Run.CFG != "" {
		parts = append(parts, "cfg="+r.Plan.Run.CFG)
	}
	if r.Plan.Run.FFNChunk > 0 {
		parts = append(parts, fmt.Sprintf("ffn=%d", r.Plan.Run.FFNChunk))
	}
	if r.Plan.Run.VAETile > 0 {
		parts = append(parts, fmt.Sprintf("tile=%d", r.Plan.Run.VAETile))
	}
	if len(parts) == 0 {
		return "all resident"
	}
	return strings.Join(parts, " ")
}

// componentNames lists the plan's components the model has (all of them
// when the report does not say which it has) in pipeline order, the rest
// by name after them, so that a plan reads the same in every row.
func componentNames(r report) []string {
	var has map[string]bool
	if r.Predicted != nil && len(r.Predicted.Components) > 0 {
		has = map[string]bool{}
		for _, c := range r.Predicted.Components {
			has[c.Name] = true
		}
	}
	var names []string
	for n := range r.Plan.Components {
		if has == nil || has[n] {
			names = append(names, n)
		}
	}
	order := []string{"text_encoder", "image_encoder", "transformer", "transformer_2", "vae"}
	rank := func(n string) int {
		if i := slices.Index(order, n); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}

// shorten keeps the reason of a refusal, without the advice that follows.
func shorten(s string) string {
	if i := strings.Index(s, " (raise"); i > 0 {
		s = s[:i]
	}
	s = strings.TrimPrefix(s, "ferry generate: ")
	return strings.ReplaceAll(s, "|", "/")
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func pct(pred, meas int64) float64 {
	if meas == 0 {
		return 0
	}
	return 100 * float64(pred-meas) / float64(meas)
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "plansweep: "+format+"\n", a...)
	os.Exit(2)
}

// keepReport copies the last run's report into the keep folder.
func keepReport(dir, keep, name string) error {
	data, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(keep, name), data, 0o644)
}
