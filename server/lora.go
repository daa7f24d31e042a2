package server

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ferry/pipeline/wan"
)

// maxLoRAs bounds the adapters one request may stack.
const maxLoRAs = 8

// loraRef is one LoRA a request names: a file under the server's LoRA
// folders (never any other path) and the multiplier of its alpha/rank, as
// `ferry generate --lora FILE[:SCALE]` takes it.
type loraRef struct {
	Path  string  `json:"path"`
	Scale float64 `json:"scale"`
}

// parseLoRAs reads a request's lora (or lora_2) field: "NAME[:SCALE]", an
// object {"path", "scale"}, or a list of either.
func parseLoRAs(field string, raw json.RawMessage) ([]loraRef, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		list = []json.RawMessage{raw}
	}
	if len(list) > maxLoRAs {
		return nil, badField(field, "%d adapters: at most %d", len(list), maxLoRAs)
	}
	out := make([]loraRef, 0, len(list))
	for _, item := range list {
		l, err := parseLoRA(field, item)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func parseLoRA(field string, raw json.RawMessage) (loraRef, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		l := loraRef{Path: s, Scale: 1}
		// As --lora: a suffix after the last colon that is a number is the
		// scale; anything else is part of the name.
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			if f, err := strconv.ParseFloat(s[i+1:], 64); err == nil {
				l.Path, l.Scale = s[:i], f
			}
		}
		return l, checkLoRARef(field, l)
	}
	var obj struct {
		Path  string   `json:"path"`
		Scale *float64 `json:"scale"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return loraRef{}, badField(field, "want \"NAME[:SCALE]\", {\"path\": NAME, \"scale\": S} or a list of them")
	}
	l := loraRef{Path: obj.Path, Scale: 1}
	if obj.Scale != nil {
		l.Scale = *obj.Scale
	}
	return l, checkLoRARef(field, l)
}

func checkLoRARef(field string, l loraRef) error {
	if l.Path == "" {
		return badField(field, "names no file (want NAME or NAME:SCALE)")
	}
	if math.IsNaN(l.Scale) || math.IsInf(l.Scale, 0) || math.Abs(l.Scale) > 1000 {
		return badField(field, "scale of %s: want a finite number up to 1000", l.Path)
	}
	return nil
}

// loraRoots are the folders LoRA names resolve in: every --loras folder,
// and the lora/ or loras/ folder of every --models folder, with links
// resolved (so that a link cannot lead a name out of them).
func loraRoots(loraDirs, modelDirs []string) []string {
	var cands []string
	cands = append(cands, loraDirs...)
	for _, d := range modelDirs {
		cands = append(cands, filepath.Join(d, "lora"), filepath.Join(d, "loras"))
	}
	var roots []string
	for _, c := range cands {
		abs, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			continue
		}
		if st, err := os.Stat(real); err == nil && st.IsDir() && !contains(roots, real) {
			roots = append(roots, real)
		}
	}
	return roots
}

// resolveLoRA finds a LoRA name in the roots: a relative name is tried in
// each root in turn, an absolute one must lie inside a root. A name with
// "..", or one that resolves (links followed) outside every root, is a
// 400 that does not say whether such a file exists.
func resolveLoRA(field string, roots []string, name string) (string, error) {
	if strings.ContainsRune(name, 0) {
		return "", badField(field, "%q is not a file name", name)
	}
	for _, part := range strings.Split(filepath.ToSlash(name), "/") {
		if part == ".." {
			return "", badField(field, "%s: \"..\" is not allowed; name a file under the server's LoRA folders", name)
		}
	}
	if len(roots) == 0 {
		return "", badField(field, "this server serves no LoRAs (start it with --loras DIR, or put them in a models folder's loras/)")
	}
	var cands []string
	if filepath.IsAbs(name) {
		cands = []string{filepath.Clean(name)}
	} else {
		for _, r := range roots {
			cands = append(cands, filepath.Join(r, name))
		}
	}
	for _, c := range cands {
		real, err := filepath.EvalSymlinks(c)
		if err != nil || !within(roots, real) {
			continue
		}
		if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() {
			return real, nil
		}
	}
	return "", badField(field, "%s: no such LoRA under the server's LoRA folders", name)
}

// within reports whether path lies inside one of roots.
func within(roots []string, path string) bool {
	for _, r := range roots {
		rel, err := filepath.Rel(r, path)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}

// loadLoRAs resolves a spec's LoRAs (lora, and lora_2 for a Wan 2.2
// A14B model's low-noise expert) and reads them against m's transformer
// with load: Pipeline.CheckLoRA at admission (the header: a bad name or
// size is a 400, and the planner gets the adapters' bytes),
// Pipeline.LoadLoRA at dispatch (the values). Each job reads its own
// adapters and the pipeline takes them off after denoising, so two jobs on
// one model never share adapter state; the base weights are never merged.
// Caller holds mu and has opened m.
func (ms *models) loadLoRAs(m *model, s *spec, load func(path string, scale float64) (wan.LoRA, error)) error {
	var err error
	if s.loras, err = ms.readLoRAs("lora", s.LoRAs, load); err != nil {
		return err
	}
	s.loras2, err = ms.readLoRAs("lora_2", s.LoRAs2, load)
	return err
}

// readLoRAs resolves and reads the adapters one field names.
func (ms *models) readLoRAs(field string, refs []loraRef, load func(path string, scale float64) (wan.LoRA, error)) ([]wan.LoRA, error) {
	var out []wan.LoRA
	for _, ref := range refs {
		path, err := resolveLoRA(field, ms.loraRoots, ref.Path)
		if err != nil {
			return nil, err
		}
		l, err := load(path, ref.Scale)
		if err != nil {
			// The client sees its own name, not the server's folders.
			return nil, badField(field, "%s", strings.ReplaceAll(err.Error(), path, ref.Path))
		}
		out = append(out, l)
	}
	return out, nil
}

// checkExperts refuses the low-noise expert's fields (lora_2,
// guidance_scale_2) for a model with one transformer.
func checkExperts(m *model, s spec) error {
	if m.planPipe.TwoExperts() {
		return nil
	}
	if len(s.LoRAs2) > 0 {
		return badField("lora_2", "model %s has one transformer: lora_2 adapts the low-noise expert (transformer_2) of a Wan 2.2 A14B model; use lora", m.name)
	}
	if s.Guidance2 != nil {
		return badField("guidance_scale_2", "model %s has one transformer: guidance_scale_2 is the low-noise expert's scale on a Wan 2.2 A14B model; use guidance_scale", m.name)
	}
	return nil
}
