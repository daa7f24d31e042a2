package wan

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"ferry/planner"
	"ferry/residency"
)

// TestMoEPeaksPredicted: Wan 2.2 A14B's two experts (the golden folder),
// under every placement, the host tier included, and both CFG modes: the
// planner's peaks equal the measured ones across the expert switch (the
// handoff's prefetch, the retired expert's blocks and host copies freed).
func TestMoEPeaksPredicted(t *testing.T) {
	dir := filepath.Join(moeDir, "pipeline")
	req := Request{Prompt: "a lighthouse", Height: 128, Width: 192, Frames: 17, Steps: 4, Guidance: 5, MaxSeqLen: 512, Seed: 1}
	prof, err := planner.ProfileFromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range []residency.ComponentPlan{
		{Placement: residency.Resident},
		{Placement: residency.Stream, Prefetch: 1},
		{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierHost},
		{Placement: residency.Host},
		{Placement: residency.Onload},
	} {
		for _, cfg := range []string{residency.CFGBatched, residency.CFGSequential} {
			t.Run(fmt.Sprintf("%s-%s-%s", pc.Placement, pc.Tier, cfg), func(t *testing.T) {
				plan := residency.Uniform("p", pc, append(slices.Clone(Components), Transformer2)...)
				plan.Run.CFG = cfg
				m, prompt := measurePeaks(t, dir, plan, req)
				checkPeaks(t, predictPeaks(t, prof, plan, req, prompt), m)
			})
		}
	}
}
