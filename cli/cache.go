package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"ferry/dataset"
	"ferry/dtype"
	"ferry/media"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/residency"
)

func init() {
	register("cache", "encode a folder of captioned clips into latent + text caches for training", runCache)
}

// cacheFlags are cache's flags.
type cacheFlags struct {
	model, data, out      string
	width, height, frames int
	maxSeqLen             int
	plan, dtype           string
	deviceMem, hostMem    sizeFlag
	quiet                 bool
	settings              dataset.Settings
	computeDType          dtype.DType
	residencyPlan         *residency.Plan
	fingerprint           string
}

func (g *cacheFlags) define(e *env) *flag.FlagSet {
	fs := newFlags(e, "cache", "--model DIR --data DIR --out CACHE [flags]")
	fs.StringVar(&g.model, "model", "", "Wan pipeline folder (diffusers layout) whose text encoder and VAE encode the data")
	fs.StringVar(&g.data, "data", "", "data folder: NAME.mp4/.avi/.gif/.png/.jpg clips, each with its caption in NAME.txt")
	fs.StringVar(&g.out, "out", "", "cache folder to create or update (CACHE/<bucket>/<name>.safetensors and CACHE/index.json)")
	fs.IntVar(&g.width, "width", 832, "sample width in pixels, a multiple of 16")
	fs.IntVar(&g.height, "height", 480, "sample height in pixels, a multiple of 16")
	fs.IntVar(&g.frames, "frames", 81, "most frames a clip contributes (a sample keeps the largest 4k+1 it has)")
	fs.IntVar(&g.maxSeqLen, "max-sequence-length", 512, "most caption tokens the text encoder reads")
	fs.StringVar(&g.plan, "plan", "resident", "residency plan: a preset that needs no profile (resident, onload, stream, ...) or a plan file")
	fs.StringVar(&g.dtype, "dtype", "auto", "compute dtype of the GEMMs: bf16, fp32 or auto (bf16 where the CPU has AVX512-BF16 and calibrate did not measure it slower)")
	fs.Var(&g.deviceMem, "device-mem", "device memory budget, e.g. 8GiB (default: unlimited)")
	fs.Var(&g.hostMem, "host-mem", "host memory budget for offloaded weights, e.g. 16GiB (default: unlimited)")
	fs.BoolVar(&g.quiet, "quiet", false, "print nothing but errors")
	return fs
}

// check validates the flags that need no files.
func (g *cacheFlags) check() error {
	switch {
	case g.model == "":
		return userf("--model DIR is required (a Wan pipeline folder; `ferry synth --arch wan-tiny` makes a small one)")
	case g.data == "":
		return userf("--data DIR is required (clips NAME.mp4/.avi/.gif/.png/.jpg, each with a caption NAME.txt)")
	case g.out == "":
		return userf("--out CACHE is required (the cache folder to create or update)")
	case g.width <= 0 || g.height <= 0 || g.width%16 != 0 || g.height%16 != 0:
		return userf("--width and --height must be positive multiples of 16, got %dx%d (nearest valid: %dx%d)",
			g.width, g.height, nearestMultiple16(g.width), nearestMultiple16(g.height))
	case g.frames < 1:
		return userf("--frames must be at least 1, got %d", g.frames)
	case g.maxSeqLen <= 0:
		return userf("--max-sequence-length must be > 0, got %d", g.maxSeqLen)
	}
	dt, err := parseComputeDType(g.dtype)
	if err != nil {
		return err
	}
	g.computeDType = dt
	return nil
}

func nearestMultiple16(v int) int { return max(16, (v+8)/16*16) }

// cacheSample is one source and what becomes of it.
type cacheSample struct {
	src  dataset.Source
	want dataset.Meta
	// done is the entry of an up-to-date file; nil when it must be encoded.
	done *dataset.Entry
}

// cachedFile is a sample file already in the cache folder.
type cachedFile struct {
	path, bucket string
	hdr          dataset.Header
}

func runCache(e *env, args []string) error {
	var g cacheFlags
	fs := g.define(e)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if err := g.check(); err != nil {
		return err
	}
	folder, err := openFolder(g.model)
	if err != nil {
		return err
	}
	defer folder.Close()
	if folder.Class != "WanPipeline" {
		return userf("%s: pipeline class %q: ferry cache encodes for Wan text-to-video folders (WanPipeline)", g.model, folder.Class)
	}
	p, err := wan.Open(folder)
	if err != nil {
		return asUser(err)
	}
	sources, err := checkData(g.data, g.width, g.height)
	if err != nil {
		return err
	}
	if err := g.resolve(p); err != nil {
		return err
	}
	if err := prepareOut(g.out); err != nil {
		return err
	}
	existing, err := scanCache(g.out)
	if err != nil {
		return err
	}
	samples := planSamples(&g, p, sources, existing)
	log := e.stderr
	if g.quiet {
		log = io.Discard
	}
	start := time.Now()
	encoded, err := encodeSamples(e, &g, p, samples, existing, log)
	if err != nil {
		return err
	}
	idx := buildIndex(&g, p, samples)
	if err := dataset.WriteIndex(g.out, idx); err != nil {
		return err
	}
	pruned := prune(existing, idx, g.out)
	summarize(log, idx, encoded, pruned, time.Since(start), g.out)
	return nil
}

// summarize prints the run's last line.
func summarize(log io.Writer, idx *dataset.Index, encoded, pruned int, took time.Duration, out string) {
	n := len(idx.Samples)
	fmt.Fprintf(log, "cache: %d samples in %d buckets (%d encoded, %d up to date", n, len(idx.Buckets), encoded, n-encoded)
	if pruned > 0 {
		fmt.Fprintf(log, ", %d stale files removed", pruned)
	}
	fmt.Fprintf(log, ") in %.1fs -> %s\n", took.Seconds(), filepath.Join(out, dataset.IndexName))
}

// resolve reads the plan and fingerprints the model: what, with the
// flags, decides whether a cached sample is up to date.
func (g *cacheFlags) resolve(p *wan.Pipeline) error {
	var err error
	if g.residencyPlan, err = resolvePlan(g.plan); err != nil {
		return err
	}
	if g.fingerprint, err = p.EncoderFingerprint(); err != nil {
		return err
	}
	run := g.residencyPlan.Run
	g.settings = dataset.Settings{Width: g.width, Height: g.height, Frames: g.frames, MaxSeqLen: g.maxSeqLen,
		DType: strings.ToLower(g.computeDType.String()), VAETile: run.VAETile, VAEStride: run.VAEStride}
	return nil
}

// checkData pairs clips with captions and reads every clip's size before
// any compute, so that a bad file stops the run at once.
func checkData(dir string, width, height int) ([]dataset.Source, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, userf("--data %s: no such folder", dir)
	}
	sources, err := dataset.Scan(dir)
	if err != nil {
		return nil, asUser(err)
	}
	for _, s := range sources {
		w, h, err := media.Probe(s.Clip)
		if err != nil {
			return nil, asUser(err)
		}
		if err := dataset.CheckSize(w, h, width, height); err != nil {
			return nil, userf("%s %v", s.Clip, err)
		}
	}
	return sources, nil
}

// prepareOut makes the cache folder; an existing file there is an error.
func prepareOut(dir string) error {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return userf("--out %s is a file; give a folder for the cache", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return userf("--out %s: cannot create the cache folder: %v", dir, err)
	}
	return nil
}

// scanCache reads the headers of the sample files already in the cache
// folder, by sample name. Files that are not cache samples are ignored
// (and never removed).
func scanCache(dir string) (map[string][]cachedFile, error) {
	out := map[string][]cachedFile{}
	buckets, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read cache folder: %w", err)
	}
	for _, b := range buckets {
		if !b.IsDir() || strings.HasPrefix(b.Name(), ".") {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, b.Name()))
		if err != nil {
			return nil, fmt.Errorf("read cache folder: %w", err)
		}
		for _, f := range files {
			name, ok := strings.CutSuffix(f.Name(), ".safetensors")
			if !ok || strings.HasPrefix(name, ".") || !f.Type().IsRegular() {
				continue
			}
			path := filepath.Join(dir, b.Name(), f.Name())
			hdr, err := dataset.ReadHeader(path)
			if err != nil || hdr.Meta.Name != name {
				continue // not ours, or damaged: encoding the sample again replaces it
			}
			out[name] = append(out[name], cachedFile{path: path, bucket: b.Name(), hdr: hdr})
		}
	}
	return out, nil
}

// planSamples decides, per source, whether a cached file is up to date.
func planSamples(g *cacheFlags, p *wan.Pipeline, sources []dataset.Source, existing map[string][]cachedFile) []*cacheSample {
	var out []*cacheSample
	for _, src := range sources {
		s := &cacheSample{src: src, want: dataset.Meta{Name: src.Name, Source: filepath.Base(src.Clip), ModTime: src.ModTime,
			Bytes: src.Bytes, Caption: src.Caption, Settings: g.settings.String(), Model: g.fingerprint}}
		for _, f := range existing[src.Name] {
			h := f.hdr
			if h.Meta.UpToDate(s.want) && h.LatentShape[0] == p.ZDim() && h.TextShape[1] == p.TextDim() &&
				h.TextShape[0] >= 1 && h.TextShape[0] <= g.maxSeqLen {
				s.done = entryFor(src.Name, f.bucket, h)
				break
			}
		}
		out = append(out, s)
	}
	return out
}

func entryFor(name, bucket string, h dataset.Header) *dataset.Entry {
	return &dataset.Entry{Name: name, Bucket: bucket, File: dataset.SampleFile(bucket, name), LatentShape: h.LatentShape,
		TextLen: h.TextShape[0], Frames: h.Meta.Frames, Source: h.Meta.Source, Caption: h.Meta.Caption}
}

// textGroup is how many captions are encoded before their clips: the
// text encoder and the VAE take turns once per group, not per sample,
// which matters when a plan moves their weights in and out.
const textGroup = 16

// encodeSamples encodes the samples that are not up to date and writes
// each one's file as soon as it is done, so an interrupted run keeps them.
func encodeSamples(e *env, g *cacheFlags, p *wan.Pipeline, samples []*cacheSample, existing map[string][]cachedFile, log io.Writer) (int, error) {
	var todo []*cacheSample
	for _, s := range samples {
		if s.done == nil {
			todo = append(todo, s)
		} else {
			fmt.Fprintf(log, "cache: %s up to date (%s)\n", s.src.Name, s.done.Bucket)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	budget := pipeline.Budget{DeviceBytes: g.deviceMem.bytes, HostBytes: g.hostMem.bytes}
	rt, err := pipeline.NewRuntime(budget, g.residencyPlan, pipeline.Options{Context: e.ctx, ComputeDType: g.computeDType})
	if err != nil {
		return 0, err
	}
	enc := &encoder{g: g, p: p, rt: rt, existing: existing, log: log, total: len(todo)}
	runErr := enc.run(todo)
	rt.Close()
	if runErr != nil {
		if e.ctx.Err() != nil || errors.Is(runErr, context.Canceled) {
			return 0, &cacheInterrupt{err: runErr, done: enc.done}
		}
		return 0, runErr
	}
	if err := rt.CheckReleased(); err != nil {
		return 0, err
	}
	return len(todo), nil
}

// encoder is one run's encoding state.
type encoder struct {
	g        *cacheFlags
	p        *wan.Pipeline
	rt       *pipeline.Runtime
	existing map[string][]cachedFile
	log      io.Writer
	total    int
	done     int // samples written
}

// run registers the encoders and encodes todo a text group at a time.
func (enc *encoder) run(todo []*cacheSample) error {
	if err := enc.p.RegisterEncoders(enc.rt.Exec); err != nil {
		return asUser(err)
	}
	for start := 0; start < len(todo); start += textGroup {
		if err := enc.group(todo[start:min(start+textGroup, len(todo))]); err != nil {
			return err
		}
	}
	return nil
}

// group encodes a group's captions, then its clips, writing each sample.
func (enc *encoder) group(group []*cacheSample) error {
	texts := make([][]float32, len(group))
	lens := make([]int, len(group))
	for i, s := range group {
		if err := enc.rt.Err(); err != nil {
			return err
		}
		var err error
		if texts[i], lens[i], err = enc.p.EncodePrompt(enc.rt, s.src.Caption, enc.g.maxSeqLen); err != nil {
			return fmt.Errorf("%s: caption: %w", s.src.Name, classify(err))
		}
	}
	for i, s := range group {
		if err := enc.rt.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := encodeOne(enc.g, enc.p, enc.rt, s, texts[i], lens[i]); err != nil {
			return err
		}
		enc.done++
		removeStale(enc.existing[s.src.Name], s.done.File, enc.g.out)
		fmt.Fprintf(enc.log, "cache: [%d/%d] %s: %d frames, %d tokens -> %s (%.1fs)\n",
			enc.done, enc.total, filepath.Base(s.src.Clip), s.done.Frames, s.done.TextLen, s.done.File, time.Since(t0).Seconds())
	}
	return nil
}

// cacheInterrupt is a Ctrl-C during encoding: the samples written stay
// cached (index.json is not updated), and a rerun goes on from there.
type cacheInterrupt struct {
	err  error
	done int
}

func (c *cacheInterrupt) Error() string { return c.err.Error() }
func (c *cacheInterrupt) Unwrap() error { return c.err }
func (c *cacheInterrupt) interruptMessage() string {
	return fmt.Sprintf("interrupted; the %d samples encoded so far stay cached (index.json not updated): run the same command again to go on", c.done)
}

// encodeOne decodes, resizes and encodes one clip and writes its file.
func encodeOne(g *cacheFlags, p *wan.Pipeline, rt *pipeline.Runtime, s *cacheSample, text []float32, textLen int) error {
	clip, err := media.Decode(s.src.Clip, g.frames)
	if err != nil {
		return asUser(err)
	}
	frames := dataset.FrameCount(g.frames, len(clip.Frames))
	pix, err := dataset.Pixels(clip, frames, g.width, g.height)
	if err != nil {
		return userf("%s %v", s.src.Clip, err)
	}
	latents, shape, err := p.EncodeVideo(rt, pix, frames, g.height, g.width)
	if err != nil {
		return fmt.Errorf("%s: %w", s.src.Clip, classify(err))
	}
	m := s.want
	m.SourceWidth, m.SourceHeight, m.Frames = clip.Width, clip.Height, frames
	bucket := dataset.BucketName(g.width, g.height, frames)
	if err := os.MkdirAll(filepath.Join(g.out, bucket), 0o755); err != nil {
		return fmt.Errorf("cache folder: %w", err)
	}
	path := filepath.Join(g.out, filepath.FromSlash(dataset.SampleFile(bucket, s.src.Name)))
	textShape := []int{textLen, p.TextDim()}
	if err := dataset.WriteSample(path, m, latents, shape, text, textShape); err != nil {
		return err
	}
	s.done = entryFor(s.src.Name, bucket, dataset.Header{Meta: m, LatentShape: shape, TextShape: textShape})
	return nil
}

// removeStale deletes a sample's older files in other buckets (its clip
// changed length, or the settings changed) once its new file is written.
func removeStale(files []cachedFile, keep, dir string) {
	for _, f := range files {
		if f.path != filepath.Join(dir, filepath.FromSlash(keep)) {
			os.Remove(f.path)
		}
	}
}

// buildIndex lists the samples and their buckets, buckets sorted by name.
func buildIndex(g *cacheFlags, p *wan.Pipeline, samples []*cacheSample) *dataset.Index {
	dir, err := filepath.Abs(g.model)
	if err != nil {
		dir = g.model
	}
	idx := &dataset.Index{Format: dataset.Format, Version: dataset.Version, Settings: g.settings,
		Model: dataset.Model{Fingerprint: g.fingerprint, Dir: dir, ZDim: p.ZDim(), TextDim: p.TextDim()}}
	buckets := map[string]*dataset.Bucket{}
	for _, s := range samples {
		e := *s.done
		idx.Samples = append(idx.Samples, e)
		b, ok := buckets[e.Bucket]
		if !ok {
			b = &dataset.Bucket{Name: e.Bucket, LatentShape: e.LatentShape}
			buckets[e.Bucket] = b
		}
		b.Samples++
	}
	for _, b := range buckets {
		idx.Buckets = append(idx.Buckets, *b)
	}
	sort.Slice(idx.Buckets, func(i, j int) bool { return idx.Buckets[i].Name < idx.Buckets[j].Name })
	return idx
}

// prune removes the sample files the new index does not list (samples
// whose clip left the data folder, older copies), then empty bucket
// folders, and returns how many files went.
func prune(existing map[string][]cachedFile, idx *dataset.Index, dir string) int {
	keep := map[string]bool{}
	for _, e := range idx.Samples {
		keep[filepath.Join(dir, filepath.FromSlash(e.File))] = true
	}
	n := 0
	folders := map[string]bool{}
	for _, files := range existing {
		for _, f := range files {
			if keep[f.path] {
				continue
			}
			if err := os.Remove(f.path); err == nil || errors.Is(err, os.ErrNotExist) {
				n++
			}
			folders[filepath.Dir(f.path)] = true
		}
	}
	for f := range folders {
		os.Remove(f) // only when empty
	}
	return n
}
