package server

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"ferry/dtype"
	"ferry/pipeline"
	"ferry/planner"
	"ferry/residency"
)

// replan chooses the plan a job runs with at dispatch, against what other
// models hold now (admission planned against the whole budget). Two
// candidates: the plan for the room left beside every resident model (no
// demotion), and the plan for the room left beside the models in use only
// (the idle ones demoted by makeRoom, cheapest to reload per byte first).
// The first wins unless it is predicted slower than the second by more
// than the predicted time to bring the demoted weights back. Caller holds
// mu and has opened m.
func (ms *models) replan(m *model, s spec, b pipeline.Budget) (*residency.Plan, planner.Prediction, error) {
	othersDev, othersHost := ms.residentBytes(m)
	pinDev, pinHost := ms.pinnedBytes(m)
	full := ms.room(b, pinDev, pinHost)
	plan, pred, err := ms.planFor(m, s, full)
	free := ms.room(b, othersDev, othersHost)
	if free == full {
		return plan, pred, err
	}
	fplan, fpred, ferr := ms.planFor(m, s, free)
	switch {
	case ferr != nil:
		return plan, pred, err
	case err != nil:
		return fplan, fpred, nil
	}
	reload := ms.reloadCost(m, ms.shortfall(othersDev, pred.PeakDeviceReservedBytes, ms.device),
		ms.shortfall(othersHost, pred.PeakHostBytes, ms.host))
	if fpred.TotalS <= pred.TotalS+reload {
		return fplan, fpred, nil
	}
	return plan, pred, nil
}

// room is b lowered to what the server's budgets leave beside used bytes
// (a tier with no server budget keeps b's).
func (ms *models) room(b pipeline.Budget, usedDev, usedHost int64) pipeline.Budget {
	lower := func(req, server, used int64) int64 {
		if server <= 0 {
			return req
		}
		left := max(server-used, 1)
		if req == 0 || left < req {
			return left
		}
		return req
	}
	return pipeline.Budget{DeviceBytes: lower(b.DeviceBytes, ms.device, usedDev), HostBytes: lower(b.HostBytes, ms.host, usedHost)}
}

// shortfall is how much of resident must go for need to fit the budget.
func (ms *models) shortfall(resident, need, budget int64) int64 {
	if budget <= 0 {
		return 0
	}
	return max(resident+need-budget, 0)
}

// pinnedBytes sums what models in use (other than skip) hold: bytes no
// demotion can free.
func (ms *models) pinnedBytes(skip *model) (dev, host int64) {
	for _, o := range ms.byName {
		if o != skip && o.inUse {
			dev += o.deviceBytes()
			host += o.hostBytes()
		}
	}
	for _, sh := range ms.shared {
		if sh.inUse(skip) {
			dev += sh.deviceBytes()
			host += sh.hostBytes()
		}
	}
	return dev, host
}

// reloadCost is the predicted seconds to bring back what demoting
// shortDev device and shortHost host bytes would take, choosing victims
// as demote does.
func (ms *models) reloadCost(m *model, shortDev, shortHost int64) float64 {
	var s float64
	for _, tier := range []struct {
		short  int64
		device bool
	}{{shortDev, true}, {shortHost, false}} {
		short := tier.short
		for _, v := range ms.victims(m, tier.device) {
			if short <= 0 {
				break
			}
			s += float64(v.bytes) * v.costPerB
			short -= v.bytes
		}
	}
	return s
}

// register declares m's components with its new runtime; shared
// components are held by their own runtimes instead (shared.go).
func (ms *models) register(m *model, rt *pipeline.Runtime, plan *residency.Plan, b pipeline.Budget, dt dtype.DType) error {
	if err := ms.holdShared(m, plan, b, dt); err != nil {
		return err
	}
	return m.runPipe.Register(rt.Exec)
}

// planLabel names a plan and where it puts each of the model's
// components (has), e.g. "auto: text_encoder=resident
// transformer=stream(host,k=1) vae=resident": the name alone ("auto") does
// not say which plan ran. The presets place every component a Wan folder
// may have; those the model lacks (a text-to-video model's image_encoder)
// are left out. A component the plan does not list is resident; a plan
// that lists none of the model's is "NAME: all resident".
func planLabel(p *residency.Plan, has []string) string {
	if p == nil {
		return ""
	}
	names := make([]string, 0, len(p.Components))
	for n := range p.Components {
		if slices.Contains(has, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return p.Name + ": all resident"
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(p.Name)
	b.WriteString(":")
	for _, n := range names {
		c := p.Components[n]
		fmt.Fprintf(&b, " %s=%s", n, c.Placement)
		if c.Moves() {
			tier := c.Tier
			if tier == "" {
				tier = residency.TierHost
			}
			fmt.Fprintf(&b, "(%s", tier)
			if c.Placement == residency.Stream {
				fmt.Fprintf(&b, ",k=%d,n=%d", c.Prefetch, c.Persistent)
			}
			b.WriteString(")")
		}
	}
	return b.String()
}
