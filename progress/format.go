package progress

import (
	"fmt"
	"strings"
	"time"
)

// nameWidth pads phase names so consecutive bars line up.
const nameWidth = 14

// count is "12/30 steps", or "12 steps" when the total is unknown.
func (b *Bar) count() string {
	s := fmt.Sprint(b.n)
	if b.total > 0 {
		s = fmt.Sprintf("%d/%d", b.n, b.total)
	}
	if b.unit != "" {
		s += " " + b.unit
	}
	return s
}

// elapsed is the time since the phase started.
func (b *Bar) elapsed() time.Duration { return b.p.now().Sub(b.start) }

// rate is "3.41 s/it" for slow work and "12.5 it/s" for fast work; "" before
// the first unit is done.
func (b *Bar) rate() string {
	e := b.elapsed().Seconds()
	if b.n == 0 || e <= 0 {
		return ""
	}
	per := e / float64(b.n)
	if per >= 1 {
		return fmt.Sprintf("%.2f s/it", per)
	}
	return fmt.Sprintf("%.1f it/s", 1/per)
}

// eta is the remaining time at the average rate so far; "" when unknown.
func (b *Bar) eta() string {
	if b.n == 0 || b.total == 0 || b.n >= b.total {
		return ""
	}
	left := time.Duration(float64(b.elapsed()) / float64(b.n) * float64(b.total-b.n))
	return "ETA " + FormatDuration(left)
}

// barLine is the terminal line: name, bar, count, rate and ETA, fitted to
// width columns.
func (b *Bar) barLine(width int) string {
	tail := strings.Join(nonEmpty(b.count(), b.rate(), b.eta(), b.note), "  ")
	head := fmt.Sprintf("%-*s ", nameWidth, b.name)
	room := width - len(head) - len(tail) - 3
	if b.total > 0 && room >= 10 {
		return head + "[" + bar(b.n, b.total, min(room, 40)) + "] " + tail
	}
	line := head + tail
	if len(line) > width && width > 0 {
		line = line[:width]
	}
	return line
}

// bar fills width cells in proportion to n of total.
func bar(n, total, width int) string {
	full := min(width, width*n/total)
	return strings.Repeat("#", full) + strings.Repeat("-", width-full)
}

// startLine announces a phase in Lines mode.
func (b *Bar) startLine() string {
	if b.total > 0 {
		return fmt.Sprintf("%s: started, %d %s", b.name, b.total, b.unit)
	}
	return fmt.Sprintf("%s: started", b.name)
}

// progressLine is one event in Lines mode.
func (b *Bar) progressLine() string {
	return strings.Join(nonEmpty(b.name+": "+b.count(), b.rate(), b.eta(), b.note), ", ")
}

// doneLine is the final state of a phase.
func (b *Bar) doneLine() string {
	s := fmt.Sprintf("%-*s done: %s in %s", nameWidth, b.name, b.count(), FormatDuration(b.elapsed()))
	if r := b.rate(); r != "" {
		s += " (" + r + ")"
	}
	return s
}

func nonEmpty(parts ...string) []string {
	out := parts[:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// FormatDuration writes d compactly: "4.2s", "1m02s", "1h05m".
func FormatDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		s := int(d.Round(time.Second).Seconds())
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		m := int(d.Round(time.Minute).Minutes())
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	}
}
