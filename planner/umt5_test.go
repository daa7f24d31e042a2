package planner

import (
	"testing"
	"time"

	"ferry/backend/cpu"
	"ferry/backend/cpu/gemm"
	"ferry/dtype"
	"ferry/model/umt5"
	"ferry/residency"
)

// TestUMT5PeakMatchesEncode encodes a padded prompt with model/umt5
// through the executor and compares the device peak with umt5Pass.
func TestUMT5PeakMatchesEncode(t *testing.T) {
	text, _, _ := WanTinyConfigs()
	text.VocabSize = 512
	p := &Profile{Name: "umt5-test", Compute: dtype.F32, Text: text,
		Components: []*ComponentProfile{marked(t, ComponentFromParams(TextEncoder, dtype.BF16, text.Params()), text.Params(), umt5.New(text).Component(TextEncoder, nil))}}
	src := newMemSource(text.Params(), 5)
	for _, cp := range placements() {
		t.Run(planName(cp), func(t *testing.T) {
			req := Request{Batch: 1, TextLen: 40}
			plan := &residency.Plan{Components: map[string]residency.ComponentPlan{TextEncoder: cp}}
			dev, host := cpu.NewDevice(0), cpu.NewDevice(0)
			ex, err := residency.New(residency.Config{Backend: cpu.New(dev, gemm.DefaultGo()), HostBackend: cpu.New(host, gemm.DefaultGo()), Plan: plan, KeepStored: keepStored})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			m := umt5.New(text)
			if err := ex.Register(m.Component(TextEncoder, src)); err != nil {
				t.Fatal(err)
			}
			tokens := make([]int32, req.TextLen)
			mask := make([]int32, req.TextLen)
			for i := range 10 {
				tokens[i], mask[i] = int32(i+3), 1
			}
			for range 2 { // prompt and negative prompt
				out, err := m.Encode(slowRunner{ex: ex, pause: time.Millisecond}, ex.Ops(TextEncoder), tokens, mask, 1, req.TextLen)
				if err != nil {
					t.Fatal(err)
				}
				defer out.Free()
			}
			ex.Done(TextEncoder)
			measured := dev.Stats().PeakAllocated

			s := newSim(slowCompute(), Budgets{})
			if err := s.register(p.Components[0], plan.For(TextEncoder), dtype.F32); err != nil {
				t.Fatal(err)
			}
			id := &ids{}
			for range 2 {
				ps, _ := umt5Pass(p, req, 1, id)
				s.runPass(s.byName[TextEncoder], ps)
			}
			s.done(s.byName[TextEncoder])
			checkWithin(t, "text encoder peak device bytes", s.dev.PeakAllocated, measured, 0)
		})
	}
}
