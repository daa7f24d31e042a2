package planner

import (
	"testing"

	"ferry/hwprofile"
	"ferry/residency"
)

// TestSearchConfirmsExactly: where the plan the search prefers on the VAE
// estimate does not fit once predicted exactly (here the process RSS of a
// host-placed VAE decoding 81 frames of TI2V-5B, which the estimate puts
// lower), confirm returns the next plan the estimate found fitting that
// fits exactly, with its exact prediction.
func TestSearchConfirmsExactly(t *testing.T) {
	c := estimateOnlyCase(t)
	p, hw, req, b, host := c.p, c.hw, c.req, c.b, c.host
	stream := residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk}
	streamed := residency.Uniform("streamed", stream, TextEncoder, Transformer, VAE)
	sr := &searcher{p: p, hw: hw, req: req, b: b, approx: true}
	for _, plan := range []*residency.Plan{host, streamed} {
		if pred, err := sr.predict(plan); err != nil || !pred.Fits {
			t.Fatalf("%s: the estimate does not fit it under %+v (%v %s)", plan.Name, b, err, pred.Problem)
		}
	}
	plan, pred, err := sr.confirm(host)
	if err != nil {
		t.Fatal(err)
	}
	if plan == nil || planKey(plan) != planKey(streamed) || !pred.Fits {
		t.Fatalf("confirm returned %s (fits %v), want the streamed plan", describe(plan), pred.Fits)
	}
	again, err := Predict(p, hw, plan, req, b)
	if err != nil || !again.Fits || again.TotalS != pred.TotalS {
		t.Errorf("confirmed %s: exact prediction fits %v, %.1f s; confirm said %.1f s (%v)", describe(plan), again.Fits, again.TotalS, pred.TotalS, err)
	}
}

// TestSearchAgainExactly: where none of the plans the estimate fits fits
// exactly (here the only one is the host-placed VAE of
// TestSearchConfirmsExactly), confirm gives up and the search runs again
// with every candidate predicted exactly; what it returns fits, exactly.
func TestSearchAgainExactly(t *testing.T) {
	c := estimateOnlyCase(t)
	p, hw, req, b, host := c.p, c.hw, c.req, c.b, c.host
	sr := &searcher{p: p, hw: hw, req: req, b: b, approx: true}
	if pred, err := sr.predict(host); err != nil || !pred.Fits {
		t.Fatalf("the estimate does not fit the host-placed VAE (%v %s)", err, pred.Problem)
	}
	sr.fits = sr.fits[len(sr.fits)-1:] // the host-placed VAE alone
	if plan, _, err := sr.confirm(host); err != nil || plan != nil {
		t.Fatalf("confirm returned %s, %v; want none (the only candidate does not fit exactly)", describe(plan), err)
	}
	sr.approx = false
	plan, pred, _, err := sr.run()
	if err != nil || plan == nil || !pred.Fits {
		t.Fatalf("the exact search: %s fits %v, %v", describe(plan), pred.Fits, err)
	}
	again, err := Predict(p, hw, plan, req, b)
	if err != nil || !again.Fits || again.PeakRSSBytes != pred.PeakRSSBytes || again.PeakDeviceReservedBytes != pred.PeakDeviceReservedBytes {
		t.Errorf("%s: exact prediction fits %v, RSS %d, device %d; the search said RSS %d, device %d (%v)", describe(plan),
			again.Fits, again.PeakRSSBytes, again.PeakDeviceReservedBytes, pred.PeakRSSBytes, pred.PeakDeviceReservedBytes, err)
	}
	if planKey(plan) == planKey(host) {
		t.Errorf("the exact search chose the host-placed VAE, which does not fit")
	}
}

// estimateOnly is a plan that fits only on the search's estimate: TI2V-5B
// image to video at 480x832x81 with the VAE on the host, whose process RSS
// the estimate puts lower than the exact prediction, under an RSS budget
// between the two.
type estimateOnly struct {
	p    *Profile
	hw   hwprofile.Profile
	req  Request
	b    Budgets
	host *residency.Plan
}

func estimateOnlyCase(t *testing.T) estimateOnly {
	t.Helper()
	c := estimateOnly{p: mustBuiltin(t, "wan2.2-ti2v-5b"), hw: hwprofile.Default(),
		req: Request{Frames: 81, Height: 480, Width: 832, TextLen: 512, Steps: 50, Guidance: 5}.normalized(),
		b:   Budgets{DeviceBytes: 8 << 30, HostBytes: 20 << 30}}
	if err := c.p.UseImage(); err != nil {
		t.Fatal(err)
	}
	stream := residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk}
	c.host = residency.Uniform("vae-host", stream, TextEncoder, Transformer)
	c.host.Components[VAE] = residency.ComponentPlan{Placement: residency.Host}
	est, err := predict(c.p, c.hw, c.host, c.req, c.b, true)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := Predict(c.p, c.hw, c.host, c.req, c.b)
	if err != nil {
		t.Fatal(err)
	}
	if exact.PeakRSSBytes <= est.PeakRSSBytes {
		t.Fatalf("the estimate's RSS %d is not below the exact %d: the case does not frame a plan only the estimate fits", est.PeakRSSBytes, exact.PeakRSSBytes)
	}
	c.b.RSSBytes = (est.PeakRSSBytes + exact.PeakRSSBytes) / 2
	return c
}
