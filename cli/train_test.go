package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ferry/checkpoint"
	"ferry/dataset"
	"ferry/dtype"
	"ferry/lora"
	"ferry/model/modeltest"
	"ferry/tensor"
	"ferry/train"
)

// The trainer's golden case (copied from ../shared/golden/wan_train).
var (
	trainGolden      = filepath.Join("..", "testdata", "wan_train")
	trainGoldenModel = filepath.Join(trainGolden, "model")
	trainGoldenBatch = filepath.Join(trainGolden, "inputs.safetensors")
)

// Tolerances of the manifest's "wan_train" entry.
const (
	goldenLossRTol   = 1e-5
	goldenGradRelTol = 1e-4 // of the reference gradient's max |value|
	goldenLoRAATol   = 1e-5
)

func openSet(t *testing.T, path string) *checkpoint.Set {
	t.Helper()
	s, err := checkpoint.OpenSet(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readReport reads a train --report.
func readReport(t *testing.T, path string) trainReport {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r trainReport
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// compareGradFile checks every tensor prefix+name of ref against
// grad.name in got, within goldenGradRelTol·max|ref|, and that got holds
// exactly the reference's gradients.
func compareGradFile(t *testing.T, got, ref *checkpoint.Set, prefix string) {
	t.Helper()
	n := 0
	for _, name := range ref.Names() {
		param, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		n++
		want, _ := modeltest.TensorOf(t, ref, name)
		have, _ := modeltest.TensorOf(t, got, "grad."+param)
		var absmax float64
		for _, v := range want {
			absmax = math.Max(absmax, math.Abs(float64(v)))
		}
		modeltest.Compare(t, name, have, want, goldenGradRelTol*absmax, 0)
	}
	if n == 0 || got.Len() != n {
		t.Errorf("--grads-out holds %d tensors, the reference %d", got.Len(), n)
	}
}

func checkGoldenLoss(t *testing.T, what string, got float32, ref *checkpoint.Set, name string) {
	t.Helper()
	want, _ := modeltest.TensorOf(t, ref, name)
	if d := math.Abs(float64(got - want[0])); d > goldenLossRTol*math.Abs(float64(want[0])) {
		t.Errorf("%s: loss %.9g, want %.9g", what, got, want[0])
	}
}

// TestTrainGoldenFull: one full fine-tuning step on the golden batch
// gives the reference loss and every parameter's gradient.
func TestTrainGoldenFull(t *testing.T) {
	dir := t.TempDir()
	grads, rep, out := filepath.Join(dir, "g.safetensors"), filepath.Join(dir, "r.json"), filepath.Join(dir, "full.safetensors")
	code, _, stderr := ferry(t, "train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--full", "--dtype", "fp32",
		"--steps", "1", "--grads-out", grads, "--report", rep, "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	ref := openSet(t, filepath.Join(trainGolden, "outputs_full.safetensors"))
	compareGradFile(t, openSet(t, grads), ref, "grad.")
	r := readReport(t, rep)
	if len(r.Steps) != 1 || r.Mode != "full" {
		t.Fatalf("report: mode %s, %d steps", r.Mode, len(r.Steps))
	}
	checkGoldenLoss(t, "step 1", r.Steps[0].Loss, ref, "loss")
	if r.Measured.PeakDeviceBytes <= 0 {
		t.Errorf("report: device peak %d", r.Measured.PeakDeviceBytes)
	}
	// The trained transformer has every weight under its diffusers name.
	w := openSet(t, out)
	base := openSet(t, trainGoldenModel)
	if w.Len() != base.Len() {
		t.Errorf("wrote %d tensors, the model has %d", w.Len(), base.Len())
	}
	for _, n := range base.Names() {
		if _, ok := w.Lookup(n); !ok {
			t.Errorf("trained weights lack %s", n)
		}
	}
}

// TestTrainGoldenLoRA: two AdamW steps of a rank-4 LoRA with EMA give the
// reference step-1 gradients and losses, the saved LoRA is the reference
// weights after step 2 and the saved EMA the reference EMA.
func TestTrainGoldenLoRA(t *testing.T) {
	dir := t.TempDir()
	grads, rep, out := filepath.Join(dir, "g.safetensors"), filepath.Join(dir, "r.json"), filepath.Join(dir, "lora.safetensors")
	code, _, stderr := ferry(t, "train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--dtype", "fp32",
		"--lora-rank", "4", "--lora-alpha", "8", "--lora-init", filepath.Join(trainGolden, "lora_init.safetensors"),
		"--steps", "2", "--lr", "1e-3", "--betas", "0.9,0.999", "--adam-eps", "1e-8", "--weight-decay", "0.01", "--ema-decay", "0.9",
		"--grads-out", grads, "--report", rep, "--out", out, "--chart", filepath.Join(dir, "loss.svg"), "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	ref := openSet(t, filepath.Join(trainGolden, "outputs_lora.safetensors"))
	compareGradFile(t, openSet(t, grads), ref, "step1.grad.")
	r := readReport(t, rep)
	if len(r.Steps) != 2 {
		t.Fatalf("report has %d steps", len(r.Steps))
	}
	checkGoldenLoss(t, "step 1", r.Steps[0].Loss, ref, "step1.loss")
	checkGoldenLoss(t, "step 2", r.Steps[1].Loss, ref, "step2.loss")
	for _, f := range []struct{ path, prefix string }{{out, "step2."}, {emaPath(out), "ema."}} {
		if !strings.Contains(filepath.Base(f.path), "ema") && f.prefix == "ema." {
			t.Fatalf("EMA file %s does not say ema", f.path)
		}
		ads, err := lora.Read(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if len(ads) != 20 {
			t.Fatalf("%s: %d adapters, want 20", f.path, len(ads))
		}
		for _, a := range ads {
			if a.Scale() != 2 {
				t.Errorf("%s: scale %g, want alpha/rank = 2", a.Module, a.Scale())
			}
			wantA, _ := modeltest.TensorOf(t, ref, f.prefix+a.Module+".lora_A.weight")
			wantB, _ := modeltest.TensorOf(t, ref, f.prefix+a.Module+".lora_B.weight")
			modeltest.Compare(t, f.prefix+a.Module+" A", a.A, wantA, goldenLoRAATol, 0)
			modeltest.Compare(t, f.prefix+a.Module+" B", a.B, wantB, goldenLoRAATol, 0)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "loss.svg"))
	if err != nil || !strings.Contains(string(svg), "<polyline") {
		t.Errorf("loss chart: %v", err)
	}
}

// TestTrainUserErrors: bad input is one line and exit 2.
func TestTrainUserErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "o.safetensors")
	base := []string{"train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--out", out, "--steps", "1"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"train", "--fixed-batch", trainGoldenBatch, "--out", out, "--steps", "1"}, "--model"},
		{"no data", []string{"train", "--model", trainGoldenModel, "--out", out, "--steps", "1"}, "--data"},
		{"both data", with("--data", dir), "exclude"},
		{"no steps", []string{"train", "--model", trainGoldenModel, "--fixed-batch", trainGoldenBatch, "--out", out}, "--steps"},
		{"out not safetensors", with("--out", filepath.Join(dir, "o.bin")), ".safetensors"},
		{"bad betas", with("--betas", "0.9"), "--betas"},
		{"beta out of range", with("--betas", "0.9,1.5"), "betas"},
		{"bad sampling", with("--timestep-sampling", "cosine"), "uniform"},
		{"full with lora flag", with("--full", "--lora-rank", "4"), "--lora-rank"},
		{"missing model", with("--model", filepath.Join(dir, "nope")), "no such folder"},
		{"model without config", with("--model", dir), "config.json"},
		{"missing batch", with("--fixed-batch", filepath.Join(dir, "nope.safetensors")), "--fixed-batch"},
		{"batch size mismatch", with("--batch-size", "3"), "--batch-size"},
		{"targets select nothing", with("--lora-targets", "nothing.here"), "selects no Linear"},
		{"one target selects nothing", with("--lora-targets", "attn1.to_q,attn3.to_q"), "attn3.to_q"},
		{"init rank mismatch", with("--lora-init", filepath.Join(trainGolden, "lora_init.safetensors"), "--lora-rank", "8"), "rank"},
		{"init with a bias", with("--lora-init", biasLoRA(t, dir)), "has a bias"},
		{"chart not svg", with("--chart", filepath.Join(dir, "c.png")), ".svg"},
		{"resume nothing", with("--resume", dir), "no checkpoint"},
		{"negative ema", with("--ema-decay", "-1"), "EMA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := ferry(t, tt.args...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d: %s", code, ExitUsage, stderr)
			}
			if strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q, want one line mentioning %q", stderr, tt.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed run wrote --out")
	}
}

// biasLoRA writes a LoRA file holding a bias difference alone.
func biasLoRA(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "bias.safetensors")
	rt := checkpoint.RawTensor{Name: "diffusion_model.blocks.0.ffn.2.diff_b", DType: dtype.F32, Shape: []int{4}, Data: make([]byte, 16)}
	if err := checkpoint.WriteFile(p, []checkpoint.RawTensor{rt}, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrainLoRALearns: a LoRA on the synthetic wan-tiny overfits one
// cached clip: the clip goes through ferry cache, its cached latents and
// caption states, with one fixed draw of noise and σ, make the batch of
// every step, and the loss falls at least tenfold. (With a fresh σ and
// noise every step the loss of a random-weight model plateaus: a LoRA of
// rank 8 on wan-tiny cannot learn to denoise at every noise level in a
// test's few steps.)
func TestTrainLoRALearns(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	dir := t.TempDir()
	cache := cacheOneImage(t, model, dir)
	c, err := dataset.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := c.Load(0)
	if err != nil {
		t.Fatal(err)
	}
	batch, rep := filepath.Join(dir, "b.safetensors"), filepath.Join(dir, "r.json")
	rng := train.NewRNG(3)
	raw := func(d []float32) []byte { return tensor.FromF32(d, len(d)).Raw() }
	lat := append([]int{1}, sample.LatentShape...)
	err = checkpoint.WriteFile(batch, []checkpoint.RawTensor{
		{Name: "latents", DType: dtype.F32, Shape: lat, Data: raw(sample.Latents)},
		{Name: "noise", DType: dtype.F32, Shape: lat, Data: raw(rng.Normals(len(sample.Latents)))},
		{Name: "sigmas", DType: dtype.F32, Shape: []int{1}, Data: raw([]float32{0.5})},
		{Name: "encoder_hidden_states", DType: dtype.F32, Shape: append([]int{1}, sample.TextShape...), Data: raw(sample.Text)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := ferry(t, "train", "--model", model, "--fixed-batch", batch, "--out", filepath.Join(dir, "l.safetensors"),
		"--steps", "60", "--lora-rank", "8", "--lr", "1e-2", "--weight-decay", "0", "--report", rep, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := readReport(t, rep)
	first, last := r.Steps[0].Loss, r.Steps[len(r.Steps)-1].Loss
	t.Logf("loss %g → %g in %d steps", first, last, len(r.Steps))
	if !(last*10 <= first) {
		t.Errorf("loss %g → %g: did not fall tenfold", first, last)
	}
}

// lorasEqual reports whether two LoRA files hold bit-identical adapters.
func lorasEqual(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := lora.Read(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := lora.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		for j := range x[i].A {
			if math.Float32bits(x[i].A[j]) != math.Float32bits(y[i].A[j]) {
				return false
			}
		}
		for j := range x[i].B {
			if math.Float32bits(x[i].B[j]) != math.Float32bits(y[i].B[j]) {
				return false
			}
		}
	}
	return true
}

// tinyCache writes a latent cache for wan-tiny (16 channels, text width
// 64, padded to 512): two one-frame samples of 4×4 latents and one of two
// latent frames, so batches of two alternate between shapes.
func tinyCache(t *testing.T, dir string) {
	t.Helper()
	idx := &dataset.Index{Format: dataset.Format, Version: dataset.Version,
		Model: dataset.Model{Fingerprint: "test", ZDim: 16, TextDim: 64}, Settings: dataset.Settings{MaxSeqLen: 512}}
	rng := train.NewRNG(8)
	counts := map[string]int{}
	for i, frames := range []int{1, 5, 1} {
		shape := []int{16, (frames-1)/4 + 1, 4, 4}
		bucket := dataset.BucketName(32, 32, frames)
		if counts[bucket] == 0 {
			idx.Buckets = append(idx.Buckets, dataset.Bucket{Name: bucket, LatentShape: shape})
		}
		counts[bucket]++
		name := fmt.Sprintf("clip%d", i)
		file := dataset.SampleFile(bucket, name)
		if err := os.MkdirAll(filepath.Join(dir, bucket), 0o755); err != nil {
			t.Fatal(err)
		}
		textLen := 3 + i
		meta := dataset.Meta{Name: name, Source: name + ".mp4", Frames: frames, Model: "test"}
		if err := dataset.WriteSample(filepath.Join(dir, file), meta, rng.Normals(16*shape[1]*16), shape,
			rng.Normals(textLen*64), []int{textLen, 64}); err != nil {
			t.Fatal(err)
		}
		idx.Samples = append(idx.Samples, dataset.Entry{Name: name, Bucket: bucket, File: file, LatentShape: shape,
			TextLen: textLen, Frames: frames, Source: name + ".mp4"})
	}
	for i := range idx.Buckets {
		idx.Buckets[i].Samples = counts[idx.Buckets[i].Name]
	}
	if err := dataset.WriteIndex(dir, idx); err != nil {
		t.Fatal(err)
	}
}

// TestTrainInterruptResume: Ctrl-C after step 3 saves a checkpoint and
// exits 130 saying how to continue; --resume then runs steps 4 to 6 only
// and ends with exactly the LoRA and EMA of an uninterrupted run. The data
// comes from a latent cache in a seeded order and σ and ε are drawn, so
// the data position and the RNG state must both carry over.
func TestTrainInterruptResume(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	tinyCache(t, cache)
	args := func(out string, extra ...string) []string {
		return append([]string{"train", "--model", model, "--data", cache, "--batch-size", "2", "--out", out, "--steps", "6",
			"--lora-rank", "4", "--lr", "1e-3", "--ema-decay", "0.5", "--max-grad-norm", "0.5",
			"--timestep-sampling", "logit-normal", "--seed", "4", "--quiet"}, extra...)
	}
	straight := filepath.Join(dir, "straight.safetensors")
	if code, _, stderr := ferry(t, args(straight)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}

	resumed := filepath.Join(dir, "resumed.safetensors")
	ckpt := filepath.Join(dir, "ckpt")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trainStepHook = func(step int) {
		if step == 3 {
			cancel()
		}
	}
	defer func() { trainStepHook = nil }()
	var stdout, stderr strings.Builder
	code := run(ctx, args(resumed, "--save-every", "2", "--checkpoint-dir", ckpt), &stdout, &stderr)
	trainStepHook = nil
	if code != ExitInterrupt || !strings.Contains(stderr.String(), "--resume") {
		t.Fatalf("exit %d, stderr %q: want 130 and how to resume", code, stderr.String())
	}
	if _, err := os.Stat(resumed); err == nil {
		t.Fatal("an interrupted run wrote --out")
	}
	var ran []int
	trainStepHook = func(step int) { ran = append(ran, step) }
	rep := filepath.Join(dir, "r.json")
	code, _, errText := ferry(t, args(resumed, "--checkpoint-dir", ckpt, "--resume", ckpt, "--report", rep)...)
	trainStepHook = nil
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errText)
	}
	if r := readReport(t, rep); r.ResumedAt != 3 || len(r.Steps) != 6 || !slices.Equal(ran, []int{4, 5, 6}) {
		t.Fatalf("resumed at step %d, ran steps %v, report of %d steps: want 3, [4 5 6], 6", r.ResumedAt, ran, len(r.Steps))
	}
	if !lorasEqual(t, straight, resumed) {
		t.Error("resumed LoRA differs from the uninterrupted one")
	}
	if !lorasEqual(t, emaPath(straight), emaPath(resumed)) {
		t.Error("resumed EMA differs from the uninterrupted one")
	}
}

// TestTrainOnCache: `ferry cache` of one captioned image, then `ferry
// train --data` on it: the two commands agree on the cache format, the
// text is padded and the LoRA written.
func TestTrainOnCache(t *testing.T) {
	model := synthModel(t, "wan-tiny")
	dir := t.TempDir()
	cache := cacheOneImage(t, model, dir)
	out, rep := filepath.Join(dir, "l.safetensors"), filepath.Join(dir, "r.json")
	if code, _, stderr := ferry(t, "train", "--model", model, "--data", cache, "--out", out, "--steps", "3",
		"--lora-rank", "2", "--report", rep, "--quiet"); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	r := readReport(t, rep)
	if len(r.Steps) != 3 || r.Request.Data != cache {
		t.Fatalf("report: %d steps on %q", len(r.Steps), r.Request.Data)
	}
	for _, s := range r.Steps {
		if !(s.Loss > 0) || math.IsInf(float64(s.Loss), 0) {
			t.Errorf("step %d: loss %g", s.Step, s.Loss)
		}
	}
	ads, err := lora.Read(out)
	if err != nil || len(ads) != 4*len(lora.DefaultTargets) {
		t.Fatalf("LoRA: %d adapters, %v; want one per default target of 4 blocks", len(ads), err)
	}
}

// cacheOneImage caches one 32x32 striped image with its caption for model
// under dir and returns the cache folder.
func cacheOneImage(t *testing.T, model, dir string) string {
	t.Helper()
	data, cache := filepath.Join(dir, "data"), filepath.Join(dir, "cache")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 32, 32))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"a.png": buf.Bytes(), "a.txt": []byte("a striped square")} {
		if err := os.WriteFile(filepath.Join(data, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := ferry(t, "cache", "--model", model, "--data", data, "--out", cache,
		"--width", "32", "--height", "32", "--frames", "1", "--quiet"); code != 0 {
		t.Fatalf("cache: exit %d: %s", code, stderr)
	}
	return cache
}
