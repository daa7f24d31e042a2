package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ModelIndexName is the file naming a diffusers pipeline's components.
const ModelIndexName = "model_index.json"

// Config files a component folder may hold, in the order Config looks for
// them: models, schedulers, tokenizers, image processors.
var configNames = []string{"config.json", "scheduler_config.json", "tokenizer_config.json", "preprocessor_config.json"}

// Folder is a diffusers pipeline folder, as read from its model_index.json.
type Folder struct {
	Dir   string
	Class string // _class_name, e.g. "WanPipeline"
	// Meta holds the other keys starting with '_' (e.g. "_diffusers_version").
	Meta map[string]any
	// Config holds the pipeline's own settings: entries that are not
	// components, e.g. "boundary_ratio": null, "expand_timesteps": false.
	Config map[string]any
	// Components are the present components by name.
	Components map[string]*Component
	// Absent lists, sorted, the components declared as [null, null].
	Absent []string
}

// Component is one folder of a pipeline: a model, scheduler or tokenizer.
type Component struct {
	Name    string // key in model_index.json, also the folder name
	Library string // "diffusers", "transformers"
	Class   string // e.g. "UMT5EncoderModel"
	Dir     string

	mu      sync.Mutex
	weights *Set
}

// OpenFolder reads dir/model_index.json and checks that every component it
// declares has a folder. Configs and weights are read when asked for.
func OpenFolder(dir string) (*Folder, error) {
	path := filepath.Join(dir, ModelIndexName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open pipeline folder: %w", err)
	}
	if err := checkJSON(data); err != nil {
		return nil, &FormatError{File: path, Reason: err.Error(), Err: err}
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(data, &entries); err != nil || entries == nil {
		return nil, formatErr(path, "not a JSON object")
	}
	f := &Folder{Dir: dir, Meta: map[string]any{}, Config: map[string]any{}, Components: map[string]*Component{}}
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		if err := f.addEntry(path, key, entries[key]); err != nil {
			return nil, err
		}
	}
	if f.Class == "" {
		return nil, formatErr(path, "no _class_name")
	}
	return f, nil
}

// addEntry files one model_index.json entry as metadata, component, absent
// component or pipeline setting.
func (f *Folder) addEntry(path, key string, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return formatErr(path, "entry %q: %v", key, err)
	}
	if strings.HasPrefix(key, "_") {
		if key == "_class_name" {
			s, ok := v.(string)
			if !ok {
				return formatErr(path, "_class_name is not a string")
			}
			f.Class = s
		}
		f.Meta[key] = v
		return nil
	}
	lib, class, isComponent, err := componentEntry(v)
	if err != nil {
		return formatErr(path, "entry %q: %v", key, err)
	}
	switch {
	case !isComponent:
		f.Config[key] = v
	case lib == "":
		f.Absent = append(f.Absent, key)
	default:
		return f.addComponent(path, key, lib, class)
	}
	return nil
}

// componentEntry recognises ["library", "Class"] and [null, null]. Any
// other value is a pipeline setting, except a half-null pair, which is an
// error.
func componentEntry(v any) (lib, class string, ok bool, err error) {
	pair, isList := v.([]any)
	if !isList || len(pair) != 2 {
		return "", "", false, nil
	}
	if pair[0] == nil && pair[1] == nil {
		return "", "", true, nil
	}
	lib, libOK := pair[0].(string)
	class, classOK := pair[1].(string)
	switch {
	case libOK && classOK && lib != "" && class != "":
		return lib, class, true, nil
	case (libOK || pair[0] == nil) && (classOK || pair[1] == nil):
		return "", "", false, fmt.Errorf("component entry %v is malformed: want [library, class] or [null, null]", pair)
	}
	return "", "", false, nil
}

func (f *Folder) addComponent(path, name, lib, class string) error {
	if !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) {
		return formatErr(path, "component name %q is not a folder name", name)
	}
	dir := filepath.Join(f.Dir, name)
	st, err := os.Stat(dir)
	if err != nil {
		return &FormatError{File: path, Reason: fmt.Sprintf("component %q: folder %s is missing", name, dir), Err: err}
	}
	if !st.IsDir() {
		return formatErr(path, "component %q: %s is not a folder", name, dir)
	}
	f.Components[name] = &Component{Name: name, Library: lib, Class: class, Dir: dir}
	return nil
}

// Component returns the component called name, or an error saying whether
// the pipeline declares it absent or does not know it.
func (f *Folder) Component(name string) (*Component, error) {
	if c, ok := f.Components[name]; ok {
		return c, nil
	}
	path := filepath.Join(f.Dir, ModelIndexName)
	if slices.Contains(f.Absent, name) {
		return nil, fmt.Errorf("%s: component %q is absent ([null, null]) in this %s", path, name, f.Class)
	}
	return nil, fmt.Errorf("%s: no component %q (have %s)", path, name, strings.Join(f.Names(), ", "))
}

// Names lists the present components, sorted.
func (f *Folder) Names() []string { return slices.Sorted(maps.Keys(f.Components)) }

// Close closes the weights of every component that opened them.
func (f *Folder) Close() error {
	var errs []error
	for _, name := range f.Names() {
		errs = append(errs, f.Components[name].Close())
	}
	return errors.Join(errs...)
}

// ConfigPath is the component's config file: config.json, or for
// schedulers, tokenizers and image processors their own config file.
func (c *Component) ConfigPath() (string, error) {
	for _, name := range configNames {
		p := filepath.Join(c.Dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p := filepath.Join(c.Dir, configNames[0])
	return "", &FormatError{File: p, Reason: fmt.Sprintf("component %q has no config file (looked for %s)", c.Name, strings.Join(configNames, ", ")), Err: fs.ErrNotExist}
}

// Config decodes the component's config file into v (a struct pointer or
// map); unknown keys are ignored, as diffusers does.
func (c *Component) Config(v any) error {
	path, err := c.ConfigPath()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if err := checkJSON(data); err != nil {
		return &FormatError{File: path, Reason: err.Error(), Err: err}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &FormatError{File: path, Reason: "config does not decode: " + err.Error(), Err: err}
	}
	return nil
}

// RawConfig decodes the component's config file into a map.
func (c *Component) RawConfig() (map[string]any, error) {
	var m map[string]any
	if err := c.Config(&m); err != nil {
		return nil, err
	}
	if m == nil {
		path, _ := c.ConfigPath()
		return nil, formatErr(path, "config is not a JSON object")
	}
	return m, nil
}

// Weights opens the component's safetensors on first call and returns the
// same Set afterwards, its names in diffusers' layout (a file in the
// model's original layout is mapped by the Naming registered for the
// component's class). A failed open is retried on the next call.
func (c *Component) Weights() (*Set, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.weights != nil {
		return c.weights, nil
	}
	s, err := OpenSetAs(c.Dir, c.Class)
	if err != nil {
		return nil, fmt.Errorf("component %s: %w", c.Name, err)
	}
	c.weights = s
	return s, nil
}

// Close closes the component's weights if they were opened.
func (c *Component) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.weights == nil {
		return nil
	}
	err := c.weights.Close()
	c.weights = nil
	return err
}
