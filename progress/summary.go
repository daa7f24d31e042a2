package progress

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Summary is the end-of-run report printed to stderr: plain data the
// pipeline fills in. Zero sizes and durations mean "unknown" and print as
// "-".
type Summary struct {
	Title string // "Wan2.1-T2V-1.3B 480x832, 81 frames, 30 steps"
	Plan  string // "stream, prefetch 2"

	Components []ComponentStat
	Memory     []MemoryStat // device, host, RSS
	Phases     []PhaseStat

	Total       time.Duration
	CopyWait    time.Duration // compute stalled on copies
	CopyTime    time.Duration // the copy worker's busy time
	BytesCopied int64

	Outputs []string // files written: video, report, trace, chart
}

// ComponentStat is one component's line.
type ComponentStat struct {
	Name      string // "transformer"
	Placement string // "stream, prefetch 2, 4 resident"
	Peak      int64  // measured peak bytes while it ran
	Budget    int64  // the budget of the tier it ran in
	Predicted int64  // the planner's predicted peak
	Time      time.Duration
}

// MemoryStat is the run's peak in one place (device, host, RSS).
type MemoryStat struct {
	Name      string
	Peak      int64
	Budget    int64
	Predicted int64
}

// PhaseStat is the time of one phase; Units > 0 adds a per-unit rate.
type PhaseStat struct {
	Name  string
	Time  time.Duration
	Units int    // e.g. 30 denoising steps
	Unit  string // "steps"
}

// Write prints the summary as compact, aligned lines.
func (s Summary) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	head := "ferry: done"
	if s.Total > 0 {
		head += " in " + FormatDuration(s.Total)
	}
	if about := strings.Join(nonEmpty(s.Title, planText(s.Plan)), ", "); about != "" {
		head += " (" + about + ")"
	}
	fmt.Fprintln(bw, head)
	writeTable(bw, s.componentRows())
	tail := s.memoryRows()
	if t := s.phaseText(); t != "" {
		tail = append(tail, []string{"time", t})
	}
	if c := s.copyText(); c != "" {
		tail = append(tail, []string{"copy", c})
	}
	for _, o := range s.Outputs {
		tail = append(tail, []string{"wrote", o})
	}
	writeTable(bw, tail)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("progress: write summary: %w", err)
	}
	return nil
}

func planText(plan string) string {
	if plan == "" {
		return ""
	}
	return "plan " + plan
}

// componentRows is the per-component table with its header.
func (s Summary) componentRows() [][]string {
	if len(s.Components) == 0 {
		return nil
	}
	rows := [][]string{{"component", "placement", "peak", "budget", "used", "predicted", "error", "time"}}
	for _, c := range s.Components {
		rows = append(rows, []string{c.Name, dash(c.Placement), size(c.Peak), size(c.Budget),
			used(c.Peak, c.Budget), size(c.Predicted), relErr(c.Peak, c.Predicted), duration(c.Time)})
	}
	return rows
}

// memoryRows are the run's peaks: "device  peak 5.31 GiB of 8.00 GiB (66%), predicted ...".
func (s Summary) memoryRows() [][]string {
	var rows [][]string
	for _, m := range s.Memory {
		text := "peak " + size(m.Peak)
		if m.Budget > 0 {
			text += " of " + size(m.Budget) + " (" + used(m.Peak, m.Budget) + ")"
		}
		if m.Predicted > 0 {
			text += ", predicted " + size(m.Predicted) + " (" + relErr(m.Peak, m.Predicted) + ")"
		}
		rows = append(rows, []string{m.Name, text})
	}
	return rows
}

// phaseText is "text_encoder 12.0s, denoise 1m20s (30 steps, 2.67 s/it), vae 9.9s".
func (s Summary) phaseText() string {
	var parts []string
	for _, p := range s.Phases {
		t := p.Name + " " + duration(p.Time)
		if p.Units > 0 && p.Time > 0 {
			t += fmt.Sprintf(" (%d %s, %.2f s/it)", p.Units, p.Unit, p.Time.Seconds()/float64(p.Units))
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, ", ")
}

// copyText is "wait 1.2s (1.5% of the run), 93.2 GiB moved in 41.0s (2.4 GB/s)".
func (s Summary) copyText() string {
	var parts []string
	if s.CopyWait > 0 || s.BytesCopied > 0 {
		t := "wait " + FormatDuration(s.CopyWait)
		if s.Total > 0 {
			t += fmt.Sprintf(" (%.1f%% of the run)", 100*s.CopyWait.Seconds()/s.Total.Seconds())
		}
		parts = append(parts, t)
	}
	if s.BytesCopied > 0 {
		t := size(s.BytesCopied) + " moved"
		if s.CopyTime > 0 {
			t += fmt.Sprintf(" in %s (%.1f GB/s)", FormatDuration(s.CopyTime), float64(s.BytesCopied)/s.CopyTime.Seconds()/1e9)
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, ", ")
}

// writeTable pads every column but the last to its widest cell, two spaces
// apart, indented two spaces.
func writeTable(w io.Writer, rows [][]string) {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c + strings.Repeat(" ", widths[i]-len(c)+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func size(n int64) string {
	if n <= 0 {
		return "-"
	}
	return FormatBytes(n)
}

func duration(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return FormatDuration(d)
}

// used is the share of the budget, flagged when over it.
func used(peak, budget int64) string {
	if peak <= 0 || budget <= 0 {
		return "-"
	}
	pct := strconv.Itoa(int(100*float64(peak)/float64(budget)+0.5)) + "%"
	if peak > budget {
		pct += " OVER"
	}
	return pct
}

// relErr is how far the measurement is from the prediction: "+3%" means the
// run used 3% more than predicted.
func relErr(measured, predicted int64) string {
	if measured <= 0 || predicted <= 0 {
		return "-"
	}
	return fmt.Sprintf("%+.0f%%", 100*(float64(measured)-float64(predicted))/float64(predicted))
}

// FormatBytes writes n with a binary unit and three significant digits:
// "512 B", "1.50 KiB", "200 MiB", "6.00 GiB".
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	switch {
	case u == 0:
		return fmt.Sprintf("%d B", n)
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, units[u])
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, units[u])
	default:
		return fmt.Sprintf("%.2f %s", v, units[u])
	}
}
