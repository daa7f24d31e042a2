package planner

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/model/umt5"
	"ferry/model/wan"
	"ferry/model/wanvae"
)

// ProfileFromFolder builds a profile from a diffusers Wan pipeline folder's
// model_index.json and config files. No weights are read. A component's
// storage dtype comes from the headers of its safetensors files (the float
// dtype that holds the most bytes); where it has none, from its config's
// torch_dtype.
func ProfileFromFolder(dir string) (*Profile, error) {
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	defer f.Close()
	return profileFolder(f, dir)
}

func profileFolder(f *checkpoint.Folder, dir string) (*Profile, error) {
	raw := map[string][]byte{}
	for _, name := range []string{TextEncoder, Transformer, VAE} {
		c, err := f.Component(name)
		if err != nil {
			return nil, fmt.Errorf("planner: %w", err)
		}
		path, err := c.ConfigPath()
		if err != nil {
			return nil, fmt.Errorf("planner: %w", err)
		}
		if raw[name], err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("planner: read %s config: %w", name, err)
		}
	}
	text, err := umt5.ParseConfig(raw[TextEncoder])
	if err != nil {
		return nil, fmt.Errorf("planner: %s: %w", dir, err)
	}
	tr, err := wan.ParseConfig(raw[Transformer])
	if err != nil {
		return nil, fmt.Errorf("planner: %s: %w", dir, err)
	}
	vae, err := wanvae.ParseConfig(raw[VAE])
	if err != nil {
		return nil, fmt.Errorf("planner: %s: %w", dir, err)
	}
	p, err := NewWanProfileVAE(filepath.Base(filepath.Clean(dir)), text, tr, vae)
	if err != nil {
		return nil, err
	}
	if err := folderExperts(f, dir, p, raw[Transformer]); err != nil {
		return nil, err
	}
	if err := folderImageToVideo(f, dir, p, tr, vae, raw); err != nil {
		return nil, err
	}
	for _, c := range p.Components {
		comp, _ := f.Component(c.Name)
		w, _ := comp.Weights() // nil when it cannot be opened: the run reports why
		if dt, ok := storageOf(raw[c.Name], w); ok {
			c.Storage = dt
		}
		c.Cached = pageCached(w)
	}
	return p, nil
}

// diskProbeBytes is how much of a checkpoint MeasureFolder reads (at most;
// only pages outside the page cache): 0.3 s on a 0.2 GB/s disk.
const diskProbeBytes = 64 << 20

// MeasureFolder is ProfileFromFolder after a timed read of up to
// diskProbeBytes of the weights' pages that are not in the page cache,
// spread over the components by size (Profile.DiskRead), bypassing the
// page cache where it can (checkpoint.Set.ProbeUncached); pages read
// through it stay cached, and the profile's Cached fractions count them.
func MeasureFolder(dir string) (*Profile, error) {
	f, err := checkpoint.OpenFolder(dir)
	if err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	defer f.Close()
	probe, err := probeFolder(f)
	if err != nil {
		return nil, err
	}
	p, err := profileFolder(f, dir)
	if err != nil {
		return nil, err
	}
	p.DiskRead = probe
	return p, nil
}

func probeFolder(f *checkpoint.Folder) (checkpoint.Probe, error) {
	var sets []*checkpoint.Set
	var all int64
	for _, name := range []string{TextEncoder, Transformer, Transformer2, VAE} {
		if _, ok := f.Components[name]; !ok && name == Transformer2 {
			continue
		}
		c, err := f.Component(name)
		if err != nil {
			return checkpoint.Probe{}, fmt.Errorf("planner: %w", err)
		}
		w, err := c.Weights()
		if err != nil {
			return checkpoint.Probe{}, fmt.Errorf("planner: %w", err)
		}
		sets = append(sets, w)
		all += w.TotalBytes()
	}
	var probe checkpoint.Probe
	for _, w := range sets {
		share := diskProbeBytes * w.TotalBytes() / max(all, 1)
		p, err := w.ProbeUncached(max(share, checkpoint.ProbeChunk))
		if err != nil {
			// The probe cannot run (no residency query on this OS, or a
			// read failed, which the run itself will report): plan with
			// the profile's disk figure.
			return checkpoint.Probe{}, nil
		}
		probe = probe.Add(p)
	}
	return probe, nil
}

// pageCached is the fraction of the weights w the OS holds in its page
// cache now; 0 where that cannot be told.
func pageCached(w *checkpoint.Set) float64 {
	if w == nil {
		return 0
	}
	cached, total, err := w.PageCached()
	if err != nil || total == 0 {
		return 0
	}
	return float64(cached) / float64(total)
}

// storageOf is the float dtype holding the most bytes of the weights w
// (an fp8 file keeps its norms and biases wider than its weights), else,
// where no weights could be opened (w nil), the config's torch_dtype. The
// files come first: they are what the run reads and uploads, and a
// config's torch_dtype is only the dtype PyTorch loads as, which a
// converted checkpoint may not have updated.
func storageOf(config []byte, w *checkpoint.Set) (dtype.DType, bool) {
	if dt, ok := heaviestFloat(w); ok {
		return dt, true
	}
	var c struct {
		TorchDType string `json:"torch_dtype"`
	}
	if err := jsonUnmarshal(config, &c); err != nil {
		return 0, false
	}
	dt, err := dtype.Parse(c.TorchDType)
	return dt, err == nil && dt.IsFloat()
}

// heaviestFloat is the float dtype holding the most bytes of w (nil: none).
func heaviestFloat(w *checkpoint.Set) (dtype.DType, bool) {
	if w == nil {
		return 0, false
	}
	bytes := map[dtype.DType]int64{}
	for _, n := range w.Names() {
		if t, _ := w.Lookup(n); t.DType.IsFloat() {
			bytes[t.DType] += t.Size
		}
	}
	var best dtype.DType
	found := false
	for dt, n := range bytes {
		if !found || n > bytes[best] || (n == bytes[best] && dt < best) {
			best, found = dt, true
		}
	}
	return best, found
}

// folderExperts reads the scheduler config and, when model_index.json has
// a boundary_ratio, transformer_2, whose config must be the transformer's
// (the profile gives both experts one architecture).
func folderExperts(f *checkpoint.Folder, dir string, p *Profile, trRaw []byte) error {
	if c, err := f.Component("scheduler"); err == nil {
		if path, err := c.ConfigPath(); err == nil {
			if p.Scheduler, err = os.ReadFile(path); err != nil {
				return fmt.Errorf("planner: read scheduler config: %w", err)
			}
		}
	}
	b, ok := f.Config["boundary_ratio"].(float64)
	if !ok {
		return nil
	}
	c, err := f.Component(Transformer2)
	if err != nil {
		return fmt.Errorf("planner: %s: boundary_ratio %g: %w", dir, b, err)
	}
	path, err := c.ConfigPath()
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("planner: read %s config: %w", Transformer2, err)
	}
	first, err := wan.ParseConfig(trRaw)
	if err != nil {
		return fmt.Errorf("planner: %s: %w", dir, err)
	}
	second, err := wan.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("planner: %s: %s: %w", dir, Transformer2, err)
	}
	if !reflect.DeepEqual(first, second) {
		return fmt.Errorf("planner: %s: %s's config differs from the transformer's; the planner profiles experts of one architecture", dir, Transformer2)
	}
	return p.AddExpert(b)
}
