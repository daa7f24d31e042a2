package cli

import (
	"os"
	"path/filepath"
	"strings"

	"ferry/planner"
	"ferry/residency"
)

// looksLikeFile says whether a --plan value names a file rather than a preset.
func looksLikeFile(spec string) bool {
	switch strings.ToLower(filepath.Ext(spec)) {
	case ".json", ".yaml", ".yml":
		return true
	}
	_, err := os.Stat(spec)
	return err == nil || strings.ContainsRune(spec, os.PathSeparator)
}

// resolvePlan reads a plan file or builds a preset that needs no model
// profile (for pipelines the planner does not profile).
func resolvePlan(spec string) (*residency.Plan, error) {
	if looksLikeFile(spec) {
		p, err := residency.LoadPlan(spec)
		return p, asUser(err)
	}
	p, err := planner.Preset(spec, planner.PresetOptions{})
	if err != nil {
		return nil, userf("plan %q: %v (this model is not profiled: give a plan file or a fixed preset such as resident, stream, onload)", spec, err)
	}
	return p, nil
}
