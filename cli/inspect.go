package cli

import (
	"encoding/json"
	"os"

	"ferry/inspect"
)

func init() {
	register("inspect", "describe a model folder or built-in architecture without running it", runInspect)
}

func runInspect(e *env, args []string) error {
	fs := newFlags(e, "inspect", "--model DIR|NAME [--json]")
	model := fs.String("model", "", "pipeline folder, or a built-in architecture (wan2.1-t2v-1.3b, wan2.1-t2v-14b, wan-tiny, synthetic)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return userf("--model DIR|NAME is required")
	}
	m, err := describeModel(*model)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	m.WriteText(e.stdout)
	return nil
}

// describeModel reads a folder, or a built-in architecture when no such
// folder exists.
func describeModel(spec string) (*inspect.Model, error) {
	if st, err := os.Stat(spec); err == nil {
		if !st.IsDir() {
			return nil, userf("--model %s is a file; give the pipeline folder (the one holding model_index.json)", spec)
		}
		if _, err := openFolder(spec); err != nil {
			return nil, err
		}
		m, err := inspect.Folder(spec)
		return m, asUser(err)
	}
	m, err := inspect.Builtin(spec)
	if err != nil {
		return nil, userf("--model %s: no such folder, and not a built-in architecture (%v)", spec, err)
	}
	return m, nil
}
