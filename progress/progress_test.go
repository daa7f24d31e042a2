package progress

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeClock is a settable clock for deterministic rates and redraws.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTest returns a Progress in mode writing to a buffer, on a fake clock.
func newTest(mode Mode, columns int) (*Progress, *bytes.Buffer, *fakeClock) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := New(&buf, mode)
	p.now, p.start, p.columns = clk.now, clk.t, columns
	return p, &buf, clk
}

func TestLinesMode(t *testing.T) {
	p, buf, clk := newTest(Lines, 80)
	bar := p.Phase("denoise", 3, "steps")
	for range 3 {
		clk.advance(2 * time.Second)
		bar.Add(1)
	}
	bar.Done()
	bar.Done() // a second Done prints nothing
	want := []string{
		"[    0.0s] denoise: started, 3 steps",
		"[    2.0s] denoise: 1/3 steps, 2.00 s/it, ETA 4.0s",
		"[    4.0s] denoise: 2/3 steps, 2.00 s/it, ETA 2.0s",
		"[    6.0s] denoise: 3/3 steps, 2.00 s/it",
		"[    6.0s] denoise        done: 3/3 steps in 6.0s (2.00 s/it)",
	}
	if got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLinesModeFastRateAndUnknownTotal(t *testing.T) {
	p, buf, clk := newTest(Lines, 80)
	bar := p.Phase("vae", 0, "tiles")
	clk.advance(100 * time.Millisecond)
	bar.Set(5)
	if got, want := lastLine(buf), "[    0.1s] vae: 5 tiles, 50.0 it/s"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func lastLine(buf *bytes.Buffer) string {
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	return lines[len(lines)-1]
}

func TestBarsRedrawAtMost10Hz(t *testing.T) {
	cases := []struct {
		step      time.Duration
		n         int
		wantDraws int // including the first draw at the start
	}{
		{10 * time.Millisecond, 50, 6},  // start, then every 100 ms to 500 ms
		{300 * time.Millisecond, 4, 5},  // slow: every event redraws
		{time.Millisecond, 1000, 11},    // 1 s of updates: 10 per second
		{0, 100, 2},                     // no time passes: start and the last unit
		{50 * time.Millisecond, 10, 6},  // every other event
		{99 * time.Millisecond, 3, 3},   // just under the limit: 0, 198, and the last
		{100 * time.Millisecond, 3, 4},  // exactly at the limit
		{time.Second, 1, 2},             // one step
		{3 * time.Millisecond, 500, 16}, // 1.5 s: 15 ticks and the last unit
	}
	for _, c := range cases {
		p, buf, clk := newTest(Bars, 100)
		bar := p.Phase("denoise", c.n, "steps")
		for range c.n {
			clk.advance(c.step)
			bar.Add(1)
		}
		draws := strings.Count(buf.String(), "\r")
		limit := 2 + int(time.Duration(c.n)*c.step/redrawEvery)
		if draws != c.wantDraws || draws > limit {
			t.Errorf("step %v x %d: %d redraws, want %d (at most %d)", c.step, c.n, draws, c.wantDraws, limit)
		}
		bar.Done()
		out := buf.String()
		if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\r\x1b[K"+bar.doneLine()+"\n") {
			t.Errorf("final line %q", out[strings.LastIndex(out, "\r"):])
		}
		if !strings.Contains(bar.doneLine(), fmt.Sprintf("done: %d/%d steps", c.n, c.n)) {
			t.Errorf("done line %q", bar.doneLine())
		}
	}
}

func TestBarsLineFitsTerminal(t *testing.T) {
	for _, cols := range []int{40, 60, 80, 200} {
		p, buf, clk := newTest(Bars, cols)
		bar := p.Phase("text encoder", 24, "layers")
		clk.advance(time.Second)
		bar.Set(12)
		for _, frame := range strings.Split(buf.String(), "\r") {
			frame = strings.TrimPrefix(frame, "\x1b[K")
			if len(frame) >= cols {
				t.Errorf("%d columns: line %q is %d wide", cols, frame, len(frame))
			}
		}
		if cols >= 60 && !strings.Contains(buf.String(), "[") {
			t.Errorf("%d columns: no bar drawn: %q", cols, buf.String())
		}
	}
}

func TestBarsHalfway(t *testing.T) {
	p, buf, clk := newTest(Bars, 100)
	bar := p.Phase("denoise", 10, "steps")
	clk.advance(10 * time.Second)
	bar.Set(5)
	frame := buf.String()[strings.LastIndex(buf.String(), "\r\x1b[K")+4:]
	open, close := strings.Index(frame, "["), strings.Index(frame, "]")
	cells := frame[open+1 : close]
	if strings.Count(cells, "#") != len(cells)/2 {
		t.Errorf("half done but bar is %q", cells)
	}
	for _, want := range []string{"5/10 steps", "2.00 s/it", "ETA 10.0s"} {
		if !strings.Contains(frame, want) {
			t.Errorf("bar %q lacks %q", frame, want)
		}
	}
}

func TestLogfKeepsBar(t *testing.T) {
	p, buf, _ := newTest(Bars, 80)
	bar := p.Phase("vae", 4, "frames")
	bar.Set(1)
	buf.Reset()
	p.Logf("warning: %s", "low memory")
	want := "\r\x1b[Kwarning: low memory\n\r\x1b[K" + bar.barLine(79)
	if buf.String() != want {
		t.Fatalf("got %q, want %q", buf.String(), want)
	}
}

func TestClose(t *testing.T) {
	cases := []struct {
		mode Mode
		want string
	}{
		{Bars, "\n"},
		{Lines, "[    0.0s] denoise: stopped at 2/30 steps\n"},
		{Quiet, ""},
	}
	for _, c := range cases {
		p, buf, _ := newTest(c.mode, 80)
		bar := p.Phase("denoise", 30, "steps")
		bar.Set(2)
		buf.Reset()
		p.Close()
		p.Close()
		bar.Add(1) // after Close: ignored
		if buf.String() != c.want {
			t.Errorf("%v: Close wrote %q, want %q", c.mode, buf.String(), c.want)
		}
	}
}

func TestNewPhaseFinishesOpenOne(t *testing.T) {
	p, buf, _ := newTest(Lines, 80)
	p.Phase("text encoder", 2, "layers").Set(2)
	p.Phase("denoise", 2, "steps")
	if !strings.Contains(buf.String(), "text encoder   done: 2/2 layers") {
		t.Fatalf("open phase not finished:\n%s", buf.String())
	}
}

func TestQuietPrintsNothing(t *testing.T) {
	p, buf, clk := newTest(Quiet, 80)
	bar := p.Phase("denoise", 3, "steps")
	clk.advance(time.Second)
	bar.Add(1)
	bar.Set(3)
	p.Logf("hello")
	bar.Done()
	p.Close()
	if buf.Len() != 0 {
		t.Fatalf("quiet mode wrote %q", buf.String())
	}
}

func TestNilIsQuiet(t *testing.T) {
	var p *Progress
	bar := p.Phase("x", 1, "")
	bar.Add(1)
	bar.Set(1)
	bar.Done()
	p.Logf("x")
	p.Close()
	if p.Mode() != Quiet {
		t.Fatal("nil progress is not quiet")
	}
}

func TestAutoMode(t *testing.T) {
	if m := New(&bytes.Buffer{}, Auto).Mode(); m != Lines {
		t.Errorf("buffer: mode %v, want lines", m)
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if m := New(f, Auto).Mode(); m != Lines {
		t.Errorf("regular file: mode %v, want lines", m)
	}
	if m := New(f, Bars).Mode(); m != Bars {
		t.Errorf("forced bars: mode %v", m)
	}
}

func TestFormatDuration(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0s"},
		{4200 * time.Millisecond, "4.2s"},
		{62 * time.Second, "1m02s"},
		{59*time.Minute + 59600*time.Millisecond, "60m00s"},
		{65 * time.Minute, "1h05m"},
	}
	for _, c := range cases {
		if got := FormatDuration(c.d); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for m := Auto; m <= Quiet; m++ {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("fancy"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
}

// TestNoteFollowsETA: a bar's note (a trainer's smoothed loss) is shown
// after the rate and ETA in both modes, and the latest one wins.
func TestNoteFollowsETA(t *testing.T) {
	for _, mode := range []Mode{Bars, Lines} {
		p, buf, clk := newTest(mode, 100)
		bar := p.Phase("train", 10, "steps")
		bar.SetNote("loss 0.9")
		clk.advance(time.Second)
		bar.SetNote("loss 0.5")
		bar.Set(1)
		line := lastLine(buf)
		if mode == Bars {
			line = buf.String()[strings.LastIndex(buf.String(), "\r\x1b[K")+4:]
		}
		eta, note := strings.Index(line, "ETA"), strings.Index(line, "loss 0.5")
		if eta < 0 || note < eta || strings.Contains(line, "loss 0.9") {
			t.Errorf("%v: line %q, want the latest note after the ETA", mode, line)
		}
	}
}
