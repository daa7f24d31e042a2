// Package inspect describes a model without running it: its components and
// classes, parameter counts, dtypes and bytes per component and per
// residency block, the largest block (the floor of any streaming plan's
// device budget), and whether the checkpoint holds exactly the tensors the
// architecture needs. It reads configs and safetensors headers, never
// weights.
package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/clipvision"
	"ferry/model/synthetic"
	"ferry/model/umt5"
	"ferry/model/wan"
	"ferry/model/wanvae"
	"ferry/residency"
	"ferry/synth"
	"ferry/tensor"
)

// Block is one residency block: what moves to the device as a unit.
type Block struct {
	Name   string `json:"name"`
	Params int64  `json:"params"`
	// Bytes in storage; DeviceBytes once converted to float32 for compute.
	Bytes       int64 `json:"bytes"`
	DeviceBytes int64 `json:"device_bytes"`
	// Rows are tables read by row and never moved whole (embeddings).
	RowsBytes int64 `json:"rows_bytes,omitempty"`
}

// Component is one folder of the pipeline.
type Component struct {
	Name    string           `json:"name"`
	Library string           `json:"library"`
	Class   string           `json:"class"`
	Params  int64            `json:"params"`
	Bytes   int64            `json:"bytes"`
	DTypes  map[string]int64 `json:"dtypes,omitempty"` // bytes per storage dtype
	Blocks  []Block          `json:"blocks,omitempty"`
	Largest *Block           `json:"largest_block,omitempty"`
	// Missing tensors the architecture needs; Unexpected ones it does not
	// know; Mismatched ones whose shape differs ("name: have [..], want [..]").
	Missing    []string       `json:"missing,omitempty"`
	Unexpected []string       `json:"unexpected,omitempty"`
	Mismatched []string       `json:"mismatched,omitempty"`
	Config     map[string]any `json:"config,omitempty"`
	// Known is false for classes ferry cannot check.
	Known bool `json:"known"`
}

// Model is the whole description.
type Model struct {
	Name       string      `json:"name"`
	Class      string      `json:"class"`
	Components []Component `json:"components"`
	// LargestBlock names the biggest block of any component, on the device.
	LargestBlock      string `json:"largest_block"`
	LargestBlockBytes int64  `json:"largest_block_device_bytes"`
	Complete          bool   `json:"complete"`
	// MinDeviceBytes is the smallest device budget any plan runs the
	// default request (81 frames at 480x832) in, as the planner predicts
	// it (0: not profiled); MinDevicePlan names that plan.
	MinDeviceBytes int64  `json:"min_device_bytes,omitempty"`
	MinDevicePlan  string `json:"min_device_plan,omitempty"`
}

// ExpectedParams lists the tensors a component class needs, from its
// config.json alone. ok is false for classes ferry does not know.
func ExpectedParams(component, class string, raw []byte) (ps []residency.ParamSpec, ok bool, err error) {
	switch class {
	case "UMT5EncoderModel", "T5EncoderModel":
		c, err := umt5.ParseConfig(raw)
		if err != nil {
			return nil, true, err
		}
		return c.Params(), true, nil
	case "WanTransformer3DModel":
		c, err := wan.ParseConfig(raw)
		if err != nil {
			return nil, true, err
		}
		return c.Params(), true, nil
	case "CLIPVisionModel", "CLIPVisionModelWithProjection":
		// The Wan 2.1 I2V folders' image encoder (a projection head, if
		// present, is an extra tensor ferry never reads).
		c, err := clipvision.ParseConfig(raw)
		if err != nil {
			return nil, true, err
		}
		return c.Params(), true, nil
	case "AutoencoderKLWan":
		c, err := wanvae.ParseConfig(raw)
		if err != nil {
			return nil, true, err
		}
		return c.Params(), true, nil
	case "SyntheticTextEncoder", "SyntheticDenoiser", "SyntheticDecoder":
		c, err := synthetic.ParseConfig(raw)
		if err != nil {
			return nil, true, err
		}
		return c.Params(component), true, nil
	}
	return nil, false, nil
}

// Folder describes a diffusers pipeline folder from its configs and
// safetensors headers.
func Folder(dir string) (*Model, error) {
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &Model{Name: dir, Class: f.Class, Complete: true}
	for _, name := range f.Names() {
		c, err := f.Component(name)
		if err != nil {
			return nil, err
		}
		comp, err := describe(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m.add(comp)
	}
	return m, nil
}

// Builtin describes an architecture ferry synthesises (see synth.Names),
// with no files: storage as published (bf16, the A14B's experts fp32),
// float32 on the device.
func Builtin(name string) (*Model, error) {
	a, err := synth.Lookup(name)
	if err != nil {
		return nil, err
	}
	m := &Model{Name: name, Class: a.Class, Complete: true}
	for _, c := range a.Components {
		dt := c.DType
		if dt == 0 {
			dt = a.DType // the architecture's default (fp32 for the A14B's experts)
		}
		if dt == 0 {
			dt = dtype.BF16
		}
		comp := Component{Name: c.Name, Library: c.Library, Class: c.Class, Known: len(c.Params) > 0}
		if len(c.Params) > 0 {
			stored := map[string]stored{}
			for _, p := range c.Params {
				stored[p.Name] = storedOf(p.Shape, dt)
			}
			comp.fill(c.Params, stored)
		}
		comp.Config = summary(c.Config)
		m.add(comp)
	}
	return m, nil
}

func (m *Model) add(c Component) {
	m.Components = append(m.Components, c)
	if c.Largest != nil && c.Largest.DeviceBytes > m.LargestBlockBytes {
		m.LargestBlock, m.LargestBlockBytes = c.Largest.Name, c.Largest.DeviceBytes
	}
	if len(c.Missing)+len(c.Mismatched) > 0 {
		m.Complete = false
	}
}

// tiedAlias are tensors some checkpoints carry as duplicates of tied
// weights (older T5 saves keep the encoder's view of the shared table).
var tiedAlias = map[string]bool{"encoder.embed_tokens.weight": true}

// stored is what a checkpoint holds for one tensor.
type stored struct {
	shape []int
	dt    dtype.DType
	bytes int64
}

func storedOf(shape []int, dt dtype.DType) stored {
	return stored{shape: shape, dt: dt, bytes: int64(tensor.NumElems(shape)) * int64(dt.Size())}
}

func describe(c *checkpoint.Component) (Component, error) {
	comp := Component{Name: c.Name, Library: c.Library, Class: c.Class}
	raw, err := rawConfig(c)
	if err != nil {
		return comp, err
	}
	if raw != nil {
		var cfg any
		if json.Unmarshal(raw, &cfg) == nil {
			comp.Config = summary(cfg)
		}
	}
	expected, known, err := ExpectedParams(c.Name, c.Class, raw)
	if err != nil {
		return comp, err
	}
	comp.Known = known
	have := map[string]stored{}
	if known {
		set, err := c.Weights()
		if err != nil {
			return comp, err
		}
		for _, name := range set.Names() {
			info, _ := set.Lookup(name)
			have[name] = stored{shape: info.Shape, dt: info.DType, bytes: info.Size}
		}
	}
	comp.fill(expected, have)
	return comp, nil
}

func rawConfig(c *checkpoint.Component) ([]byte, error) {
	path, err := c.ConfigPath()
	if err != nil {
		return nil, nil // tokenizers without a config are fine
	}
	return readFile(path)
}

// fill totals the component by block and compares what is stored with
// what the architecture expects.
func (c *Component) fill(expected []residency.ParamSpec, have map[string]stored) {
	c.DTypes = map[string]int64{}
	byBlock := map[string]*Block{}
	var order []string
	want := map[string]bool{}
	for _, p := range expected {
		want[p.Name] = true
		s, ok := have[p.Name]
		if !ok {
			c.Missing = append(c.Missing, p.Name)
			continue
		}
		if !slices.Equal(s.shape, p.Shape) {
			c.Mismatched = append(c.Mismatched, fmt.Sprintf("%s: have %v, want %v", p.Name, s.shape, p.Shape))
		}
		b := byBlock[p.Block]
		if b == nil {
			b = &Block{Name: c.Name + "." + p.Block}
			byBlock[p.Block] = b
			order = append(order, p.Block)
		}
		n := int64(tensor.NumElems(p.Shape))
		b.Params += n
		b.Bytes += s.bytes
		if p.Rows {
			b.RowsBytes += s.bytes
		} else {
			b.DeviceBytes += n * 4
		}
		c.Params += n
		c.Bytes += s.bytes
		c.DTypes[s.dt.String()] += s.bytes
	}
	for name := range have {
		if !want[name] && len(expected) > 0 && !tiedAlias[name] {
			c.Unexpected = append(c.Unexpected, name)
		}
	}
	sort.Strings(c.Unexpected)
	for _, k := range order {
		b := *byBlock[k]
		c.Blocks = append(c.Blocks, b)
		if c.Largest == nil || b.DeviceBytes > c.Largest.DeviceBytes {
			c.Largest = &b
		}
	}
}

// summary keeps a config's scalar settings (sizes, flags), dropping lists
// longer than a few entries and private keys.
func summary(cfg any) map[string]any {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := map[string]any{}
	for k, v := range m {
		if strings.HasPrefix(k, "_") {
			continue
		}
		if l, ok := v.([]any); ok && len(l) > 4 {
			continue
		}
		if _, ok := v.(map[string]any); ok {
			continue
		}
		out[k] = v
	}
	return out
}

// WriteText prints the description for people.
func (m *Model) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s (%s)\n", m.Name, m.Class)
	for _, c := range m.Components {
		if !c.Known {
			fmt.Fprintf(w, "  %-13s %-26s (not checked)\n", c.Name, c.Class)
			continue
		}
		fmt.Fprintf(w, "  %-13s %-26s %8.1fM params  %10s %s\n", c.Name, c.Class, float64(c.Params)/1e6,
			tensor.FormatBytes(c.Bytes), dtypes(c.DTypes))
		if c.Largest != nil {
			fmt.Fprintf(w, "      %d blocks, largest %s: %s on the device in fp32\n", len(c.Blocks), c.Largest.Name, tensor.FormatBytes(c.Largest.DeviceBytes))
		}
		for _, b := range c.Blocks {
			if b.RowsBytes > 0 {
				fmt.Fprintf(w, "      %s: %s table read by row (never moved whole)\n", b.Name, tensor.FormatBytes(b.RowsBytes))
			}
		}
		for _, s := range []struct {
			what string
			list []string
		}{{"missing", c.Missing}, {"unexpected", c.Unexpected}, {"wrong shape", c.Mismatched}} {
			if len(s.list) > 0 {
				fmt.Fprintf(w, "      %d %s: %s\n", len(s.list), s.what, abbreviate(s.list, 3))
			}
		}
		if len(c.Config) > 0 {
			fmt.Fprintf(w, "      config: %s\n", configLine(c.Config))
		}
	}
	status := "complete: every tensor the architecture needs is present"
	if !m.Complete {
		status = "INCOMPLETE: tensors are missing or misshapen (see above)"
	}
	fmt.Fprintf(w, "  %s\n", status)
	if m.LargestBlock != "" {
		fmt.Fprintf(w, "  largest block: %s, %s on the device in fp32\n", m.LargestBlock, tensor.FormatBytes(m.LargestBlockBytes))
	}
	if m.MinDeviceBytes > 0 {
		fmt.Fprintf(w, "  smallest device budget for 81 frames at 480x832 (this CPU's default --dtype): %s (plan %s)\n", tensor.FormatBytes(m.MinDeviceBytes), m.MinDevicePlan)
	}
}

func dtypes(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k)
	}
	return strings.Join(parts, "+")
}

func abbreviate(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return strings.Join(list[:n], ", ") + fmt.Sprintf(", ... (%d more)", len(list)-n)
}

func configLine(cfg map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		v, _ := json.Marshal(cfg[k])
		parts = append(parts, k+"="+string(v))
	}
	s := strings.Join(parts, " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
