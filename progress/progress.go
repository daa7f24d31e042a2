// Package progress shows a run's phases as it goes: on a terminal, one
// redrawn bar per phase (text encoding in layers, denoising in steps with
// s/it and ETA, VAE decoding in frames or tiles); elsewhere, one plain line
// per event, so logs stay readable; in quiet mode, nothing. It also formats
// the end-of-run summary (see Summary).
//
// A nil *Progress and a nil *Bar are valid and print nothing, so pipelines
// can take one without checks.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Mode chooses how progress is shown.
type Mode uint8

// The modes. Auto picks Bars when the writer is a terminal and Lines
// otherwise.
const (
	Auto  Mode = iota
	Bars       // redrawn bars, for terminals
	Lines      // one line per event, for logs and pipes
	Quiet      // nothing
)

func (m Mode) String() string {
	return [...]string{"auto", "bars", "lines", "quiet"}[m]
}

// ParseMode reads a mode from a flag value: "auto", "bars", "lines" or
// "quiet".
func ParseMode(s string) (Mode, error) {
	for m := Auto; m <= Quiet; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return Auto, fmt.Errorf("progress mode %q: use auto, bars, lines or quiet", s)
}

// redrawEvery limits how often a bar is redrawn on a terminal (10 Hz).
const redrawEvery = 100 * time.Millisecond

// defaultColumns is the line width assumed when the terminal's is unknown.
const defaultColumns = 80

// Progress writes the progress of a run's phases to one writer.
type Progress struct {
	mu      sync.Mutex
	w       io.Writer
	mode    Mode
	columns int
	now     func() time.Time
	start   time.Time
	active  *Bar // the phase whose bar is on the current line
}

// New shows progress on w in mode; Auto resolves to Bars when w is a
// terminal (and TERM is not "dumb") and to Lines otherwise.
func New(w io.Writer, mode Mode) *Progress {
	if mode == Auto {
		mode = Lines
		if IsTerminal(w) && os.Getenv("TERM") != "dumb" {
			mode = Bars
		}
	}
	cols := terminalColumns(w)
	if cols <= 0 {
		cols = defaultColumns
	}
	return &Progress{w: w, mode: mode, columns: cols, now: time.Now, start: time.Now()}
}

// Mode is the resolved mode (never Auto).
func (p *Progress) Mode() Mode {
	if p == nil {
		return Quiet
	}
	return p.mode
}

// Phase starts a phase of total units (0: unknown) and returns its bar. A
// bar still open from an earlier phase is finished first.
func (p *Progress) Phase(name string, total int, unit string) *Bar {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active != nil {
		p.finish(p.active)
	}
	b := &Bar{p: p, name: name, total: max(total, 0), unit: unit, start: p.now()}
	p.active = b
	switch p.mode {
	case Bars:
		p.draw(b)
	case Lines:
		p.logLine(b.startLine())
	}
	return b
}

// Logf prints a message without breaking the bar: on a terminal the bar is
// cleared, the message printed, and the bar drawn again below it.
func (p *Progress) Logf(format string, args ...any) {
	if p == nil || p.mode == Quiet {
		return
	}
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == Lines {
		p.logLine(msg)
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s\n", msg)
	if p.active != nil {
		p.draw(p.active)
	}
}

// Close ends the line of a bar left open (after an error or an interrupt),
// so the shell prompt starts on a fresh line.
func (p *Progress) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.active
	if b == nil {
		return
	}
	p.active = nil
	b.done = true
	switch p.mode {
	case Bars:
		fmt.Fprintln(p.w)
	case Lines:
		p.logLine(fmt.Sprintf("%s: stopped at %s", b.name, b.count()))
	}
}

// Bar is the progress of one phase.
type Bar struct {
	p        *Progress
	name     string
	unit     string
	total, n int
	note     string // shown after the rate and ETA (SetNote)
	start    time.Time
	lastDraw time.Time
	drawn    bool
	done     bool
}

// Add advances the bar by d units.
func (b *Bar) Add(d int) {
	if b == nil {
		return
	}
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	b.update(b.n + d)
}

// Set moves the bar to n units done.
func (b *Bar) Set(n int) {
	if b == nil {
		return
	}
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	b.update(n)
}

// SetTotal changes the number of units the phase will take (for phases
// whose size is known only once they have started).
func (b *Bar) SetTotal(n int) {
	if b == nil {
		return
	}
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	b.total = max(n, 0)
}

// SetNote sets a short text shown after the bar's rate and ETA (a
// trainer's smoothed loss); it is drawn with the next update.
func (b *Bar) SetNote(s string) {
	if b == nil {
		return
	}
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	b.note = s
}

// Done finishes the phase: the bar's final state stays on its own line.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	b.p.finish(b)
}

// update records progress and shows it as the mode says. Caller holds p.mu.
func (b *Bar) update(n int) {
	if b.done {
		return
	}
	b.n = max(n, 0)
	p := b.p
	switch p.mode {
	case Bars:
		last := b.total > 0 && b.n >= b.total
		if !b.drawn || last || p.now().Sub(b.lastDraw) >= redrawEvery {
			p.draw(b)
		}
	case Lines:
		p.logLine(b.progressLine())
	}
}

// finish prints b's final state once. Caller holds p.mu.
func (p *Progress) finish(b *Bar) {
	if b.done {
		return
	}
	b.done = true
	if p.active == b {
		p.active = nil
	}
	switch p.mode {
	case Bars:
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", b.doneLine())
	case Lines:
		p.logLine(b.doneLine())
	}
}

// draw rewrites the terminal line with b's bar. Caller holds p.mu.
func (p *Progress) draw(b *Bar) {
	fmt.Fprintf(p.w, "\r\x1b[K%s", b.barLine(p.columns-1))
	b.drawn, b.lastDraw = true, p.now()
}

// logLine writes one log line stamped with the time since the start.
func (p *Progress) logLine(s string) {
	fmt.Fprintf(p.w, "[%7.1fs] %s\n", p.now().Sub(p.start).Seconds(), s)
}
