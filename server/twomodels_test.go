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
func twoModels(t *testing.T) string { return synthFolder(t, "wan-tiny", "tiny-a", "tiny-b") }

// synthFolder is a folder of models of one architecture written by ferry
// synth under the given names, the i-th with seed i+1.
func synthFolder(t *testing.T, arch string, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	a, err := synth.Lookup(arch)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
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
	// Every job asks for the resident plan, so that each model's job needs
	// its weights on the device: the device budget holds one model's and a
	// half, the host budget one job's host peak (the read staging) beside
	// one model's weights demoted.
	body := func(m string) string {
		return strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", m, 1)
	}
	probe := start(t, Config{Models: []string{dir}, KeepAlive: -1})
	one := probe.wait(probe.submit(body("tiny-a")), 60*time.Second, terminal)
	resident, _ := probe.residentTotal()
	probe.close()
	if resident <= 0 || one.Measured == nil {
		t.Fatalf("resident %d on the device unbudgeted; job %+v", resident, one)
	}
	device := resident + resident/2
	host := one.Measured.HostBytes + resident
	t.Logf("one model: %d on the device, host peak %d; budgets %d, %d", resident, one.Measured.HostBytes, device, host)
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
