package pipeline

import (
	"sync"

	"ferry/backend/cpu"
)

// Meter follows the reserved bytes of several devices and keeps the peak
// of their sum. A server job whose model shares its text encoder or VAE
// with other models runs in several runtimes, each with its own devices;
// the sum of each device's own peak only bounds the job's joint peak,
// which a Meter measures.
type Meter struct {
	mu        sync.Mutex
	reserved  map[*cpu.Device]int64
	sum, peak int64
}

// NewMeter returns a meter that follows no device yet.
func NewMeter() *Meter { return &Meter{reserved: map[*cpu.Device]int64{}} }

// set records d's reserved bytes now.
func (m *Meter) set(d *cpu.Device, reserved int64) {
	m.mu.Lock()
	m.sum += reserved - m.reserved[d]
	m.reserved[d] = reserved
	m.peak = max(m.peak, m.sum)
	m.mu.Unlock()
}

// Peak is the largest sum of the followed devices' reserved bytes since
// they joined.
func (m *Meter) Peak() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// Join makes dev and host follow rt's device and host from now on (nil:
// stop following). A runtime follows one pair of meters at a time.
func (rt *Runtime) Join(dev, host *Meter) {
	ms := [2]*Meter{dev, host}
	rt.meters.Store(&ms)
	for i, d := range []*cpu.Device{rt.Device, rt.Host} {
		if ms[i] != nil {
			ms[i].set(d, d.Stats().Reserved)
		}
	}
}

// Cap makes the devices of rts share one cap on their reserved bytes, b's
// device bytes on the devices and its host bytes on the hosts (<= 0:
// none), until the returned function is called: a job that runs in
// several runtimes stays within its budget together (cpu.Pool).
func Cap(b Budget, rts ...*Runtime) (release func()) {
	var devs, hosts []*cpu.Device
	for _, r := range rts {
		devs, hosts = append(devs, r.Device), append(hosts, r.Host)
	}
	d, h := cpu.NewPool(b.DeviceBytes, devs...), cpu.NewPool(b.HostBytes, hosts...)
	return func() {
		d.Leave()
		h.Leave()
	}
}
