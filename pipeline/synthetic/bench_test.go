package synthetic

import (
	"slices"
	"testing"

	"ferry/pipeline"
	"ferry/residency"
)

// BenchmarkPlacements compares the step time of resident, stream k=1 and
// stream k=0 (weights in the host tier), interleaved in one run so machine
// noise hits all three alike. At 64x64 (1024 tokens) a block's compute
// takes longer than its copy, so k=1 should hide the copies and k=0 expose
// them. Reported: median step seconds and copy-wait seconds per variant,
// and each variant's step time relative to resident.
func BenchmarkPlacements(b *testing.B) {
	variants := []struct {
		name string
		plan residency.ComponentPlan
	}{
		{"resident", residency.ComponentPlan{Placement: residency.Resident}},
		{"stream_k1", residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1}},
		{"stream_k0", residency.ComponentPlan{Placement: residency.Stream}},
	}
	saved := request
	request = Request{Prompt: "a red boat", Height: 64, Width: 64, Steps: 3, Seed: 3}
	defer func() { request = saved }()
	steps := make([][]float64, len(variants))
	waits := make([][]float64, len(variants))
	for range b.N {
		for i, v := range variants {
			r := generate(b, pipeline.Budget{}, uniform(v.name, v.plan))
			if r.err != nil {
				b.Fatal(r.err)
			}
			// The first step also loads resident weights: skip it.
			steps[i] = append(steps[i], r.measured.StepS[1:]...)
			waits[i] = append(waits[i], r.measured.CopyWaitS)
		}
	}
	base := median(steps[0])
	for i, v := range variants {
		s := median(steps[i])
		b.ReportMetric(s, v.name+"_step_s")
		b.ReportMetric(median(waits[i]), v.name+"_copywait_s")
		b.ReportMetric(s/base, v.name+"_vs_resident")
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
