package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ferry/dtype"
	"ferry/server/queue"
	"ferry/synth"
)

// twoModels is a folder holding wan-tiny twice, under two names.
func twoModels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	a, err := synth.Lookup("wan-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"tiny-a", "tiny-b"} {
		if err := synth.Write(filepath.Join(dir, name), a, synth.Options{Seed: uint64(i + 1), DType: dtype.BF16}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// residentTotal sums every model's reserved device and host bytes.
func (h *harness) residentTotal() (dev, host int64) {
	for _, m := range h.s.models.snapshot().Models {
		dev += m.DeviceBytes
		host += m.HostBytes
	}
	return dev, host
}

// Two models whose weights together exceed the device budget, requests
// alternating: every job completes, the resident set stays within the
// budget after each, and the other model's idle weights were demoted to
// make room (not the whole model when part of it is enough).
func TestTwoModelsShareTheBudget(t *testing.T) {
	dir := twoModels(t)
	// Measure one model's resident bytes and predicted peak unbudgeted.
	probe := start(t, Config{Models: []string{dir}, KeepAlive: -1})
	body := func(m string) string { return strings.Replace(tiny(""), "wan-tiny", m, 1) }
	probe.wait(probe.submit(body("tiny-a")), 60*time.Second, terminal)
	resident, _ := probe.residentTotal()
	probe.close()
	// A device budget under one model's weights makes the planner keep
	// them on the host tier; the host budget then holds one model and a
	// half.
	device := resident + resident/2
	probe = start(t, Config{Models: []string{dir}, KeepAlive: -1, DeviceBytes: device})
	probe.wait(probe.submit(body("tiny-a")), 60*time.Second, terminal)
	_, hostOne := probe.residentTotal()
	probe.close()
	if resident <= 0 {
		t.Fatalf("resident %d on the device unbudgeted", resident)
	}
	// The host holds a model and a half of what one keeps there, or, when
	// a model fits the device whole, one model's weights demoted.
	host := hostOne + hostOne/2
	if hostOne == 0 {
		host = resident
	}
	t.Logf("one model: %d on the device unbudgeted, %d on the host at device %d; host budget %d", resident, hostOne, device, host)
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, DeviceBytes: device, HostBytes: host})
	for i := range 4 {
		m := []string{"tiny-a", "tiny-b"}[i%2]
		v := h.wait(h.submit(body(m)), 60*time.Second, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job %d on %s: %s %+v", i, m, v.Status, v.Error)
		}
		if dev, hst := h.residentTotal(); dev > device || hst > host {
			t.Fatalf("job %d: %d on the device, %d on the host resident; budgets %d, %d", i, dev, hst, device, host)
		}
	}
	snap := h.s.models.snapshot()
	if snap.Evictions == 0 {
		t.Fatal("no demotion although both models do not fit together")
	}
	t.Logf("evictions %d; residency %+v", snap.Evictions, snap.Models)
	os.RemoveAll(dir)
}
