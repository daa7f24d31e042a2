package cli

import (
	"encoding/json"
	"errors"
	"os"
	"strings"

	"ferry/hwprofile"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"

	"ferry/inspect"
)

func init() {
	register("inspect", "describe a model folder or built-in architecture without running it", runInspect)
}

func runInspect(e *env, args []string) error {
	fs := newFlags(e, "inspect", "--model DIR|NAME [--json]")
	model := fs.String("model", "", "pipeline folder, or a built-in architecture (wan2.1-t2v-1.3b, wan2.1-t2v-14b, wan2.2-t2v-a14b, wan2.2-ti2v-5b, wan2.1-i2v-14b, wan-tiny, wan-tiny-moe, synthetic)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return userf("--model DIR|NAME is required")
	}
	m, err := describeModel(*model)
	if err != nil {
		return err
	}
	m.MinDeviceBytes, m.MinDevicePlan = smallestBudget(*model)
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

// smallestBudget asks the planner for the smallest device budget any plan
// runs the default request (81 frames at 480x832) in, with this machine's
// memory as the host budget and its default compute dtype. Zero when the
// model is not profiled.
func smallestBudget(spec string) (int64, string) {
	prof, err := profileOf(spec)
	if err != nil {
		return 0, ""
	}
	prof.Compute = pipeline.DefaultComputeDType()
	hw, _, err := hwprofile.LoadOrDefault("")
	if err != nil {
		hw = hwprofile.Default()
	}
	b := planningBudgets(1, 0)
	_, _, err = planner.Search(prof, hw, planner.DefaultRequest(), b)
	var inf *planner.InfeasibleError
	if errors.As(err, &inf) && inf.MinDeviceBytes > 0 {
		name := inf.DevicePlan.Name
		if name == "" {
			name = describePlan(inf.DevicePlan)
		}
		return inf.MinDeviceBytes, name
	}
	return 0, ""
}

// describePlan names each component's placement, e.g.
// "text_encoder stream k=1 from disk, transformer host, vae onload from host".
func describePlan(p *residency.Plan) string {
	var parts []string
	for _, c := range []string{"text_encoder", "transformer", "transformer_2", "vae"} {
		if cp, ok := p.Components[c]; ok {
			parts = append(parts, c+" "+placementText(cp))
		}
	}
	return strings.Join(parts, ", ")
}
