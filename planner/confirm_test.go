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
	p := mustBuiltin(t, "wan2.2-ti2v-5b")
	if err := p.UseImage(); err != nil {
		t.Fatal(err)
	}
	req := Request{Frames: 81, Height: 480, Width: 832, TextLen: 512, Steps: 50, Guidance: 5}.normalized()
	hw := hwprofile.Default()
	stream := residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk}
	host := residency.Uniform("vae-host", stream, TextEncoder, Transformer)
	host.Components[VAE] = residency.ComponentPlan{Placement: residency.Host}
	streamed := residency.Uniform("streamed", stream, TextEncoder, Transformer, VAE)
	b := Budgets{DeviceBytes: 8 << 30, HostBytes: 20 << 30}
	est, err := predict(p, hw, host, req, b, true)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := Predict(p, hw, host, req, b)
	if err != nil {
		t.Fatal(err)
	}
	if exact.PeakRSSBytes <= est.PeakRSSBytes {
		t.Fatalf("the estimate's RSS %d is not below the exact %d: the case does not frame a plan only the estimate fits", est.PeakRSSBytes, exact.PeakRSSBytes)
	}
	// An RSS budget between the two: the estimate fits the host-placed
	// VAE, the exact prediction does not.
	b.RSSBytes = (est.PeakRSSBytes + exact.PeakRSSBytes) / 2
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
	p := mustBuiltin(t, "wan2.2-ti2v-5b")
	if err := p.UseImage(); err != nil {
		t.Fatal(err)
	}
	req := Request{Frames: 81, Height: 480, Width: 832, TextLen: 512, Steps: 50, Guidance: 5}.normalized()
	hw := hwprofile.Default()
	stream := residency.ComponentPlan{Placement: residency.Stream, Prefetch: 1, Tier: residency.TierDisk}
	host := residency.Uniform("vae-host", stream, TextEncoder, Transformer)
	host.Components[VAE] = residency.ComponentPlan{Placement: residency.Host}
	b := Budgets{DeviceBytes: 8 << 30, HostBytes: 20 << 30}
	est, err := predict(p, hw, host, req, b, true)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := Predict(p, hw, host, req, b)
	if err != nil {
		t.Fatal(err)
	}
	b.RSSBytes = (est.PeakRSSBytes + exact.PeakRSSBytes) / 2
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
