// Command trainsweep checks the training planner against real runs: for a
// synthetic Wan transformer at one sample shape, under one device and one
// host budget, it runs `ferry train` once per row of savings (a baseline,
// then bf16, block checkpointing, the EMA on the host, activations
// offloaded to the host, streamed weights, each added to the ones before,
// and finally auto), each at the largest batch the planner says fits with
// that row's knobs, and writes predicted beside measured device, host and
// RSS peaks and step time as a Markdown table.
//
// Each row trains on a fixed random batch (--fixed-batch): the honest way
// to time a step without a latent cache. The step time is the median of
// steps 2.. (step 1 touches fresh memory). A row whose knobs fit no batch
// prints the planner's smallest budgets instead.
//
// The batch is chosen by planner.ChooseTraining with the profile, hardware
// profile and budgets `ferry train` itself plans with (cli/train_auto.go's
// trainPlanning), so the prediction in the run's report is for the same
// request; the equivalent `ferry plan --train --arch` command is run too
// and its batch shown beside.
//
// With --paper it instead prints `ferry plan --train` for Wan-14B at
// 480x832x81 under 24, 16 and 12 GiB of device memory.
//
//	go run ./tools/trainsweep --model .cache/wan13b-transformer --arch wan2.1-t2v-1.3b
//	go run ./tools/trainsweep --paper
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"ferry/units"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"ferry/backend/cpu"
	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/lora"
	"ferry/model/wan"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
	"ferry/synth"
	"ferry/tensor"
)

// options are the command's flags.
type options struct {
	bin, model, arch, shape, out string
	device, host                 string
	deviceBytes, hostBytes       int64
	loraRank, textLen, steps     int
	emaDecay                     float64
	gap                          time.Duration
	rows                         string
	keep                         string
	paper, dryRun                bool
	maxBatch                     int
	paperOut, paperHost          string
	width, height, frames        int
}

func main() {
	var o options
	flag.StringVar(&o.bin, "ferry", "bin/ferry", "the ferry binary")
	flag.StringVar(&o.model, "model", ".cache/wan13b-transformer", "the synthetic model folder (written, transformer only, when missing)")
	flag.StringVar(&o.arch, "arch", "wan2.1-t2v-1.3b", "architecture to synthesize when --model is missing (and ferry plan --train --arch's)")
	flag.StringVar(&o.shape, "shape", "256x256x17", "WIDTHxHEIGHTxFRAMES of the samples")
	flag.IntVar(&o.loraRank, "lora-rank", 32, "LoRA rank")
	flag.IntVar(&o.textLen, "text-len", 512, "text tokens per sample")
	flag.IntVar(&o.steps, "steps", 3, "optimizer steps per run (the time is the median of steps 2..)")
	flag.Float64Var(&o.emaDecay, "ema-decay", 0.999, "EMA decay of every run (the EMA rows need one)")
	flag.StringVar(&o.device, "device-mem", "4GiB", "device budget")
	flag.StringVar(&o.host, "host-mem", "12GiB", "host budget")
	flag.DurationVar(&o.gap, "gap", 10*time.Second, "pause before each run, so that the memory the last one freed is cold again")
	flag.StringVar(&o.rows, "rows", "", "run only these rows (comma-separated names, e.g. baseline,auto)")
	flag.StringVar(&o.keep, "keep", "", "folder to keep every run's report in (ROW.json)")
	flag.StringVar(&o.out, "out", "", "write the Markdown here (default docs/sweeps/train-<arch>-<shape>.md; - for stdout)")
	flag.BoolVar(&o.dryRun, "dry-run", false, "print the planner's batch and predicted step per row, run nothing")
	flag.IntVar(&o.maxBatch, "max-batch", 0, "run at most this batch (0: the largest that fits); the planner's largest is still shown, and the prediction is for the batch run")
	flag.BoolVar(&o.paper, "paper", false, "print ferry plan --train for Wan-14B at 480x832x81 under 24, 16 and 12 GiB instead")
	flag.StringVar(&o.paperOut, "paper-out", "docs/sweeps/train-14b-paper.md", "where --paper writes")
	flag.StringVar(&o.paperHost, "paper-host-mem", "64GiB", "--paper's host budget")
	flag.Parse()
	var err error
	if o.paper {
		err = paper(o)
	} else {
		err = sweep(o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "trainsweep: %v\n", err)
		os.Exit(1)
	}
}

// row is one set of savings.
type row struct {
	name, what                    string
	dtype, ckpt, act, ema, plan   string
	auto                          bool
	batch, largest, planCmdBatch  int
	planCmd, trainCmd             []string
	infeasible                    string
	rep                           *report
	loadBefore, loadAfter, stepS  float64
	defaultStepS                  float64 // predicted with the built-in hardware profile
	planPred                      planner.TrainPrediction
	planErr                       string
	refusedRun                    string
	wall                          time.Duration
	planCmdOut                    string
	batchFile                     string
	predictedHere, predictedInRun bool
}

// rows are the savings in the order they are added.
func rows() []*row {
	return []*row{
		{name: "baseline", what: "fp32, no checkpointing, EMA on the device, activations on the device, weights resident", dtype: "fp32", ckpt: "none", act: "device", ema: "device", plan: "resident"},
		{name: "+bf16", what: "bf16 products and saved activations", dtype: "bf16", ckpt: "none", act: "device", ema: "device", plan: "resident"},
		{name: "+block checkpointing", what: "each block keeps only its input", dtype: "bf16", ckpt: "block", act: "device", ema: "device", plan: "resident"},
		{name: "+EMA on host", what: "the EMA in the host tier", dtype: "bf16", ckpt: "block", act: "device", ema: "host", plan: "resident"},
		{name: "+activation offload", what: "kept activations wait in the host tier", dtype: "bf16", ckpt: "block", act: "host", ema: "host", plan: "resident"},
		{name: "+streamed weights", what: "base weights streamed from the host tier, k=1", dtype: "bf16", ckpt: "block", act: "host", ema: "host", plan: "stream"},
		{name: "auto", what: "everything chosen by the planner (dtype: ferry train's default here)", auto: true},
	}
}

// report is the part of ferry train's --report the sweep reads.
type report struct {
	Request struct {
		BatchSize      int    `json:"batch_size"`
		Checkpointing  string `json:"checkpointing"`
		ActivationTier string `json:"activation_tier"`
		EMATier        string `json:"ema_tier"`
		DType          string `json:"dtype"`
	} `json:"request"`
	Steps []struct {
		Seconds float64 `json:"seconds"`
	} `json:"steps"`
	Measured struct {
		PeakDevice   int64 `json:"peak_device_bytes"`
		PeakReserved int64 `json:"peak_device_reserved_bytes"`
		PeakHost     int64 `json:"peak_host_bytes"`
		PeakRSS      int64 `json:"peak_rss_bytes"`
	} `json:"measured"`
	Memory struct {
		TapeDeviceBytes         int64 `json:"tape_device_bytes"`
		CheckpointingFreedBytes int64 `json:"checkpointing_freed_bytes"`
		BF16FreedBytes          int64 `json:"bf16_tape_freed_bytes"`
		EMADeviceBytes          int64 `json:"ema_device_bytes"`
		EMAHostFreedBytes       int64 `json:"ema_host_freed_bytes"`
	} `json:"memory"`
	Streaming struct {
		Placement string `json:"placement"`
		Forward   struct {
			CopyWaitPerStepS float64 `json:"copy_wait_per_step_s"`
		} `json:"forward"`
		Backward struct {
			CopyWaitPerStepS float64 `json:"copy_wait_per_step_s"`
		} `json:"backward"`
	} `json:"streaming"`
	Predicted *planner.TrainPrediction `json:"predicted"`
}

// sweep runs the rows and writes the table.
func sweep(o options) error {
	if err := o.parse(); err != nil {
		return err
	}
	if o.out == "" {
		o.out = fmt.Sprintf("docs/sweeps/train-%s-%s.md", shortArch(o.arch), o.shape)
	}
	if err := ensureModel(o.model, o.arch); err != nil {
		return err
	}
	cfg, err := readConfig(o.model)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "trainsweep-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rs := rows()
	if o.rows != "" {
		rs = pick(rs, strings.Split(o.rows, ","))
	}
	start := time.Now()
	ran := false
	for _, r := range rs {
		if err := o.choose(r, cfg); err != nil {
			return err
		}
		if r.infeasible != "" {
			fmt.Fprintf(os.Stderr, "%s: %s\n", r.name, r.infeasible)
			continue
		}
		if o.dryRun {
			p := r.planPred
			fmt.Printf("%-22s %-55s batch %2d of %2d (plan --train: %d)  step %7.1fs  device %s  host %s  RSS %s\n", r.name, knobs(r), r.batch, r.largest, r.planCmdBatch,
				p.StepS, mib(p.PeakDeviceReservedBytes), mib(p.PeakHostBytes), mib(p.PeakRSSBytes))
			continue
		}
		if ran {
			time.Sleep(o.gap)
		}
		fmt.Fprintf(os.Stderr, "%s: batch %d\n", r.name, r.batch)
		if err := o.run(r, cfg, dir); err != nil {
			return err
		}
		ran = r.refusedRun == ""
		if r.rep != nil {
			fmt.Fprintf(os.Stderr, "%s: step %.2fs (predicted %.2fs), device %s (predicted %s)\n", r.name, r.stepS,
				pr(r).StepS, mib(r.rep.Measured.PeakDevice), mib(pr(r).PeakDeviceBytes))
		}
		// The table so far, so that a sweep cut short leaves its rows.
		if err := writeOut(o.out, o.markdown(rs, cfg, time.Since(start))); err != nil {
			return err
		}
	}
	if o.dryRun {
		return nil
	}
	md := o.markdown(rs, cfg, time.Since(start))
	return writeOut(o.out, md)
}

// parse reads the shape and budgets.
func (o *options) parse() error {
	if _, err := fmt.Sscanf(o.shape, "%dx%dx%d", &o.width, &o.height, &o.frames); err != nil {
		return fmt.Errorf("--shape %q: want WIDTHxHEIGHTxFRAMES", o.shape)
	}
	var err error
	if o.deviceBytes, err = units.ParseSize(o.device); err != nil {
		return fmt.Errorf("--device-mem: %w", err)
	}
	if o.hostBytes, err = units.ParseSize(o.host); err != nil {
		return fmt.Errorf("--host-mem: %w", err)
	}
	if o.steps < 2 {
		return fmt.Errorf("--steps %d: need at least 2 (step 1 is not timed)", o.steps)
	}
	return nil
}

func pick(rs []*row, names []string) []*row {
	var out []*row
	for _, r := range rs {
		for _, n := range names {
			if strings.TrimSpace(n) == r.name {
				out = append(out, r)
			}
		}
	}
	return out
}

// ensureModel writes the transformer of arch into dir unless dir holds a
// model already (the rest of the pipeline is not needed to train).
func ensureModel(dir, arch string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	a, err := synth.Lookup(arch)
	if err != nil {
		return err
	}
	var keep []synth.Component
	for _, c := range a.Components {
		if c.Name == "transformer" {
			keep = append(keep, c)
		}
	}
	a.Components = keep
	fmt.Fprintf(os.Stderr, "writing the %s transformer (%s) into %s\n", arch, mib(synth.TotalBytes(a, synth.Options{DType: dtype.BF16})), dir)
	return synth.Write(dir, a, synth.Options{DType: dtype.BF16})
}

// transformerDir is where the transformer's config and weights are, as
// ferry train finds them.
func transformerDir(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, checkpoint.ModelIndexName)); err == nil {
		return filepath.Join(dir, "transformer")
	}
	return dir
}

func readConfig(dir string) (wan.Config, error) {
	return wan.ReadConfig(transformerDir(dir))
}

// request is the training request of one sample (the batch is searched).
func (o options) request() planner.TrainRequest {
	return planner.TrainRequest{Batch: 1, Frames: o.frames, Height: o.height, Width: o.width, TextLen: o.textLen,
		LoRARank: o.loraRank, LoRATargets: lora.DefaultTargets, EMA: o.emaDecay > 0}
}

// budgets are those ferry train plans with (cli/planning.go's
// planningBudgets with both budgets given).
func (o options) budgets() planner.Budgets {
	m := hwprofile.ReadMemory()
	return planner.Budgets{DeviceBytes: o.deviceBytes, HostBytes: o.hostBytes, RSSBytes: m.Total, FreeBytes: m.Free,
		CacheBytes: m.FileCache, FragmentedBytes: cpu.FragmentedFree()}
}

func parseDT(s string) dtype.DType {
	if s == "bf16" {
		return dtype.BF16
	}
	return dtype.F32
}

// defaultDType is ferry train's default --dtype here.
func defaultDType() string {
	if pipeline.DefaultComputeDType() == dtype.BF16 {
		return "bf16"
	}
	return "fp32"
}

func placement(name string) *residency.Plan {
	cp := residency.ComponentPlan{Placement: residency.Resident}
	if name == "stream" {
		cp = residency.ComponentPlan{Placement: residency.Stream, Tier: residency.TierHost, Prefetch: 1}
	}
	return &residency.Plan{Name: name, Components: map[string]residency.ComponentPlan{planner.Transformer: cp}}
}

// choose asks the planner for the row's largest batch, as ferry train
// would plan it, and runs the equivalent ferry plan --train command.
func (o options) choose(r *row, cfg wan.Config) error {
	if r.auto {
		r.dtype = defaultDType()
	}
	prof, err := planner.NewTrainProfile(o.model, cfg, dtype.BF16)
	if err != nil {
		return err
	}
	prof.Compute = parseDT(r.dtype)
	hw, _, err := hwprofile.LoadOrDefault("")
	if err != nil {
		return err
	}
	s := planner.TrainSearch{DType: []dtype.DType{parseDT(r.dtype)}, AutoBatch: true}
	if !r.auto {
		s.Checkpointing, s.ActivationTier, s.EMATier = []string{r.ckpt}, []string{r.act}, []string{r.ema}
		s.Plan = placement(r.plan)
	}
	choice, pred, _, err := planner.ChooseTraining(prof, hw, o.request(), o.budgets(), s)
	if _, ok := planner.AsTrainInfeasible(err); ok {
		r.infeasible = err.Error()
	} else if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	} else {
		r.largest, r.batch, r.planPred = choice.Batch, choice.Batch, pred
		if o.maxBatch > 0 && r.batch > o.maxBatch {
			// The run's batch: its plan is chosen again (auto may pick
			// another placement for fewer samples).
			req := o.request()
			req.Batch, s.AutoBatch = o.maxBatch, false
			if choice, pred, _, err = planner.ChooseTraining(prof, hw, req, o.budgets(), s); err != nil {
				return fmt.Errorf("%s at batch %d: %w", r.name, o.maxBatch, err)
			}
			r.batch, r.planPred = o.maxBatch, pred
		}
		if r.auto {
			k := choice.Knobs
			r.ckpt, r.act, r.ema, r.plan = k.Checkpointing, k.ActivationTier, k.EMATier, describePlan(choice.Plan)
		}
	}
	o.planCommand(r)
	return nil
}

// planCommand runs ferry plan --train --arch for the row and reads its
// batch (a cross-check: the built-in profile against the folder's).
func (o options) planCommand(r *row) {
	args := []string{"plan", "--train", "--arch", o.arch, "--width", fmt.Sprint(o.width), "--height", fmt.Sprint(o.height),
		"--frames", fmt.Sprint(o.frames), "--max-sequence-length", fmt.Sprint(o.textLen), "--lora-rank", fmt.Sprint(o.loraRank),
		"--dtype", r.dtype, "--batch-size", "auto", "--device-mem", o.device, "--host-mem", o.host}
	if o.emaDecay > 0 {
		args = append(args, "--ema")
	}
	if !r.auto {
		args = append(args, "--checkpointing", r.ckpt, "--activation-tier", r.act, "--ema-tier", r.ema, "--plan", r.plan)
	}
	r.planCmd = append([]string{o.bin}, args...)
	out, err := exec.Command(o.bin, append(args, "--json")...).CombinedOutput()
	if err != nil {
		r.planCmdOut = strings.TrimSpace(string(out))
		return
	}
	var v struct {
		Choice struct {
			Batch int `json:"batch"`
		} `json:"choice"`
	}
	if json.Unmarshal(out, &v) == nil {
		r.planCmdBatch = v.Choice.Batch
	}
}

func describePlan(p *residency.Plan) string {
	cp := p.For(planner.Transformer)
	switch cp.Placement {
	case residency.Stream:
		s := fmt.Sprintf("stream k=%d n=%d", cp.Prefetch, cp.Persistent)
		if cp.Tier == residency.TierDisk {
			s += " disk"
		}
		return s
	case "", residency.Resident:
		return "resident"
	}
	return string(cp.Placement)
}

// run writes the row's fixed batch and runs ferry train on it.
func (o options) run(r *row, cfg wan.Config, dir string) error {
	r.batchFile = filepath.Join(dir, fmt.Sprintf("batch-%d.safetensors", r.batch))
	if err := writeBatch(r.batchFile, r.batch, cfg, o); err != nil {
		return err
	}
	rep := filepath.Join(dir, "r.json")
	os.Remove(rep)
	args := []string{"train", "--model", o.model, "--fixed-batch", r.batchFile, "--out", filepath.Join(dir, "lora.safetensors"),
		"--steps", fmt.Sprint(o.steps), "--batch-size", fmt.Sprint(r.batch), "--lora-rank", fmt.Sprint(o.loraRank),
		"--ema-decay", fmt.Sprint(o.emaDecay), "--device-mem", o.device, "--host-mem", o.host, "--dtype", r.dtype,
		"--report", rep, "--quiet"}
	if r.auto {
		args = append(args, "--plan", "auto")
	} else {
		args = append(args, "--plan", r.plan, "--checkpointing", r.ckpt, "--activation-tier", r.act, "--ema-tier", r.ema)
	}
	r.trainCmd = []string{o.bin}
	for _, a := range args {
		r.trainCmd = append(r.trainCmd, strings.ReplaceAll(a, dir, "$TMP"))
	}
	r.loadBefore = loadAvg()
	t0 := time.Now()
	out, err := exec.Command(o.bin, args...).CombinedOutput()
	r.wall = time.Since(t0)
	r.loadAfter = loadAvg()
	if err != nil {
		r.refusedRun = strings.TrimSpace(string(out))
		if r.refusedRun == "" {
			r.refusedRun = err.Error()
		}
		return nil
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	var v report
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("%s: report: %w", r.name, err)
	}
	r.rep = &v
	r.stepS = medianStep(v)
	r.defaultStepS = o.defaultStep(r, cfg)
	if r.auto {
		r.ckpt, r.act, r.ema = v.Request.Checkpointing, v.Request.ActivationTier, v.Request.EMATier
		r.plan = v.Streaming.Placement
	}
	if o.keep != "" {
		if err := os.MkdirAll(o.keep, 0o755); err != nil {
			return err
		}
		name := strings.NewReplacer("+", "", " ", "-").Replace(r.name) + ".json"
		if err := os.WriteFile(filepath.Join(o.keep, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// defaultStep predicts the run's step with the built-in hardware profile
// (what the planner assumes before ferry calibrate), to show what the
// calibration changes; 0 when it cannot.
func (o options) defaultStep(r *row, cfg wan.Config) float64 {
	p := pr(r)
	prof, err := planner.NewTrainProfile(o.model, cfg, dtype.BF16)
	if err != nil {
		return 0
	}
	prof.Compute = parseDT(r.dtype)
	plan := &residency.Plan{Name: p.Plan, Components: map[string]residency.ComponentPlan{planner.Transformer: {
		Placement: p.Placement, Tier: p.Tier, Prefetch: p.Prefetch, Persistent: p.Persistent}}}
	k := p.Knobs
	k.DType = parseDT(r.dtype)
	req := o.request()
	req.Batch = r.batch
	d, err := planner.PredictTraining(prof, hwprofile.Default(), plan, req, k, o.budgets())
	if err != nil {
		return 0
	}
	return d.StepS
}

// pr is the prediction the run's report carries, or the planner's own
// when the report has none.
func pr(r *row) planner.TrainPrediction {
	if r.rep != nil && r.rep.Predicted != nil {
		return *r.rep.Predicted
	}
	return r.planPred
}

// medianStep is the median time of steps 2.. (step 1 maps fresh memory).
func medianStep(r report) float64 {
	var ts []float64
	for i, s := range r.Steps {
		if i > 0 {
			ts = append(ts, s.Seconds)
		}
	}
	if len(ts) == 0 {
		return 0
	}
	sort.Float64s(ts)
	if len(ts)%2 == 1 {
		return ts[len(ts)/2]
	}
	return (ts[len(ts)/2-1] + ts[len(ts)/2]) / 2
}

// writeBatch writes a random batch of n samples of the sweep's shape:
// latents and noise [n, C, F', H', W'], sigmas [n], the text
// [n, textLen, textDim].
func writeBatch(path string, n int, cfg wan.Config, o options) error {
	rng := rand.New(rand.NewPCG(uint64(n), 19))
	f, h, w := (o.frames-1)/4+1, o.height/8, o.width/8
	lat := []int{n, cfg.InChannels, f, h, w}
	normal := func(shape []int) []float32 {
		count := 1
		for _, d := range shape {
			count *= d
		}
		d := make([]float32, count)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
		return d
	}
	sig := make([]float32, n)
	for i := range sig {
		sig[i] = 0.05 + 0.9*rng.Float32()
	}
	text := []int{n, o.textLen, cfg.TextDim}
	raw := func(name string, shape []int, d []float32) checkpoint.RawTensor {
		return checkpoint.RawTensor{Name: name, DType: dtype.F32, Shape: shape, Data: tensor.FromF32(d, len(d)).Raw()}
	}
	ts := []checkpoint.RawTensor{raw("latents", lat, normal(lat)), raw("noise", lat, normal(lat)),
		raw("sigmas", []int{n}, sig), raw("encoder_hidden_states", text, normal(text))}
	return checkpoint.WriteFile(path, ts, map[string]string{"format": "pt"})
}

// loadAvg is the one-minute load average.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// machine names the CPU and its widest vector extension.
func machine() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	name := "unknown CPU"
	var flags string
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if name == "unknown CPU" {
				name = strings.TrimSpace(v)
			}
		case "flags":
			if flags == "" {
				flags = " " + v + " "
			}
		}
	}
	isa := "no AVX2"
	switch {
	case strings.Contains(flags, " avx512_bf16 "):
		isa = "AVX-512 with BF16"
	case strings.Contains(flags, " avx512f "):
		isa = "AVX-512"
	case strings.Contains(flags, " avx2 "):
		isa = "AVX2"
	}
	cores, _ := exec.Command("nproc").Output()
	return fmt.Sprintf("%s, %s, %s cores", name, isa, strings.TrimSpace(string(cores)))
}

// hwSource says which hardware profile the planner read.
func hwSource() string {
	path, _ := hwprofile.Path()
	p, found, err := hwprofile.LoadOrDefault("")
	switch {
	case err != nil:
		return "unreadable: " + err.Error()
	case !found:
		return fmt.Sprintf("none at %s: the built-in default (source %q)", path, p.Source)
	}
	return fmt.Sprintf("%s (source %q)", path, p.Source)
}

// markdown is the sweep's document.
func (o options) markdown(rs []*row, cfg wan.Config, took time.Duration) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Training under budgets: %s (synthetic), %dx%d, %d frames, LoRA rank %d\n\n", o.arch, o.width, o.height, o.frames, o.loraRank)
	tokens := ((o.frames-1)/4 + 1) * (o.height / 16) * (o.width / 16)
	fmt.Fprintf(&b, "Measured %s on %s. Budgets: device %s, host %s. Latent %dx%dx%d, %d tokens per sample, text %d. "+
		"Every run keeps an EMA (decay %g), trains %d steps on one fixed random batch of the row's size; the step time is the median of steps 2..%d. "+
		"Each run started %s after the one before. Sweep took %s. Hardware profile: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), o.device, o.host, (o.frames-1)/4+1, o.height/8, o.width/8, tokens, o.textLen,
		o.emaDecay, o.steps, o.steps, o.gap, took.Round(time.Second), hwSource())
	fmt.Fprintf(&b, "```sh\ngo run ./tools/trainsweep --model %s --arch %s --shape %s --device-mem %s --host-mem %s --lora-rank %d --steps %d --gap %s --max-batch %d\n```\n\n",
		o.model, o.arch, o.shape, o.device, o.host, o.loraRank, o.steps, o.gap, o.maxBatch)
	b.WriteString("Ratios are predicted/measured. Device peaks: allocated, and reserved (what the budget caps). ")
	b.WriteString("Flags: `!` a peak off by more than 5%, a step time by more than 25%.\n\n")
	if o.maxBatch > 0 {
		fmt.Fprintf(&b, "Runs are capped at batch %d for time (`--max-batch`); \"largest\" is the planner's largest batch that fits, \"run\" the batch run and predicted.\n\n", o.maxBatch)
	}
	b.WriteString("| row | knobs | largest / run batch | device peak pred / meas | ratio | reserved pred / meas | ratio | host peak pred / meas | ratio | RSS pred / meas | ratio | step pred / meas | ratio | uncalibrated pred | ratio | samples/s | load |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		b.WriteString(tableRow(r))
	}
	b.WriteString("\n## Per row\n\n")
	for _, r := range rs {
		details(&b, r)
	}
	return b.String()
}

func knobs(r *row) string {
	return fmt.Sprintf("%s, ckpt %s, act %s, EMA %s, %s", r.dtype, r.ckpt, r.act, r.ema, r.plan)
}

func tableRow(r *row) string {
	switch {
	case r.infeasible != "":
		return fmt.Sprintf("| %s | %s | none fits | %s |\n", r.name, knobs(r), strings.ReplaceAll(r.infeasible, "|", "/"))
	case r.rep == nil && r.refusedRun == "":
		return fmt.Sprintf("| %s | %s | %d / %d | not run yet |\n", r.name, knobs(r), r.largest, r.batch)
	case r.rep == nil:
		return fmt.Sprintf("| %s | %s | %d / %d | run refused: %s |\n", r.name, knobs(r), r.largest, r.batch, strings.ReplaceAll(oneLine(r.refusedRun), "|", "/"))
	}
	m, p := r.rep.Measured, pr(r)
	pair := func(pred, meas int64, tol float64) (string, string) {
		return fmt.Sprintf("%s / %s", mib(pred), mib(meas)), ratio(float64(pred), float64(meas), tol)
	}
	dv, dr := pair(p.PeakDeviceBytes, m.PeakDevice, 0.05)
	rv, rr := pair(p.PeakDeviceReservedBytes, m.PeakReserved, 0.05)
	hv, hr := pair(p.PeakHostBytes, m.PeakHost, 0.05)
	sv, sr := pair(p.PeakRSSBytes, m.PeakRSS, 0.05)
	return fmt.Sprintf("| %s | %s | %d / %d | %s | %s | %s | %s | %s | %s | %s | %s | %.2f s / %.2f s | %s | %.2f s | %s | %.3f | %.2f-%.2f |\n",
		r.name, knobs(r), r.largest, r.batch, dv, dr, rv, rr, hv, hr, sv, sr, p.StepS, r.stepS, ratio(p.StepS, r.stepS, 0.25), r.defaultStepS, ratio(r.defaultStepS, r.stepS, 0.25),
		float64(r.batch)/r.stepS, r.loadBefore, r.loadAfter)
}

// details lists a row's commands and what the prediction is made of.
func details(b *bytes.Buffer, r *row) {
	fmt.Fprintf(b, "### %s: %s\n\n", r.name, r.what)
	fmt.Fprintf(b, "```sh\n%s\n", strings.Join(r.planCmd, " "))
	if r.trainCmd != nil {
		fmt.Fprintf(b, "%s\n", strings.Join(r.trainCmd, " "))
	}
	b.WriteString("```\n\n")
	if r.planCmdOut != "" {
		fmt.Fprintf(b, "ferry plan --train: %s\n\n", oneLine(r.planCmdOut))
	} else if r.planCmdBatch != r.largest && r.infeasible == "" {
		fmt.Fprintf(b, "ferry plan --train --arch chose batch %d, the folder's profile %d.\n\n", r.planCmdBatch, r.largest)
	}
	if r.infeasible != "" {
		fmt.Fprintf(b, "Not run: %s\n\n", r.infeasible)
		return
	}
	if r.rep == nil {
		if r.refusedRun != "" {
			fmt.Fprintf(b, "Run refused: %s\n\n", oneLine(r.refusedRun))
		}
		return
	}
	p, m := pr(r), r.rep
	var steps []string
	for _, s := range m.Steps {
		steps = append(steps, fmt.Sprintf("%.2f", s.Seconds))
	}
	fmt.Fprintf(b, "Steps %s s (wall %s). Predicted step %.2f s: forward %.2f, backward %.2f (recompute %.2f), weight stalls %.2f/%.2f, activation copies %.2f (stall %.2f), optimizer %.2f.\n",
		strings.Join(steps, ", "), r.wall.Round(time.Second), p.StepS, p.ForwardS, p.BackwardS, p.RecomputeS, p.StallForwardS, p.StallBackwardS, p.ActivationCopyS, p.ActivationStallS, p.OptimizerS)
	fmt.Fprintf(b, "Measured weight stalls per step %.2f/%.2f s (forward/backward), placement %s.\n",
		m.Streaming.Forward.CopyWaitPerStepS, m.Streaming.Backward.CopyWaitPerStepS, m.Streaming.Placement)
	fmt.Fprintf(b, "Predicted: weights on the device %s, trainable %s, saved per block %s (input %s), host state %s. "+
		"Measured: tape on the device %s, checkpointing freed %s, bf16 storage freed %s, EMA on the device %s, EMA on the host freed %s.\n\n",
		mib(p.WeightDeviceBytes), mib(p.TrainableBytes), mib(p.SavedBytes), mib(p.InputBytes), mib(p.HostStateBytes),
		mib(m.Memory.TapeDeviceBytes), mib(m.Memory.CheckpointingFreedBytes), mib(m.Memory.BF16FreedBytes), mib(m.Memory.EMADeviceBytes), mib(m.Memory.EMAHostFreedBytes))
}

func ratio(pred, meas, tol float64) string {
	if meas == 0 {
		if pred == 0 {
			return "1.00"
		}
		return "n/a"
	}
	x := pred / meas
	s := fmt.Sprintf("%.3f", x)
	if x > 1+tol || x < 1-tol {
		s += " !"
	}
	return s
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func shortArch(a string) string {
	a = strings.TrimPrefix(a, "wan2.1-t2v-")
	return a
}

// writeOut writes the document through a temp file and a rename ("-":
// stdout).
func writeOut(path, s string) error {
	if path == "-" {
		_, err := os.Stdout.WriteString(s)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", path)
	return nil
}
