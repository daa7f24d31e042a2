package planner

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"ferry/residency"
	"ferry/tensor"
)

// WriteTable prints a prediction for people: one row per component
// (placement, tier, prefetch, persistent, weight bytes, predicted compute,
// stall and copy time), then the run options, the predicted peaks against
// the budgets and the time per phase.
func WriteTable(w io.Writer, pr Prediction) error {
	r := pr.Request
	cfg := "off"
	if r.cfg() {
		cfg = pr.Run.CFG
		if cfg == "" {
			cfg = residency.CFGBatched
		}
	}
	var b strings.Builder
	text := fmt.Sprintf("%d tokens", r.TextLen)
	if r.PromptTokens > 0 && r.PromptTokens < r.TextLen {
		text = fmt.Sprintf("%d tokens (prompt %d)", r.TextLen, r.PromptTokens)
	}
	fmt.Fprintf(&b, "model %s, plan %s: %d frames at %dx%d, batch %d, %d steps, text %s, guidance %g\n\n",
		pr.Model, orDash(pr.Plan), r.Frames, r.Width, r.Height, r.Batch, r.Steps, text, r.Guidance)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "component\tplacement\ttier\tk\tn\tblocks\tdevice\tstored\tcached\tcompute\tstall\tcopy\tloads")
	for _, c := range pr.Components {
		k, n := "-", "-"
		if c.Placement == residency.Stream {
			k, n = fmt.Sprint(c.Prefetch), fmt.Sprint(c.Persistent)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%.0f%%\t%s\t%s\t%s\t%d\n", c.Name, c.Placement, orDash(string(c.Tier)), k, n, c.Blocks,
			tensor.FormatBytes(c.DeviceBytes), tensor.FormatBytes(c.StoredBytes), 100*c.Cached, seconds(c.ComputeS), seconds(c.StallS), seconds(c.CopyS), c.Loads)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	tile := "off"
	if pr.Run.VAETile > 0 {
		tile = fmt.Sprintf("%d stride %d", pr.Run.VAETile, pr.Run.VAEStride)
	}
	ffn := "off"
	if pr.Run.FFNChunk > 0 {
		ffn = fmt.Sprintf("%d tokens", pr.Run.FFNChunk)
	}
	fmt.Fprintf(&b, "\nrun: cfg %s, ffn chunk %s, vae tile %s\n", cfg, ffn, tile)
	fmt.Fprintf(&b, "peak device  %s allocated, %s reserved (budget %s)\n", tensor.FormatBytes(pr.PeakDeviceBytes), tensor.FormatBytes(pr.PeakDeviceReservedBytes), budgetText(pr.Budgets.DeviceBytes))
	fmt.Fprintf(&b, "peak host    %s (budget %s)\n", tensor.FormatBytes(pr.PeakHostBytes), budgetText(pr.Budgets.HostBytes))
	fmt.Fprintf(&b, "peak RSS     %s\n", tensor.FormatBytes(pr.PeakRSSBytes))
	fmt.Fprintf(&b, "disk reads   %.2f GB/s outside the page cache (%s)", pr.DiskGBps, orDash(pr.DiskNote))
	if pr.DiskSustainedGBps > 0 {
		fmt.Fprintf(&b, ", %.2f GB/s past the first %.2f GB (calibrated)", pr.DiskSustainedGBps, pr.DiskBurstGB)
	}
	b.WriteString("\n")
	vae := seconds(pr.VAES)
	if r.LatentsOut {
		vae = "- (latents out)"
	}
	fmt.Fprintf(&b, "time         text %s, denoise %s (step %s, first %s), vae %s: total %s\n",
		seconds(pr.TextEncoderS), seconds(pr.DenoiseS), seconds(pr.StepS), seconds(pr.FirstStepS), vae, seconds(pr.TotalS))
	if sw := pr.Switch; sw != nil {
		b.WriteString(switchLine(*sw, r.Steps))
	}
	if !pr.Fits {
		fmt.Fprintf(&b, "DOES NOT FIT: %s\n", pr.Problem)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints a prediction as indented JSON.
func WriteJSON(w io.Writer, pr Prediction) error {
	data, err := json.MarshalIndent(pr, "", "  ")
	if err != nil {
		return fmt.Errorf("prediction json: %w", err)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// seconds formats a duration given in seconds for reading.
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-3:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1e3)
	case s < 120:
		return fmt.Sprintf("%.1fs", s)
	case s < 7200:
		return fmt.Sprintf("%.1fmin", s/60)
	}
	return fmt.Sprintf("%.1fh", s/3600)
}

// switchLine describes the expert switch: its step and its cost.
func switchLine(sw SwitchPrediction, steps int) string {
	switch {
	case sw.Step >= steps:
		return fmt.Sprintf("switch       none: every step is above boundary %g (the high-noise expert runs all %d)\n", sw.Boundary, steps)
	case sw.Step == 0:
		return fmt.Sprintf("switch       none: every step is below boundary %g (the low-noise expert runs all %d)\n", sw.Boundary, steps)
	}
	return fmt.Sprintf("switch       after step %d of %d (boundary %g): the high-noise expert retires, the low-noise expert runs steps %d-%d; its first step %s (steady %s, %s loaded): the switch costs %s\n",
		sw.Step, steps, sw.Boundary, sw.Step+1, steps, seconds(sw.StepS), seconds(sw.SteadyS), tensor.FormatBytes(sw.LoadBytes), seconds(sw.CostS))
}
