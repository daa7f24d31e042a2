package server

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/pipeline"
	"ferry/pipeline/wan"
	"ferry/residency"
)

// sharedComp is one component that several model folders hold with the
// same content (one UMT5 for two Wan sizes, one VAE for the Wan 2.1
// family): the server keeps it in one runtime of its own and every member
// runs it there, so its weights are loaded and held once.
type sharedComp struct {
	component string // wan.TextEncoder or wan.VAE
	id        string // the component's name and the content hash's head
	members   []*model

	// Guarded by models.mu.
	pipe  *wan.Pipeline // the first member's; its copy is the one rt holds
	rt    *pipeline.Runtime
	rtKey string
	ctx   *switchCtx
	user  *model // the member whose job runs on it now
}

// inUse says a job other than skip's runs on the component now.
func (sh *sharedComp) inUse(skip *model) bool { return sh.user != nil && sh.user != skip }

func (sh *sharedComp) deviceBytes() int64 {
	if sh.rt == nil {
		return 0
	}
	return sh.rt.Device.Stats().Reserved
}

func (sh *sharedComp) hostBytes() int64 {
	if sh.rt == nil {
		return 0
	}
	return sh.rt.Host.Stats().Reserved
}

func (sh *sharedComp) names() []string {
	var out []string
	for _, m := range sh.members {
		out = append(out, m.name)
	}
	sort.Strings(out)
	return out
}

// findShared groups models whose shareable components (wan.Shareable)
// have the same content. A folder whose component cannot be fingerprinted
// keeps its own.
func findShared(byName map[string]*model) []*sharedComp {
	var out []*sharedComp
	for _, comp := range wan.Shareable {
		groups := map[string][]*model{}
		for _, m := range byName {
			key, err := componentKey(filepath.Join(m.dir, comp))
			if err != nil {
				continue
			}
			if comp == wan.VAE {
				// A holder of an image-to-video folder must encode too:
				// text-to-video folders register the decoder alone.
				key += vaeKind(m)
			}
			groups[key] = append(groups[key], m)
		}
		for key, ms := range groups {
			if len(ms) < 2 {
				continue
			}
			sort.Slice(ms, func(a, b int) bool { return ms[a].name < ms[b].name })
			sh := &sharedComp{component: comp, id: comp + "-" + key[:12], members: ms, ctx: newSwitchCtx()}
			for _, m := range ms {
				m.shared = append(m.shared, sh)
			}
			out = append(out, sh)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	for _, m := range byName {
		sort.Slice(m.shared, func(a, b int) bool { return m.shared[a].id < m.shared[b].id })
	}
	return out
}

// vaeKind tells VAEs of one content apart by how their folders register
// them: "" decoder alone (text to video), "-i2v" with the encoder
// (image-to-video folders), and for a TI2V folder, which registers either
// by request, a key of its own (never shared).
func vaeKind(m *model) string {
	f, err := checkpoint.OpenFolder(m.dir)
	if err != nil {
		return ""
	}
	defer f.Close()
	switch expand, _ := f.Config["expand_timesteps"].(bool); {
	case f.Class == wan.ImageToVideoClass:
		return "-i2v"
	case expand:
		return "-ti2v-" + m.name
	}
	return ""
}

// componentKey fingerprints a component folder's content: its config and,
// for every safetensors file, its size, its whole header (names, dtypes,
// shapes, offsets) and 64 samples of 4 KiB spread over its data. Two
// folders with the same key hold the same weights unless they differ only
// between the samples, which a fine-tune (every tensor moves) does not;
// identical files (copies, links) always match.
func componentKey(dir string) (string, error) {
	h := sha256.New()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", err
	}
	h.Write(cfg)
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("%s: no safetensors files", dir)
	}
	sort.Strings(files)
	for _, f := range files {
		fmt.Fprintf(h, "\x00%s\x00", filepath.Base(f))
		if err := fingerprint(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fingerprint writes a safetensors file's size, header and data samples.
func fingerprint(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	hdr := int64(binary.LittleEndian.Uint64(n[:]))
	if hdr <= 0 || 8+hdr > size || hdr > 100<<20 {
		return fmt.Errorf("%s: not a safetensors file", path)
	}
	fmt.Fprintf(w, "%d\x00", size)
	if _, err := io.Copy(w, io.NewSectionReader(f, 0, 8+hdr)); err != nil {
		return err
	}
	const samples, chunk = 64, 4096
	data := size - 8 - hdr
	buf := make([]byte, chunk)
	for i := range int64(samples) {
		off := 8 + hdr + data*i/samples
		k, err := f.ReadAt(buf[:min(chunk, size-off)], off)
		if err != nil && err != io.EOF {
			return err
		}
		w.Write(buf[:k])
	}
	return nil
}

// holdShared makes sure each of m's shared components has a runtime for
// dtype dt and budgets b (placing the component as plan places it), and
// points m's pipeline at them. A remix runtime (rtVideo) registers its own
// VAE: a shared one only decodes. Caller holds mu and has opened m.
func (ms *models) holdShared(m *model, plan *residency.Plan, b pipeline.Budget, dt dtype.DType) error {
	for _, sh := range m.shared {
		if m.rtVideo && sh.component == wan.VAE {
			delete(m.runPipe.Shared, wan.VAE)
			continue
		}
		if err := ms.hold(sh, plan, b, dt); err != nil {
			return err
		}
		if m.runPipe.Shared == nil {
			m.runPipe.Shared = map[string]*wan.Shared{}
		}
		m.runPipe.Shared[sh.component] = &wan.Shared{Pipeline: sh.pipe, Runtime: sh.rt}
	}
	return nil
}

// hold gives sh a runtime for dt and b. Caller holds mu.
func (ms *models) hold(sh *sharedComp, plan *residency.Plan, b pipeline.Budget, dt dtype.DType) error {
	if sh.pipe == nil {
		// The first member's own pipeline holds it: Register leaves shared
		// components out of the member's runtime, so their models are free
		// for this one to bind, and the folder is not opened again.
		first := sh.members[0]
		if err := ms.open(first); err != nil {
			return err
		}
		sh.pipe = first.runPipe
	}
	key := runtimeKey(dt, b)
	if sh.rt != nil && sh.rtKey == key {
		return nil
	}
	ms.closeShared(sh)
	tp := &residency.Plan{Name: plan.Name, Run: plan.Run,
		Components: map[string]residency.ComponentPlan{sh.component: plan.For(sh.component)}}
	rt, err := pipeline.NewRuntime(b, tp, pipeline.Options{Context: sh.ctx, ComputeDType: dt,
		SmallPagesFirst: ms.hw.SmallPagesFirst(), OnBlock: sh.ctx.onBlock})
	if err != nil {
		return err
	}
	if err := sh.pipe.RegisterShared(rt.Exec, sh.component); err != nil {
		rt.Close()
		return fmt.Errorf("shared %s: %w", sh.id, err)
	}
	sh.rt, sh.rtKey = rt, key
	return nil
}

// closeShared drops a shared component's weights to the disk tier. Caller
// holds mu.
func (ms *models) closeShared(sh *sharedComp) {
	if sh.rt == nil {
		return
	}
	sh.rt.Close()
	sh.rt, sh.rtKey = nil, ""
	ms.evictions++
	for _, m := range sh.members {
		if m.runPipe != nil {
			delete(m.runPipe.Shared, sh.component)
		}
	}
}

// dropUnused closes the shared components of a list that no resident
// member needs any more. Caller holds mu.
func (ms *models) dropUnused(shs []*sharedComp) {
	for _, sh := range shs {
		if sh.user == nil && !sh.memberResident() {
			ms.closeShared(sh)
		}
	}
}

func (sh *sharedComp) memberResident() bool {
	for _, m := range sh.members {
		if m.rt != nil {
			return true
		}
	}
	return false
}

// sharedView is a shared component in GET /v1/residency: held once, for
// every model named.
type sharedView struct {
	ID          string          `json:"id"`
	Component   string          `json:"component"`
	Models      []string        `json:"models"`
	Resident    bool            `json:"resident"`
	InUse       bool            `json:"in_use"`
	DeviceBytes int64           `json:"device_bytes"`
	HostBytes   int64           `json:"host_bytes"`
	Components  []componentView `json:"components"`
}

func (sh *sharedComp) view() sharedView {
	v := sharedView{ID: sh.id, Component: sh.component, Models: sh.names(), Resident: sh.rt != nil,
		InUse: sh.user != nil, Components: []componentView{}}
	if sh.rt != nil {
		v.DeviceBytes, v.HostBytes = sh.deviceBytes(), sh.hostBytes()
		v.Components = componentsOf(sh.rt)
	}
	return v
}

// sharedNote names the shared components of m, for its residency entry.
func sharedNote(m *model) []string {
	var out []string
	for _, sh := range m.shared {
		out = append(out, sh.id)
	}
	return out
}

// sharesWith says sh is one of m's shared components.
func (m *model) sharesWith(sh *sharedComp) bool { return slices.Contains(m.shared, sh) }
