package cli

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"ferry/residency"
)

// basicPlans are the placements every pipeline understands, by name, for
// the components of a text-to-video pipeline.
var basicPlans = map[string]func(components []string) *residency.Plan{
	"resident": func(cs []string) *residency.Plan {
		return residency.Uniform("resident", residency.ComponentPlan{Placement: residency.Resident}, cs...)
	},
	"onload": func(cs []string) *residency.Plan {
		return residency.Uniform("onload", residency.ComponentPlan{Placement: residency.Onload}, cs...)
	},
	"stream": func(cs []string) *residency.Plan {
		return residency.Uniform("stream", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}, cs...)
	},
	"stream-disk": func(cs []string) *residency.Plan {
		return residency.Uniform("stream-disk", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk}, cs...)
	},
	"sequential": func(cs []string) *residency.Plan {
		return residency.Uniform("sequential", residency.ComponentPlan{Placement: residency.Stream}, cs...)
	},
}

func planNames() []string {
	names := make([]string, 0, len(basicPlans))
	for n := range basicPlans {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// looksLikeFile says whether a --plan value names a file rather than a preset.
func looksLikeFile(spec string) bool {
	switch strings.ToLower(filepath.Ext(spec)) {
	case ".json", ".yaml", ".yml":
		return true
	}
	_, err := os.Stat(spec)
	return err == nil || strings.ContainsRune(spec, os.PathSeparator)
}

// resolvePlan reads a plan file or builds a named plan.
func resolvePlan(spec string, components []string) (*residency.Plan, error) {
	if looksLikeFile(spec) {
		p, err := residency.LoadPlan(spec)
		if err != nil {
			return nil, asUser(err)
		}
		return p, nil
	}
	if mk, ok := basicPlans[spec]; ok {
		return mk(components), nil
	}
	return nil, userf("unknown plan %q (a plan file .json/.yaml, or one of: %s)", spec, strings.Join(planNames(), ", "))
}
