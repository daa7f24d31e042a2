package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"ferry/checkpoint"
	"ferry/dataset"
	"ferry/dtype"
	"ferry/lora"
	"ferry/model/wan"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/progress"
	"ferry/tensor"
	"ferry/train"
)

func init() {
	register("train", "fine-tune a Wan transformer (LoRA or full) with flow matching", runTrain)
}

// trainFlags are train's flags.
type trainFlags struct {
	model, data, fixedBatch, out  string
	steps, batch, accum           int
	seed                          uint64
	sampling                      string
	flowShift                     float64
	loraRank                      int
	loraAlpha                     float64
	loraTargets, loraInit         string
	full                          bool
	lr                            float64
	betas                         string
	adamEps, weightDecay          float64
	maxGradNorm, emaDecay         float64
	saveEvery                     int
	checkpointDir, resume         string
	gradsOut, report, chart       string
	quiet                         bool
	deviceMem, hostMem            sizeFlag
	set                           map[string]bool // flags given on the command line
	adam                          train.AdamConfig
	timesteps                     train.Timesteps
	targets                       []string
	loraInitAdapters              []lora.Adapter
	transformerDir, weightsSource string
	batchAuto                     bool // --batch-size auto
	// The memory knobs (train_knobs.go).
	knobs trainKnobs
	// The weights' residency: --plan, --trace (train_stream.go).
	stream trainStream
}

func (f *trainFlags) define(e *env) *flag.FlagSet {
	fs := newFlags(e, "train", "--model DIR (--data CACHE | --fixed-batch FILE) --out FILE.safetensors --steps N [flags]")
	fs.StringVar(&f.model, "model", "", "a diffusers Wan pipeline folder (its transformer/ is trained) or a transformer folder")
	fs.StringVar(&f.data, "data", "", "latent cache folder to train on (ferry cache)")
	fs.StringVar(&f.fixedBatch, "fixed-batch", "", "train on this one batch every step: safetensors with latents, noise, sigmas, encoder_hidden_states")
	fs.StringVar(&f.out, "out", "", "write the trained LoRA (or, with --full, the transformer weights) here, .safetensors")
	fs.IntVar(&f.steps, "steps", 0, "optimizer steps to train for (a resumed run counts those already done)")
	f.batch = 1
	fs.Var(batchFlag{n: &f.batch, auto: &f.batchAuto}, "batch-size", "samples per micro-batch, or auto: the largest that fits the budgets")
	fs.IntVar(&f.accum, "grad-accum", 1, "micro-batches whose gradients are averaged into each step")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the data order, timesteps, noise and LoRA initialisation")
	fs.StringVar(&f.sampling, "timestep-sampling", "shift", "how sigma is drawn: uniform, logit-normal or shift")
	fs.Float64Var(&f.flowShift, "discrete-flow-shift", 3, "the shift of --timestep-sampling shift")
	fs.IntVar(&f.loraRank, "lora-rank", 16, "LoRA rank")
	fs.Float64Var(&f.loraAlpha, "lora-alpha", 0, "LoRA alpha; adapters apply with alpha/rank (default: the rank, scale 1)")
	fs.StringVar(&f.loraTargets, "lora-targets", strings.Join(lora.DefaultTargets, ","), "comma-separated Linears to adapt, matched as module-name suffixes")
	fs.StringVar(&f.loraInit, "lora-init", "", "start the LoRA from this file's A and B (default: A Kaiming-uniform, B zero)")
	fs.BoolVar(&f.full, "full", false, "train every transformer weight instead of a LoRA (float32 master weights)")
	fs.Float64Var(&f.lr, "lr", 1e-4, "AdamW learning rate")
	fs.StringVar(&f.betas, "betas", "0.9,0.999", "AdamW betas B1,B2")
	fs.Float64Var(&f.adamEps, "adam-eps", 1e-8, "AdamW epsilon")
	fs.Float64Var(&f.weightDecay, "weight-decay", 0.01, "AdamW decoupled weight decay")
	fs.Float64Var(&f.maxGradNorm, "max-grad-norm", 0, "clip the global gradient norm to this (0: off)")
	fs.Float64Var(&f.emaDecay, "ema-decay", 0, "keep an EMA of the trained weights with this decay, saved beside --out as *.ema.safetensors (0: none)")
	fs.IntVar(&f.saveEvery, "save-every", 0, "save a checkpoint every N steps and at the end (0: only on Ctrl-C)")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "folder of checkpoints (default: beside --out, <out>.checkpoints)")
	fs.StringVar(&f.resume, "resume", "", "continue from a checkpoint folder (or the newest one in a --checkpoint-dir)")
	fs.StringVar(&f.gradsOut, "grads-out", "", "write step 1's gradients here (grad.<name>, .safetensors)")
	fs.StringVar(&f.report, "report", "", "write the run's report (JSON) here")
	fs.StringVar(&f.chart, "chart", "", "write a loss chart (.svg) here")
	fs.BoolVar(&f.quiet, "quiet", false, "print nothing but errors")
	fs.Var(&f.deviceMem, "device-mem", "device memory budget, e.g. 8GiB (default: unlimited)")
	fs.Var(&f.hostMem, "host-mem", "host memory budget, e.g. 16GiB (default: unlimited)")
	f.knobs.define(fs)
	f.stream.define(fs)
	return fs
}

// trainStepHook, when set (tests), is called after every step.
var trainStepHook func(step int)

func runTrain(e *env, args []string) error {
	f := &trainFlags{}
	fs := f.define(e)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.check(); err != nil {
		return err
	}
	cfg, set, err := openTransformer(f.model)
	if err != nil {
		return err
	}
	defer set.Close()
	f.weightsSource = set.Path()
	if f.batchAuto {
		if err := chooseTrainBatch(f, cfg); err != nil {
			return err
		}
	}
	data, err := f.openData(cfg)
	if err != nil {
		return err
	}
	return trainRun(e, f, cfg, set, data)
}

// check validates the flags that need no file.
func (f *trainFlags) check() error {
	switch {
	case f.model == "":
		return userf("--model DIR is required (a Wan pipeline folder or its transformer folder)")
	case f.data == "" && f.fixedBatch == "":
		return userf("give --data CACHE (a latent cache) or --fixed-batch FILE")
	case f.data != "" && f.fixedBatch != "":
		return userf("--data and --fixed-batch exclude each other; give one")
	case f.out == "":
		return userf("--out FILE.safetensors is required")
	case !strings.HasSuffix(f.out, ".safetensors"):
		return userf("--out %s: the output is a .safetensors file", f.out)
	case f.steps <= 0:
		return userf("--steps N is required (> 0)")
	case f.batch <= 0:
		return userf("--batch-size must be >= 1, got %d", f.batch)
	case f.accum <= 0:
		return userf("--grad-accum must be >= 1, got %d", f.accum)
	case f.gradsOut != "" && !strings.HasSuffix(f.gradsOut, ".safetensors"):
		return userf("--grads-out %s: write gradients to a .safetensors file", f.gradsOut)
	case f.chart != "" && strings.ToLower(filepath.Ext(f.chart)) != ".svg":
		return userf("--chart %s: the loss chart is written as .svg", f.chart)
	}
	if f.full {
		for _, n := range []string{"lora-rank", "lora-alpha", "lora-targets", "lora-init"} {
			if f.set[n] {
				return userf("--%s is for LoRA training; drop it or drop --full", n)
			}
		}
	}
	if !f.full && f.loraRank <= 0 {
		return userf("--lora-rank must be >= 1, got %d", f.loraRank)
	}
	if f.loraAlpha == 0 {
		f.loraAlpha = float64(f.loraRank)
	}
	if !(f.loraAlpha > 0) {
		return userf("--lora-alpha must be > 0, got %g", f.loraAlpha)
	}
	f.targets = append(f.targets, splitList(f.loraTargets)...)
	if !f.full && len(f.targets) == 0 {
		return userf("--lora-targets is empty; name the Linears to adapt (default %s)", strings.Join(lora.DefaultTargets, ","))
	}
	b1, b2, err := parseBetas(f.betas)
	if err != nil {
		return err
	}
	f.adam = train.AdamConfig{LR: f.lr, Beta1: b1, Beta2: b2, Eps: f.adamEps, WeightDecay: f.weightDecay}
	samp, err := train.ParseSigmaSampling(f.sampling)
	if err != nil {
		return userf("--timestep-sampling: %v", err)
	}
	f.timesteps = train.Timesteps{Sampling: samp, FlowShift: f.flowShift}
	if err := f.config().Check(); err != nil {
		return userf("%v (see ferry train -h)", err)
	}
	if err := f.knobs.check(); err != nil {
		return err
	}
	if f.checkpointDir == "" {
		f.checkpointDir = strings.TrimSuffix(f.out, ".safetensors") + ".checkpoints"
	}
	for _, p := range []string{f.out, f.gradsOut, f.report, f.chart} {
		if err := checkWritable(p); err != nil {
			return err
		}
	}
	if f.loraInit != "" {
		ads, err := lora.Read(f.loraInit)
		if err != nil {
			return userf("--lora-init: %v", err)
		}
		for _, a := range ads {
			if a.HasBias {
				return userf("--lora-init: %s: adapter %s has a bias (diff_b or lora_B.bias); ferry trains lora_A/lora_B pairs only", f.loraInit, a.Module)
			}
		}
		f.loraInitAdapters = ads
	}
	return nil
}

// config is the trainer's configuration from the flags.
func (f *trainFlags) config() train.Config {
	return train.Config{Steps: f.steps, GradAccum: f.accum, Timesteps: f.timesteps, Adam: f.adam,
		MaxGradNorm: f.maxGradNorm, EMADecay: f.emaDecay, SaveEvery: f.saveEvery, CheckpointDir: f.checkpointDir}
}

func parseBetas(s string) (float64, float64, error) {
	a, b, ok := strings.Cut(s, ",")
	b1, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	b2, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, userf("--betas %q: give two numbers B1,B2, e.g. 0.9,0.999", s)
	}
	return b1, b2, nil
}

// openTransformer finds the transformer of --model: a pipeline folder's
// transformer/ or a folder with config.json and the weights.
func openTransformer(dir string) (wan.Config, *checkpoint.Set, error) {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return wan.Config{}, nil, userf("--model %s: no such folder", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpoint.ModelIndexName)); err == nil {
		dir = filepath.Join(dir, "transformer")
	}
	cfg, err := wan.ReadConfig(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return wan.Config{}, nil, userf("--model: %s has no config.json (give a Wan pipeline folder or its transformer folder)", dir)
	}
	if err != nil {
		return wan.Config{}, nil, userf("--model %v", err)
	}
	set, err := checkpoint.OpenSetAs(dir, wan.Class)
	if err != nil {
		return wan.Config{}, nil, userf("--model %s: %v", dir, err)
	}
	return cfg, set, nil
}

// openData opens --fixed-batch or --data.
func (f *trainFlags) openData(cfg wan.Config) (train.Data, error) {
	if f.fixedBatch != "" {
		b, err := readFixedBatch(f.fixedBatch)
		if err != nil {
			return nil, err
		}
		if f.set["batch-size"] && f.batch != b.Samples() {
			return nil, userf("--fixed-batch %s holds %d samples but --batch-size is %d; drop --batch-size", f.fixedBatch, b.Samples(), f.batch)
		}
		return train.FixedData{B: b}, nil
	}
	return openCache(f.data, f.seed, f.batch, cfg)
}

// readFixedBatch reads the tensors of a fixed batch.
func readFixedBatch(path string) (*train.Batch, error) {
	file, err := checkpoint.Open(path)
	if err != nil {
		return nil, userf("--fixed-batch: %v", err)
	}
	defer file.Close()
	read := func(name string) ([]float32, []int, error) {
		info, ok := file.Lookup(name)
		if !ok {
			return nil, nil, userf("--fixed-batch %s: no tensor %q (want latents, noise, sigmas, encoder_hidden_states)", path, name)
		}
		d, err := file.ReadF32(info)
		if err != nil {
			return nil, nil, userf("--fixed-batch: %v", err)
		}
		return d, info.Shape, nil
	}
	b := &train.Batch{}
	if b.Latents, b.LatentShape, err = read("latents"); err != nil {
		return nil, err
	}
	var noiseShape, sigmaShape []int
	if b.Noise, noiseShape, err = read("noise"); err != nil {
		return nil, err
	}
	if b.Sigmas, sigmaShape, err = read("sigmas"); err != nil {
		return nil, err
	}
	if b.Context, b.ContextShape, err = read("encoder_hidden_states"); err != nil {
		return nil, err
	}
	if !slices.Equal(noiseShape, b.LatentShape) || len(sigmaShape) != 1 {
		return nil, userf("--fixed-batch %s: noise %v must match latents %v and sigmas %v be one per sample", path, noiseShape, b.LatentShape, sigmaShape)
	}
	if err := b.Check(); err != nil {
		return nil, userf("--fixed-batch %s: %v", path, err)
	}
	return b, nil
}

// trainRun builds the runtime, the net and the trainer, trains, and
// writes the outputs.
func trainRun(e *env, f *trainFlags, cfg wan.Config, set *checkpoint.Set, data train.Data) error {
	budget := pipeline.Budget{DeviceBytes: f.deviceMem.bytes, HostBytes: f.hostMem.bytes}
	plan, err := f.stream.resolve(f, cfg)
	if err != nil {
		return err
	}
	if err := checkWritable(f.stream.trace); err != nil {
		return err
	}
	rt, err := pipeline.NewRuntime(budget, plan, pipeline.Options{Context: e.ctx, ComputeDType: f.knobs.dtype, DenseWeights: true})
	if err != nil {
		return err
	}
	defer rt.Close()
	ops := tensor.NewOps(rt.Backend)
	rng := train.NewRNG(f.seed)
	opt := train.WanOptions{Full: f.full, LoRA: train.LoRAOptions{Rank: f.loraRank, Alpha: f.loraAlpha,
		Targets: f.targets, Init: f.loraInitAdapters}}
	store := f.knobs.apply(&opt, rt)
	opt.Residency = f.stream.residency(rt)
	net, err := train.NewWanNet(ops, cfg, set, opt, rng)
	if err != nil {
		return classify(asUserIfInput(err))
	}
	defer net.Close()
	tcfg := f.config()
	if f.knobs.emaTier == "device" {
		tcfg.EMAOps = ops
	}
	tr, err := train.New(tcfg, net, data, rng)
	if err != nil {
		return classify(asUserIfInput(err))
	}
	defer tr.Close()
	if f.resume != "" {
		dir, err := train.FindCheckpoint(f.resume)
		if err != nil {
			return asUser(err)
		}
		if err := tr.Restore(dir); err != nil {
			return asUser(err)
		}
		if f.gradsOut != "" && tr.Step() > 0 {
			return userf("--grads-out writes step 1's gradients, but %s resumes after step %d; drop --grads-out or --resume", dir, tr.Step())
		}
	}
	if f.gradsOut != "" {
		tr.OnFirstGrads = func(params []*train.Param, grads [][]float32) error {
			return writeGrads(f.gradsOut, params, grads)
		}
	}
	resumedAt := tr.Step()
	start := time.Now()
	runErr := runWithProgress(e, f, tr)
	measured := rt.Measure()
	if runErr != nil {
		var in *train.Interrupted
		if errors.As(runErr, &in) {
			return &trainInterrupt{in}
		}
		return classify(runErr)
	}
	outputs, err := writeTrained(f, net, tr)
	if err != nil {
		return err
	}
	rep := newTrainReport(f, net, tr, measured, time.Since(start))
	rep.ResumedAt = resumedAt
	rep.Memory = f.knobs.memory(net, tr, store)
	rep.Streaming = f.stream.streaming(rt, len(tr.History)-resumedAt)
	rep.Predicted = predictTrainRun(f, cfg)
	if f.report != "" {
		rep.Outputs = append(slices.Clone(outputs), f.report)
		if err := pipeline.WriteJSON(f.report, rep); err != nil {
			return err
		}
		outputs = append(outputs, f.report)
	}
	if f.stream.trace != "" {
		if err := pipeline.WriteFileAtomicFunc(f.stream.trace, rt.Trace.WriteChrome); err != nil {
			return err
		}
		outputs = append(outputs, f.stream.trace)
	}
	if f.chart != "" {
		title := fmt.Sprintf("ferry train %s: %s", rep.Mode, filepath.Base(filepath.Clean(f.model)))
		if err := pipeline.WriteFileAtomicFunc(f.chart, func(w io.Writer) error { return train.WriteLossChart(w, title, tr.History) }); err != nil {
			return err
		}
		outputs = append(outputs, f.chart)
	}
	if !f.quiet {
		printTrainSummary(e.stderr, rep, outputs)
	}
	return nil
}

// asUserIfInput marks the net's setup errors (bad LoRA init, targets,
// weights that do not fit the config) as the user's; device failures
// stay internal unless classify turns them into budget errors.
func asUserIfInput(err error) error {
	if errors.Is(err, tensor.ErrOutOfMemory) {
		return err
	}
	return asUser(err)
}

// trainInterrupt is a Ctrl-C that saved a checkpoint: exit 130 with the
// way to continue.
type trainInterrupt struct{ in *train.Interrupted }

func (t *trainInterrupt) Error() string            { return t.in.Error() }
func (t *trainInterrupt) Unwrap() error            { return t.in }
func (t *trainInterrupt) interruptMessage() string { return t.in.Error() }

// runWithProgress runs the trainer under a progress bar, logging the
// smoothed loss as it goes.
func runWithProgress(e *env, f *trainFlags, tr *train.Trainer) error {
	mode := progress.Auto
	if f.quiet {
		mode = progress.Quiet
	}
	prog := progress.New(e.stderr, mode)
	defer prog.Close()
	first := tr.Step()
	if first > 0 {
		prog.Logf("resumed at step %d of %d", first, f.steps)
	}
	bar := prog.Phase("train", f.steps-first, "steps")
	every := max(1, (f.steps-first)/20)
	var smooth lossSmoother
	tr.OnStep = func(s train.StepStat) {
		smooth.add(s.Loss)
		bar.SetNote(fmt.Sprintf("loss %.4g", smooth.value()))
		log := (s.Step-first)%every == 0 || s.Step == f.steps
		// A terminal bar redraws itself at most 10 times a second; a log
		// gets a line only with the loss, about 20 in a run.
		if log || prog.Mode() == progress.Bars {
			bar.Set(s.Step - first)
		}
		if log {
			prog.Logf("step %d/%d  loss %.6g  smoothed %.6g  grad norm %.4g  %.3fs", s.Step, f.steps, s.Loss, smooth.value(), s.GradNorm, s.Seconds)
		}
		if trainStepHook != nil {
			trainStepHook(s.Step)
		}
	}
	tr.OnSave = func(dir string) { prog.Logf("checkpoint %s", dir) }
	err := tr.Run(e.ctx)
	if err == nil {
		bar.Done()
	}
	return err
}

// lossSmoother is a bias-corrected exponential average of the loss.
type lossSmoother struct {
	m, w float64
}

func (s *lossSmoother) add(loss float32) {
	s.m = 0.9*s.m + 0.1*float64(loss)
	s.w = 0.9*s.w + 0.1
}

func (s *lossSmoother) value() float64 {
	if s.w == 0 {
		return 0
	}
	return s.m / s.w
}

// writeGrads writes gradients named grad.<parameter>.
func writeGrads(path string, params []*train.Param, grads [][]float32) error {
	ts := make([]checkpoint.RawTensor, len(params))
	for i, p := range params {
		ts[i] = checkpoint.RawTensor{Name: "grad." + p.Name, DType: dtype.F32, Shape: p.Shape, Data: f32Raw(grads[i])}
	}
	return checkpoint.WriteFile(path, ts, map[string]string{"format": "pt"})
}

func f32Raw(d []float32) []byte {
	if len(d) == 0 {
		return nil
	}
	return tensor.FromF32(d, len(d)).Raw()
}

// emaPath is where the EMA goes beside out: x.safetensors → x.ema.safetensors.
func emaPath(out string) string { return strings.TrimSuffix(out, ".safetensors") + ".ema.safetensors" }

// writeTrained writes the trained weights (and their EMA) and returns the
// files written.
func writeTrained(f *trainFlags, net *train.WanNet, tr *train.Trainer) ([]string, error) {
	params := net.Params()
	values := make([][]float32, len(params))
	for i, p := range params {
		values[i] = p.Data
	}
	outs := []string{f.out}
	var ema [][]float32
	if e := tr.EMA(); e != nil {
		w, err := e.Values()
		if err != nil {
			return nil, err
		}
		ema = w
		outs = append(outs, emaPath(f.out))
	}
	meta := map[string]string{"ferry_steps": strconv.Itoa(tr.Step()), "ferry_base_model": f.weightsSource}
	for i, vals := range [][][]float32{values, ema} {
		if vals == nil {
			continue
		}
		if err := writeWeights(outs[i], f.full, net, vals, meta); err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// writeWeights writes a full transformer (diffusers names, float32) or a
// LoRA (lora.Write) with the given values.
func writeWeights(path string, full bool, net *train.WanNet, values [][]float32, meta map[string]string) error {
	if !full {
		ads, err := net.Adapters(values)
		if err != nil {
			return err
		}
		return lora.Write(path, ads, meta)
	}
	params := net.Params()
	ts := make([]checkpoint.RawTensor, len(params))
	for i, p := range params {
		ts[i] = checkpoint.RawTensor{Name: p.Name, DType: dtype.F32, Shape: p.Shape, Data: f32Raw(values[i])}
	}
	md := map[string]string{"format": "pt"}
	for k, v := range meta {
		md[k] = v
	}
	return checkpoint.WriteFile(path, ts, md)
}

// trainReport is --report's JSON.
type trainReport struct {
	Model           string       `json:"model"`
	Mode            string       `json:"mode"`
	Request         trainRequest `json:"request"`
	TrainableParams int64        `json:"trainable_params"`
	// ResumedAt is the step the run resumed after (0: a fresh run).
	ResumedAt int              `json:"resumed_at_step,omitempty"`
	Steps     []train.StepStat `json:"steps"`
	Measured  trainMeasured    `json:"measured"`
	// Memory is what the memory knobs kept and freed (train_knobs.go).
	Memory trainMemory `json:"memory"`
	// Streaming is the weights' plan and its stalls and copies, forward
	// and backward apart (train_stream.go).
	Streaming trainStreaming `json:"streaming"`
	// Predicted is the planner's prediction for the run.
	Predicted *planner.TrainPrediction `json:"predicted,omitempty"`
	Outputs   []string                 `json:"outputs"`
}

// trainRequest is the run's resolved settings.
type trainRequest struct {
	Data             string     `json:"data,omitempty"`
	FixedBatch       string     `json:"fixed_batch,omitempty"`
	Steps            int        `json:"steps"`
	BatchSize        int        `json:"batch_size"`
	GradAccum        int        `json:"grad_accum"`
	Seed             uint64     `json:"seed"`
	TimestepSampling string     `json:"timestep_sampling"`
	FlowShift        float64    `json:"discrete_flow_shift,omitempty"`
	LoRARank         int        `json:"lora_rank,omitempty"`
	LoRAAlpha        float64    `json:"lora_alpha,omitempty"`
	LoRATargets      []string   `json:"lora_targets,omitempty"`
	LoRAInit         string     `json:"lora_init,omitempty"`
	LR               float64    `json:"lr"`
	Betas            [2]float64 `json:"betas"`
	AdamEps          float64    `json:"adam_eps"`
	WeightDecay      float64    `json:"weight_decay"`
	MaxGradNorm      float64    `json:"max_grad_norm"`
	EMADecay         float64    `json:"ema_decay"`
	Resume           string     `json:"resume,omitempty"`
	Checkpointing    string     `json:"checkpointing"`
	ActivationTier   string     `json:"activation_tier"`
	EMATier          string     `json:"ema_tier,omitempty"`
	DType            string     `json:"dtype"`
}

// trainMeasured is what the run observed: memory peaks as generate
// reports them, plus the host state the optimizer keeps.
type trainMeasured struct {
	PeakDeviceBytes         int64   `json:"peak_device_bytes"`
	PeakDeviceReservedBytes int64   `json:"peak_device_reserved_bytes"`
	PeakHostBytes           int64   `json:"peak_host_bytes"`
	PeakRSSBytes            int64   `json:"peak_rss_bytes"`
	HostStateBytes          int64   `json:"host_state_bytes"`
	TotalS                  float64 `json:"total_s"`
	MeanStepS               float64 `json:"mean_step_s"`
	FinalLoss               float32 `json:"final_loss"`
}

func newTrainReport(f *trainFlags, net *train.WanNet, tr *train.Trainer, m pipeline.Measured, total time.Duration) trainReport {
	mode := "lora"
	if f.full {
		mode = "full"
	}
	var n int64
	for _, p := range net.Params() {
		n += int64(len(p.Data))
	}
	// Host state: master weights, two moments, the downloaded gradients
	// and the EMA, float32 each.
	copies := int64(4)
	if tr.EMA() != nil && !tr.EMA().OnDevice() {
		copies++
	}
	r := trainReport{Model: f.model, Mode: mode, TrainableParams: n, Steps: tr.History,
		Request: trainRequest{Data: f.data, FixedBatch: f.fixedBatch, Steps: f.steps, BatchSize: f.batch, GradAccum: f.accum,
			Seed: f.seed, TimestepSampling: f.timesteps.Sampling.String(), LR: f.lr, Betas: [2]float64{f.adam.Beta1, f.adam.Beta2},
			AdamEps: f.adamEps, WeightDecay: f.weightDecay, MaxGradNorm: f.maxGradNorm, EMADecay: f.emaDecay, Resume: f.resume,
			Checkpointing: f.knobs.checkpointing, ActivationTier: f.knobs.activationTier, DType: f.knobs.dtypeName},
		Measured: trainMeasured{PeakDeviceBytes: m.PeakDeviceBytes, PeakDeviceReservedBytes: m.PeakDeviceReservedBytes,
			PeakHostBytes: m.PeakHostBytes, PeakRSSBytes: m.PeakRSSBytes, HostStateBytes: 4 * n * copies, TotalS: total.Seconds()}}
	if f.timesteps.Sampling == train.Shift {
		r.Request.FlowShift = f.flowShift
	}
	if f.emaDecay > 0 {
		r.Request.EMATier = f.knobs.emaTier
	}
	if !f.full {
		r.Request.LoRARank, r.Request.LoRAAlpha, r.Request.LoRATargets, r.Request.LoRAInit = f.loraRank, f.loraAlpha, f.targets, f.loraInit
	}
	if len(tr.History) > 0 {
		var s float64
		for _, h := range tr.History {
			s += h.Seconds
		}
		r.Measured.MeanStepS = s / float64(len(tr.History))
		r.Measured.FinalLoss = tr.History[len(tr.History)-1].Loss
	}
	return r
}

func printTrainSummary(w io.Writer, r trainReport, outputs []string) {
	fmt.Fprintf(w, "trained %s (%d parameters) for %d steps", r.Mode, r.TrainableParams, len(r.Steps))
	if len(r.Steps) > 0 {
		fmt.Fprintf(w, ": loss %.6g → %.6g, %.3fs/step", r.Steps[0].Loss, r.Measured.FinalLoss, r.Measured.MeanStepS)
	}
	fmt.Fprintf(w, "\npeak device %s, RSS %s, optimizer state on the host %s\n", tensor.FormatBytes(r.Measured.PeakDeviceBytes),
		tensor.FormatBytes(r.Measured.PeakRSSBytes), tensor.FormatBytes(r.Measured.HostStateBytes))
	for _, o := range outputs {
		fmt.Fprintf(w, "wrote %s\n", o)
	}
}

// openCache opens --data as a latent cache made for the transformer's
// latent channels and text width.
func openCache(dir string, seed uint64, batch int, cfg wan.Config) (train.Data, error) {
	c, err := dataset.Open(dir)
	if err != nil {
		return nil, userf("--data: %v", err)
	}
	if m := c.Model(); m.ZDim != cfg.InChannels || m.TextDim != cfg.TextDim {
		return nil, userf("--data %s holds %d latent channels and text width %d, the transformer takes %d and %d (cache with this model's pipeline)",
			dir, m.ZDim, m.TextDim, cfg.InChannels, cfg.TextDim)
	}
	d, err := train.NewCacheData(c, seed, batch, train.TextLen)
	if err != nil {
		return nil, userf("--data %s: %v", dir, err)
	}
	return d, nil
}
