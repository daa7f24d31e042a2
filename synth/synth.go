// Package synth writes random-weight checkpoints in the diffusers folder
// layout, so that every placement can be exercised and full-size memory and
// speed measured without downloads. A checkpoint is deterministic in its
// seed: each tensor's values come from a generator seeded by the seed and
// the tensor's name, so any tensor can be regenerated alone.
//
// Weights are written tensor by tensor through checkpoint.Writer and never
// held whole in memory: the 14B transformer is ~28 GB in bf16.
package synth

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/residency"
)

// Component is one model folder of a pipeline: its config and weights.
type Component struct {
	Name    string // folder name, e.g. "transformer"
	Library string // model_index.json entry, e.g. "diffusers"
	Class   string // e.g. "WanTransformer3DModel"
	// Config is written as config.json (nil: none).
	Config any
	// ConfigFile overrides the config's file name (default config.json).
	ConfigFile string
	// Params are the weights; none means a folder with configs only.
	Params []residency.ParamSpec
	// DType is the storage dtype of the weights.
	DType dtype.DType
	// WeightsName is the file stem: "diffusion_pytorch_model" (diffusers)
	// or "model" (transformers).
	WeightsName string
	// Extra writes files that are not weights (a tokenizer).
	Extra func(dir string) error
	// Salt is added to the seed of this component's tensors, so that two
	// components with the same tensor names (Wan 2.2's experts) differ.
	Salt uint64
}

// Arch is a whole pipeline folder.
type Arch struct {
	Name       string
	Class      string // model_index.json _class_name
	Components []Component
	// Settings are model_index.json's pipeline settings beside the
	// components (Wan 2.2's boundary_ratio and expand_timesteps).
	Settings map[string]any
	// DType is the storage dtype of weights that follow the request when
	// Options.DType is not set (0: bf16, as most checkpoints publish).
	DType dtype.DType
}

// Options control a write.
type Options struct {
	Seed uint64
	// DType is the storage dtype for weights that follow the request (the
	// VAE stays float32 as published checkpoints have it).
	DType dtype.DType
	// ShardBytes splits a component's weights into shards of at most this
	// many bytes with an index, as large published checkpoints are (0:
	// default 5 GB).
	ShardBytes int64
	// Progress, when set, is called after every tensor with the bytes
	// written so far and in all.
	Progress func(done, total int64)
}

// DefaultShardBytes is the shard size of published checkpoints.
const DefaultShardBytes = 5_000_000_000

// Write writes arch into dir. dir must not exist: the folder is built under
// a temporary name beside it and renamed when complete, so an interrupted
// write leaves nothing that looks like a checkpoint.
func Write(dir string, arch Arch, opt Options) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("synth: %s already exists (remove it or choose another --out)", dir)
	}
	if opt.ShardBytes <= 0 {
		opt.ShardBytes = DefaultShardBytes
	}
	if opt.DType == 0 {
		opt.DType = arch.DType
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it private
		os.RemoveAll(tmp)
		return fmt.Errorf("synth: %w", err)
	}
	if err := writeAll(tmp, arch, opt); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// TotalBytes is what the weights of arch take on disk under opt.
func TotalBytes(arch Arch, opt Options) int64 {
	var n int64
	for _, c := range arch.Components {
		dt := c.storage(opt)
		for _, p := range c.Params {
			n += numel(p.Shape) * int64(dt.Size())
		}
	}
	return n
}

func (c Component) storage(opt Options) dtype.DType {
	if c.DType != 0 {
		return c.DType
	}
	if opt.DType != 0 {
		return opt.DType
	}
	return dtype.F32
}

func writeAll(root string, arch Arch, opt Options) error {
	index := map[string]any{"_class_name": arch.Class, "_diffusers_version": "0.40.0"}
	for k, v := range arch.Settings {
		index[k] = v
	}
	w := &progress{total: TotalBytes(arch, opt), fn: opt.Progress}
	for _, c := range arch.Components {
		index[c.Name] = []string{c.Library, c.Class}
		dir := filepath.Join(root, c.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
		if err := writeComponent(dir, c, opt, w); err != nil {
			return fmt.Errorf("synth %s: %w", c.Name, err)
		}
	}
	return writeJSON(filepath.Join(root, "model_index.json"), index)
}

func writeComponent(dir string, c Component, opt Options, w *progress) error {
	if c.Config != nil {
		name := c.ConfigFile
		if name == "" {
			name = "config.json"
		}
		cfg, err := configWithClass(c)
		if err != nil {
			return err
		}
		cfg = withTorchDType(cfg, c, opt)
		if err := writeJSON(filepath.Join(dir, name), cfg); err != nil {
			return err
		}
	}
	if c.Extra != nil {
		if err := c.Extra(dir); err != nil {
			return err
		}
	}
	if len(c.Params) == 0 {
		return nil
	}
	return writeWeights(dir, c, opt, w)
}

// writeWeights writes the tensors in shards of at most opt.ShardBytes.
func writeWeights(dir string, c Component, opt Options, w *progress) error {
	dt := c.storage(opt)
	shards := splitShards(c.Params, dt, opt.ShardBytes)
	stem := c.WeightsName
	if len(shards) == 1 {
		return writeShard(filepath.Join(dir, stem+".safetensors"), shards[0], dt, opt.Seed+c.Salt, w)
	}
	weightMap := map[string]string{}
	var total int64
	for i, s := range shards {
		name := fmt.Sprintf("%s-%05d-of-%05d.safetensors", stem, i+1, len(shards))
		if err := writeShard(filepath.Join(dir, name), s, dt, opt.Seed+c.Salt, w); err != nil {
			return err
		}
		for _, p := range s {
			weightMap[p.Name] = name
			total += numel(p.Shape) * int64(dt.Size())
		}
	}
	return checkpoint.WriteIndex(filepath.Join(dir, stem+".safetensors.index.json"), weightMap, total)
}

func splitShards(params []residency.ParamSpec, dt dtype.DType, limit int64) [][]residency.ParamSpec {
	var shards [][]residency.ParamSpec
	var cur []residency.ParamSpec
	var size int64
	for _, p := range params {
		n := numel(p.Shape) * int64(dt.Size())
		if len(cur) > 0 && size+n > limit {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, p)
		size += n
	}
	return append(shards, cur)
}

func writeShard(path string, params []residency.ParamSpec, dt dtype.DType, seed uint64, w *progress) error {
	infos := make([]checkpoint.TensorInfo, len(params))
	for i, p := range params {
		infos[i] = checkpoint.TensorInfo{Name: p.Name, DType: dt, Shape: slices.Clone(p.Shape)}
	}
	out, err := checkpoint.NewWriter(path, infos, map[string]string{"format": "pt", "ferry": "synth"})
	if err != nil {
		return err
	}
	buf := make([]byte, chunkElems*8)
	for _, p := range params {
		tw, err := out.Next(p.Name)
		if err != nil {
			out.Abort()
			return err
		}
		if err := fill(tw, p, dt, seed, buf); err != nil {
			out.Abort()
			return fmt.Errorf("write %s: %w", p.Name, err)
		}
		w.add(numel(p.Shape) * int64(dt.Size()))
	}
	return out.Close()
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func numel(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

type progress struct {
	done, total int64
	fn          func(done, total int64)
}

func (p *progress) add(n int64) {
	p.done += n
	if p.fn != nil {
		p.fn(p.done, p.total)
	}
}

// isNorm says whether a 1-D weight is a normalisation scale (initialised
// to one) rather than a bias.
func isNorm(name string) bool {
	return strings.HasSuffix(name, ".gamma") || strings.Contains(name, "norm") && strings.HasSuffix(name, ".weight")
}

// configWithClass adds diffusers' "_class_name" key to a diffusers
// component's config, as save_pretrained writes it.
// withTorchDType makes a transformers config's torch_dtype name the dtype
// its weights are written in (--dtype), as transformers' save_pretrained
// does.
func withTorchDType(cfg any, c Component, opt Options) any {
	m, ok := cfg.(map[string]any)
	if _, has := m["torch_dtype"]; !ok || !has || len(c.Params) == 0 {
		return cfg
	}
	name, ok := torchNames[c.storage(opt)]
	if !ok {
		return cfg
	}
	out := maps.Clone(m)
	out["torch_dtype"] = name
	return out
}

// torchNames are PyTorch's names of the dtypes synth writes.
var torchNames = map[dtype.DType]string{dtype.F32: "float32", dtype.BF16: "bfloat16", dtype.F16: "float16"}

func configWithClass(c Component) (any, error) {
	if c.Library != "diffusers" {
		return c.Config, nil
	}
	raw, err := json.Marshal(c.Config)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return c.Config, nil // not an object: write as is
	}
	if _, ok := m["_class_name"]; !ok {
		m["_class_name"] = c.Class
	}
	return m, nil
}
