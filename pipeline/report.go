package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"ferry/backend/cpu/gemm"
	"ferry/residency"
)

// Report is the contract other tools read (`--report FILE.json`).
type Report struct {
	Model     string          `json:"model,omitempty"`
	Request   any             `json:"request,omitempty"`
	Plan      *residency.Plan `json:"plan"`
	Budget    Budget          `json:"budget"`
	Measured  Measured        `json:"measured"`
	Predicted any             `json:"predicted"`
}

// Measured is what the run observed.
type Measured struct {
	PeakDeviceBytes         int64     `json:"peak_device_bytes"`
	PeakDeviceReservedBytes int64     `json:"peak_device_reserved_bytes"`
	PeakHostBytes           int64     `json:"peak_host_bytes"`
	PeakRSSBytes            int64     `json:"peak_rss_bytes"`
	TotalS                  float64   `json:"total_s"`
	TextEncoderS            float64   `json:"text_encoder_s"`
	DenoiseS                float64   `json:"denoise_s"`
	VAES                    float64   `json:"vae_s"`
	StepS                   []float64 `json:"step_s"`
	CopyWaitS               float64   `json:"copy_wait_s"`
	CopyS                   float64   `json:"copy_s"`
	BytesCopied             int64     `json:"bytes_copied"`
	BytesReadDisk           int64     `json:"bytes_read_disk"`
	Gemm                    string    `json:"gemm,omitempty"`
	ComputeDType            string    `json:"compute_dtype"`
}

// Phase names shared by pipelines.
const (
	PhaseText    = "text_encoder"
	PhaseDenoise = "denoise"
	PhaseVAE     = "vae"
)

// Measure collects the figures of the run so far.
func (rt *Runtime) Measure() Measured {
	d, h, st, was := rt.Device.Stats(), rt.Host.Stats(), rt.Exec.Stats(), rt.copiedBefore
	m := Measured{
		PeakDeviceBytes:         d.PeakAllocated,
		PeakDeviceReservedBytes: d.PeakReserved,
		PeakHostBytes:           h.PeakReserved,
		PeakRSSBytes:            peakRSS(),
		TotalS:                  time.Since(rt.start).Seconds(),
		TextEncoderS:            rt.phases[PhaseText].Seconds(),
		DenoiseS:                rt.phases[PhaseDenoise].Seconds(),
		VAES:                    rt.phases[PhaseVAE].Seconds(),
		CopyWaitS:               (st.CopyWait - was.CopyWait).Seconds(),
		CopyS:                   (st.CopyTime - was.CopyTime).Seconds(),
		BytesCopied:             st.BytesCopied - was.BytesCopied,
		BytesReadDisk:           st.BytesReadDisk - was.BytesReadDisk,
	}
	for _, s := range rt.steps {
		m.StepS = append(m.StepS, s.Seconds())
	}
	if g, ok := rt.Backend.(interface{ GEMM() gemm.Impl }); ok && g.GEMM() != nil {
		m.Gemm = g.GEMM().Name()
	}
	m.ComputeDType = rt.ComputeDType.String()
	return m
}

// WriteJSON writes v as indented JSON to path through a temp file and rename,
// so a reader never sees half a file.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(data, '\n'))
}

// WriteFileAtomic writes data to path via a temp file in the same directory.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// WriteFileAtomicFunc writes what fn produces to path via a temp file.
func WriteFileAtomicFunc(path string, fn func(w io.Writer) error) error {
	var buf bytes.Buffer
	if err := fn(&buf); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteFileAtomic(path, buf.Bytes())
}
