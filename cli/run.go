package cli

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"ferry/chart"
	"ferry/checkpoint"
	"ferry/media"
	"ferry/pipeline"
	"ferry/progress"
	"ferry/residency"
	"ferry/trace"
)

// execute runs a job under its budgets, shows progress, and writes the
// outputs: the video, then the report, trace and chart. Nothing is
// written when the run fails.
func execute(e *env, g *genFlags, j job, pl planned) error {
	plan := pl.plan
	mode := progress.Auto
	if g.quiet {
		mode = progress.Quiet
	}
	prog := progress.New(e.stderr, mode)
	defer prog.Close()
	bars := newBars(prog)
	j.SetProgress(bars.step, bars.frame)

	budget := pipeline.Budget{DeviceBytes: g.deviceMem.bytes, HostBytes: g.hostMem.bytes}
	dt, err := g.computeDType()
	if err != nil {
		return err
	}
	var rt *pipeline.Runtime
	rt, err = pipeline.NewRuntime(budget, plan, pipeline.Options{Context: e.ctx, ComputeDType: dt, SmallPagesFirst: pl.smallPages,
		OnBlock: func(comp, _ string) { bars.block(rt, comp) }})
	if err != nil {
		return err
	}
	pix, runErr := j.Run(rt)
	bars.done()
	measured := rt.Measure()
	rt.Close()
	if runErr != nil {
		return classify(runErr)
	}
	if err := rt.CheckReleased(); err != nil {
		return err
	}
	var outputs []string
	if g.outputType == "latent" {
		err = writeLatents(g.out, j.(latentJob))
		outputs = []string{g.out}
	} else {
		outputs, err = writeVideos(g, j, pix)
	}
	if err != nil {
		return err
	}
	rep := pipeline.Report{Model: g.model, Request: j.Request(), Plan: plan, Budget: budget, Measured: measured}
	if pl.pred != nil {
		rep.Predicted = pl.pred
	}
	if g.report != "" {
		if err := pipeline.WriteJSON(g.report, rep); err != nil {
			return err
		}
		outputs = append(outputs, g.report)
	}
	if g.trace != "" {
		if err := pipeline.WriteFileAtomicFunc(g.trace, rt.Trace.WriteChrome); err != nil {
			return err
		}
		outputs = append(outputs, g.trace)
	}
	if g.chart != "" {
		if err := writeChart(g.chart, rt, j, pl, budget); err != nil {
			return err
		}
		outputs = append(outputs, g.chart)
	}
	if !g.quiet {
		prog.Close()
		summary(rt, j, pl, rep, outputs).Write(e.stderr)
	}
	return nil
}

// writeVideos writes the job's videos (pix holds them one after
// another) to --out, or with more than one to --out numbered from 1
// (videoPath), and returns the paths written.
func writeVideos(g *genFlags, j job, pix []float32) ([]string, error) {
	f, h, w := j.Shape()
	per := f * h * w * 3
	if per == 0 || len(pix)%per != 0 {
		return nil, fmt.Errorf("the run made %d values, not whole videos of %dx%dx%dx3", len(pix), f, h, w)
	}
	n := len(pix) / per
	var paths []string
	for i := range n {
		path := videoPath(g.out, i, n)
		if err := media.Write(path, pix[i*per:(i+1)*per], f, h, w, g.fps); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// writeLatents writes the job's final latents to path as tensor
// "latents" (float32), what diffusers' output_type="latent" returns.
func writeLatents(path string, j latentJob) error {
	v, shape := j.Latents()
	t := checkpoint.F32Tensor("latents", shape, v)
	if err := checkpoint.WriteFile(path, []checkpoint.RawTensor{t}, nil); err != nil {
		return fmt.Errorf("write latents: %w", err)
	}
	return nil
}

// videoPath is where video i of n goes: out itself for one video, else
// out with "-i" (from 1) before its extension, or after a frames
// directory's name (out ends in a slash): cat.mp4 -> cat-2.mp4,
// frames/ -> frames-2/.
func videoPath(out string, i, n int) string {
	if n == 1 {
		return out
	}
	if strings.HasSuffix(out, "/") {
		return fmt.Sprintf("%s-%d/", strings.TrimSuffix(out, "/"), i+1)
	}
	ext := filepath.Ext(out)
	return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(out, ext), i+1, ext)
}

// bars turns pipeline events into one progress bar per phase.
type bars struct {
	p                *progress.Progress
	text, steps, vae *progress.Bar
	// enc is image-to-video's encode of the image, before denoising.
	enc *progress.Bar
}

func newBars(p *progress.Progress) *bars { return &bars{p: p} }

// block counts the text encoder's layers and opens each phase's bar when
// its first block has run, so rates count from the phase's start.
func (b *bars) block(rt *pipeline.Runtime, comp string) {
	switch comp {
	case "text_encoder":
		if b.text == nil {
			b.text = b.p.Phase("text encoder", rt.Exec.Blocks(comp), "layers")
		}
		b.text.Add(1)
	case "transformer", "transformer_2":
		if b.steps == nil {
			b.text.Done()
			b.enc.Done()
			b.steps = b.p.Phase("denoise", 0, "steps")
		}
	case "vae":
		if b.steps == nil {
			if b.enc == nil {
				b.text.Done()
				b.enc = b.p.Phase("vae encode", 0, "frames")
			}
			return
		}
		if b.vae == nil {
			b.steps.Done()
			b.vae = b.p.Phase("vae decode", 0, "frames")
		}
	}
}

func (b *bars) step(done, total int) {
	b.steps.SetTotal(total)
	b.steps.Set(done)
}

func (b *bars) frame(done, total int) {
	b.vae.SetTotal(total)
	b.vae.Set(done)
}

func (b *bars) done() {
	for _, bar := range []*progress.Bar{b.text, b.enc, b.steps, b.vae} {
		if bar != nil {
			bar.Done()
		}
	}
}

// phaseOf maps a component to the pipeline phase it runs in.
var phaseOf = map[string]string{"text_encoder": pipeline.PhaseText, "image_encoder": pipeline.PhaseText, "transformer": pipeline.PhaseDenoise, "transformer_2": pipeline.PhaseDenoise, "vae": pipeline.PhaseVAE}

// phaseWindow finds a phase's span in the trace.
func phaseWindow(rec *trace.Recorder, name string) (trace.Span, bool) {
	for _, s := range rec.Spans() {
		if s.Kind == trace.Phase && s.Name == name {
			return s, true
		}
	}
	return trace.Span{}, false
}

func summary(rt *pipeline.Runtime, j job, pl planned, rep pipeline.Report, outputs []string) progress.Summary {
	m, plan := rep.Measured, pl.plan
	s := progress.Summary{Title: j.Title(), Plan: plan.Name, Outputs: outputs,
		Total: secs(m.TotalS), CopyWait: secs(m.CopyWaitS), CopyTime: secs(m.CopyS), BytesCopied: m.BytesCopied}
	for _, c := range j.Components() {
		cp := plan.For(c)
		stat := progress.ComponentStat{Name: c, Placement: placementText(cp), Budget: rep.Budget.DeviceBytes}
		if win, ok := phaseWindow(rt.Trace, phaseOf[c]); ok {
			stat.Peak, _ = rt.Trace.PeakIn(trace.CounterDeviceAllocated, win.Start, win.End())
			stat.Time = win.Dur
		}
		s.Components = append(s.Components, stat)
	}
	s.Memory = []progress.MemoryStat{
		{Name: "device", Peak: m.PeakDeviceBytes, Budget: rep.Budget.DeviceBytes},
		{Name: "host", Peak: m.PeakHostBytes, Budget: rep.Budget.HostBytes},
		{Name: "RSS", Peak: m.PeakRSSBytes},
	}
	if p := pl.pred; p != nil {
		s.Memory[0].Predicted, s.Memory[1].Predicted, s.Memory[2].Predicted = p.PeakDeviceBytes, p.PeakHostBytes, p.PeakRSSBytes
	}
	s.Phases = []progress.PhaseStat{
		{Name: "text encoder", Time: secs(m.TextEncoderS)},
		{Name: "denoise", Time: secs(m.DenoiseS), Units: len(m.StepS), Unit: "steps"},
		{Name: "vae", Time: secs(m.VAES)},
	}
	return s
}

func placementText(c residency.ComponentPlan) string {
	s := string(c.Placement)
	if c.Placement == residency.Stream {
		s += fmt.Sprintf(" k=%d", c.Prefetch)
		if c.Persistent > 0 {
			s += fmt.Sprintf(" n=%d", c.Persistent)
		}
	}
	if c.Moves() {
		s += " from " + string(c.Tier)
	}
	return s
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func writeChart(path string, rt *pipeline.Runtime, j job, pl planned, b pipeline.Budget) error {
	format, err := chart.FormatFromPath(path)
	if err != nil {
		return asUser(err)
	}
	info := chart.Info{Title: j.Title(), Subtitle: "plan " + pl.plan.Name, DeviceBudget: b.DeviceBytes, HostBudget: b.HostBytes}
	if pl.pred != nil {
		info.PredictedDevicePeak, info.PredictedHostPeak = pl.pred.PeakDeviceBytes, pl.pred.PeakHostBytes
	}
	data := chart.FromRecorder(rt.Trace, info)
	return pipeline.WriteFileAtomicFunc(path, func(w io.Writer) error {
		var buf bytes.Buffer
		if err := chart.Render(&buf, data, format); err != nil {
			return err
		}
		_, err := w.Write(buf.Bytes())
		return err
	})
}
