// Command plansweep checks the planner against real runs: for each plan
// (presets, auto) and device budget it runs `ferry generate --report` in a
// fresh process and prints predicted beside measured peak device bytes and
// total time, as a Markdown table.
//
//	go run ./tools/plansweep --model .cache/wan-tiny --shape 64x64x5 --steps 4 \
//	    --plans level0,level1,level2,level3,model-offload,sequential-offload,stream,auto \
//	    --budgets 0,64MiB,32MiB
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

type report struct {
	Plan struct {
		Name string `json:"name"`
	} `json:"plan"`
	Measured struct {
		PeakDevice   int64   `json:"peak_device_bytes"`
		PeakReserved int64   `json:"peak_device_reserved_bytes"`
		PeakRSS      int64   `json:"peak_rss_bytes"`
		TotalS       float64 `json:"total_s"`
	} `json:"measured"`
	Predicted *struct {
		PeakDevice   int64   `json:"peak_device_bytes"`
		PeakReserved int64   `json:"peak_device_reserved_bytes"`
		PeakRSS      int64   `json:"peak_rss_bytes"`
		TotalS       float64 `json:"total_s"`
	} `json:"predicted"`
}

func main() {
	bin := flag.String("ferry", "bin/ferry", "the ferry binary")
	model := flag.String("model", ".cache/wan-tiny", "model folder")
	shape := flag.String("shape", "64x64x5", "WIDTHxHEIGHTxFRAMES")
	steps := flag.String("steps", "4", "steps")
	plans := flag.String("plans", "level0,level1,level2,level3,model-offload,sequential-offload,stream,auto", "plans, comma-separated")
	budgets := flag.String("budgets", "0", "device budgets, comma-separated (0: unlimited)")
	host := flag.String("host-mem", "", "host budget")
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
	fmt.Printf("| budget | plan | predicted peak | measured peak | error | predicted time | measured time | error |\n|---|---|---|---|---|---|---|---|\n")
	for _, b := range strings.Split(*budgets, ",") {
		for _, p := range strings.Split(*plans, ",") {
			rep := filepath.Join(dir, "r.json")
			args := []string{"generate", "--model", *model, "--prompt", "A cat walks on the grass, realistic",
				"--width", fmt.Sprint(w), "--height", fmt.Sprint(h), "--frames", fmt.Sprint(f), "--steps", *steps,
				"--plan", p, "--out", filepath.Join(dir, "v.safetensors"), "--report", rep, "--quiet"}
			if b != "0" {
				args = append(args, "--device-mem", b)
			}
			if *host != "" {
				args = append(args, "--host-mem", *host)
			}
			os.Remove(filepath.Join(dir, "v.safetensors"))
			out, err := exec.Command(*bin, args...).CombinedOutput()
			if err != nil {
				fmt.Printf("| %s | %s | - | - | - | - | - | %s |\n", b, p, strings.TrimSpace(string(out)))
				continue
			}
			var r report
			data, _ := os.ReadFile(rep)
			if err := json.Unmarshal(data, &r); err != nil || r.Predicted == nil {
				fmt.Printf("| %s | %s | no prediction |\n", b, p)
				continue
			}
			m, pr := r.Measured, r.Predicted
			fmt.Printf("| %s | %s | %s | %s | %+.1f%% | %.2fs | %.2fs | %+.0f%% |\n", b, p,
				mib(pr.PeakDevice), mib(m.PeakDevice), pct(pr.PeakDevice, m.PeakDevice),
				pr.TotalS, m.TotalS, 100*(pr.TotalS-m.TotalS)/m.TotalS)
		}
	}
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
