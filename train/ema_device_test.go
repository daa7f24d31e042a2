package train

import (
	"context"
	"math"
	"testing"

	"ferry/backend/cpu"
	"ferry/tensor"
)

// TestDeviceEMAMatchesHost: the EMA kept on the device is the host one bit
// for bit after every step, also across a checkpoint and resume; it takes
// exactly the trainable bytes on the device and gives them back on Close.
func TestDeviceEMAMatchesHost(t *testing.T) {
	const steps = 6
	dev := cpu.NewDevice(0)
	ops := tensor.NewOps(cpu.New(dev, nil))
	setup := func(dir string, onDevice bool) *Trainer {
		data := &cycleData{batches: []*Batch{toyBatch(2, 3, 4, 20, false), toyBatch(2, 3, 4, 21, false)}}
		cfg := Config{Steps: steps, Adam: DefaultAdam(1e-2), EMADecay: 0.7, SaveEvery: 3, CheckpointDir: dir,
			Timesteps: Timesteps{Sampling: Shift, FlowShift: 3}}
		if onDevice {
			cfg.EMAOps = ops
		}
		tr, err := New(cfg, newToyNet(3, 1), data, NewRNG(9))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	host := setup(t.TempDir(), false)
	dir := t.TempDir()
	device := setup(dir, true)
	var trainable int64
	for _, p := range device.net.Params() {
		trainable += 4 * int64(len(p.Data))
	}
	if got := device.EMA().DeviceBytes(); got != trainable || !device.EMA().OnDevice() || host.EMA().OnDevice() {
		t.Fatalf("device EMA of %d bytes, want the trainable %d", got, trainable)
	}
	for range 3 {
		for _, tr := range []*Trainer{host, device} {
			if _, err := tr.Train(); err != nil {
				t.Fatal(err)
			}
		}
		sameEMA(t, host, device)
	}
	if _, err := device.Save(dir); err != nil {
		t.Fatal(err)
	}
	device.Close()
	resumed := setup(t.TempDir(), true)
	defer resumed.Close()
	found, err := FindCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.Restore(found); err != nil {
		t.Fatal(err)
	}
	if err := host.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := resumed.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameEMA(t, host, resumed)
	resumed.Close()
	if a := dev.Stats().Allocated; a != 0 {
		t.Errorf("device holds %d bytes after Close", a)
	}
}

func sameEMA(t *testing.T, host, device *Trainer) {
	t.Helper()
	want, _ := host.EMA().Values()
	got, err := device.EMA().Values()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(want[i][j]) != math.Float32bits(got[i][j]) {
				t.Fatalf("step %d: EMA[%d][%d] device %g, host %g", host.Step(), i, j, got[i][j], want[i][j])
			}
		}
	}
}
