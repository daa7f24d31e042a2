package planner

import (
	"testing"

	"ferry/dtype"
	"ferry/hwprofile"
	"ferry/residency"
)

// TestBuiltinA14B: Wan2.2-T2V-A14B is two 14B experts (fp32 as the
// diffusers folders hold them) between the text encoder and the VAE.
func TestBuiltinA14B(t *testing.T) {
	p := mustBuiltin(t, "wan2.2-t2v-a14b")
	if !p.TwoExperts() || p.Boundary != 0.875 {
		t.Fatalf("two experts %v, boundary %g", p.TwoExperts(), p.Boundary)
	}
	want := []string{TextEncoder, Transformer, Transformer2, VAE}
	got := p.ComponentNames()
	if len(got) != len(want) {
		t.Fatalf("components %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("components %v, want %v", got, want)
		}
	}
	hi, lo := p.Component(Transformer), p.Component(Transformer2)
	if hi.Storage != dtype.F32 || lo.Storage != dtype.F32 {
		t.Errorf("experts stored as %v/%v, want F32", hi.Storage, lo.Storage)
	}
	if hi.StoredBytes() != lo.StoredBytes() || len(hi.Blocks) != len(lo.Blocks) || lo.Blocks[1].Name != "transformer_2.blocks.0" {
		t.Errorf("transformer_2 is not a copy of the transformer's blocks: %d vs %d bytes, block %q", lo.StoredBytes(), hi.StoredBytes(), lo.Blocks[1].Name)
	}
	if gb := float64(hi.StoredBytes()) / 1e9; gb < 56 || gb > 58 {
		t.Errorf("an fp32 expert is %.1f GB, want ~57", gb)
	}
}

// TestSwitchStep: the switch follows the steps, the shift and the
// boundary; one transformer never switches.
func TestSwitchStep(t *testing.T) {
	a14b := mustBuiltin(t, "wan2.2-t2v-a14b")
	one := mustBuiltin(t, "wan2.1-t2v-14b")
	for _, tc := range []struct {
		p     *Profile
		steps int
		shift float64
		want  int
	}{
		{a14b, 40, 0, 13}, // flow shift 3: timesteps 999, 993, ... cross 875 after 13
		{a14b, 4, 0, 2},
		{a14b, 40, 12, 26}, // a larger shift keeps more steps at high noise
		{a14b, 1, 0, 1},
		{one, 40, 0, 40},
	} {
		got, err := tc.p.SwitchStep(tc.steps, tc.shift)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s, %d steps, shift %g: switch at %d, want %d", tc.p.Name, tc.steps, tc.shift, got, tc.want)
		}
	}
}

// TestComplete: transformer_2 follows the transformer unless named.
func TestComplete(t *testing.T) {
	p := mustBuiltin(t, "wan-tiny-moe")
	stream := residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Persistent: 1,
		Blocks: map[string]residency.Placement{"transformer.blocks.2": residency.Resident}}
	plan := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: stream}}
	got := Complete(p, plan)
	c := got.For(Transformer2)
	if c.Placement != residency.Stream || c.Prefetch != 1 || c.Persistent != 1 || c.Blocks["transformer_2.blocks.2"] != residency.Resident {
		t.Errorf("transformer_2 placed %+v, want the transformer's", c)
	}
	if _, ok := plan.Components[Transformer2]; ok {
		t.Error("Complete changed its argument")
	}
	named := &residency.Plan{Components: map[string]residency.ComponentPlan{Transformer: stream, Transformer2: {Placement: residency.Resident}}}
	if Complete(p, named).For(Transformer2).Placement != residency.Resident {
		t.Error("Complete overrode a plan's own transformer_2")
	}
	if _, ok := Complete(mustBuiltin(t, "wan-tiny"), plan).Components[Transformer2]; ok {
		t.Error("Complete added transformer_2 to a one-transformer profile")
	}
}

// TestOnlyActiveExpertResident: with both experts resident, the device
// peak is one expert's (the first is retired at the switch), not two.
func TestOnlyActiveExpertResident(t *testing.T) {
	two, one := mustBuiltin(t, "wan-tiny-moe"), mustBuiltin(t, "wan-tiny")
	req := Request{Batch: 1, Frames: 5, Height: 64, Width: 64, TextLen: 16, Steps: 4, Guidance: 5}
	resident := residency.Uniform("resident", residency.ComponentPlan{Placement: residency.Resident}, TextEncoder, Transformer, VAE)
	hw := hwprofile.Default()
	p2, err := Predict(two, hw, resident, req, Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := Predict(one, hw, resident, req, Budgets{})
	if err != nil {
		t.Fatal(err)
	}
	expert := two.Component(Transformer2).DeviceBytes(two.Compute)
	if p2.PeakDeviceBytes >= p1.PeakDeviceBytes+expert/2 {
		t.Errorf("two-expert peak %d: want about the one-transformer peak %d, not %d more", p2.PeakDeviceBytes, p1.PeakDeviceBytes, p2.PeakDeviceBytes-p1.PeakDeviceBytes)
	}
	if p2.Switch == nil || p2.Switch.Step != 2 {
		t.Fatalf("switch %+v, want after step 2 of 4", p2.Switch)
	}
	if p2.Switch.LoadBytes != expert {
		t.Errorf("the low-noise expert's first step loads %d bytes, want all of it (%d)", p2.Switch.LoadBytes, expert)
	}
}

// TestSearchPlacesBothExperts: auto names transformer_2, placed as the
// transformer, and fits.
func TestSearchPlacesBothExperts(t *testing.T) {
	p := mustBuiltin(t, "wan-tiny-moe")
	req := Request{Batch: 1, Frames: 5, Height: 64, Width: 64, TextLen: 16, Steps: 4, Guidance: 5}
	expert := p.Component(Transformer).DeviceBytes(p.Compute)
	plan, pred, err := Search(p, hwprofile.Default(), req, Budgets{DeviceBytes: expert + 24<<20})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := plan.Components[Transformer2]
	if !ok {
		t.Fatalf("auto plan %+v does not place transformer_2", plan.Components)
	}
	if first := plan.For(Transformer); first.Placement != c.Placement || first.Tier != c.Tier || first.Prefetch != c.Prefetch || first.Persistent != c.Persistent {
		t.Errorf("experts placed %+v and %+v", first, c)
	}
	if !pred.Fits || pred.Switch == nil {
		t.Errorf("fits %v, switch %+v", pred.Fits, pred.Switch)
	}
}
