package hwprofile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestParseCPUInfo reads the model and the ISA flags from an x86 and an
// arm64 /proc/cpuinfo, the first processor only.
func TestParseCPUInfo(t *testing.T) {
	x86 := "processor\t: 0\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n" +
		"flags\t\t: fpu sse avx2 bmi2 f16c fma\n\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: avx512f\n"
	model, flags := parseCPUInfo(x86)
	if model != "AMD EPYC 7B13 64-Core Processor" || !reflect.DeepEqual(flags, []string{"avx2", "fma", "f16c"}) {
		t.Errorf("x86: %q %v", model, flags)
	}
	zen5 := "model name\t: AMD EPYC 9B45\nflags\t\t: avx512_bf16 avx2 fma avx512f f16c\n"
	if _, flags := parseCPUInfo(zen5); !reflect.DeepEqual(flags, ISAFlags) {
		t.Errorf("zen5 flags %v, want %v in that order", flags, ISAFlags)
	}
	model, flags = parseCPUInfo("processor\t: 0\nFeatures\t: fp asimd\n")
	if model != "" || flags != nil {
		t.Errorf("arm64: %q %v, want no model and no flags", model, flags)
	}
}

// TestLoadOrDefaultMachines: which saved profile is used where, with the
// identity of "this machine" injected: the same machine kind uses it
// silently; another CPU, core count, flag set or kernel level gets this
// machine's defaults and a one-line note that says what differs and
// suggests calibrating; a profile from before machines were recorded is
// used with a note, unless the model it does record is another; with no
// profile the defaults follow the kernel level.
func TestLoadOrDefaultMachines(t *testing.T) {
	zen5 := Machine{Model: "AMD EPYC 9B45", Flags: ISAFlags, Cores: 2, Kernels: "avx512"}
	zen3 := Machine{Model: "AMD EPYC 7B13", Flags: []string{"avx2", "fma", "f16c"}, Cores: 2, Kernels: "avx2"}
	capped := zen5
	capped.Kernels = "avx2" // FERRY_CPU=avx2 on the Zen 5
	bigger := zen5
	bigger.Cores = 8
	measured := func(m *Machine, cpu string) *Profile {
		p := DefaultFor(zen5)
		p.Source, p.CPU, p.Machine = "measured", cpu, m
		p.AttentionGFLOPS = 123 // a figure no default has
		return &p
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		saved *Profile
		here  Machine
		used  bool
		note  []string // the note must say each; nil: no note
		// attention is the figure expected when the profile is not used
		attention float64
	}{
		{"same machine", measured(&zen5, zen5.Model), zen5, true, nil, 0},
		{"another CPU", measured(&zen5, zen5.Model), zen3, false, []string{"another machine", `CPU "AMD EPYC 9B45", this is "AMD EPYC 7B13"`, "flags", "ferry calibrate", "defaults for avx2"}, avx2Rates.attention},
		{"more cores", measured(&zen5, zen5.Model), bigger, false, []string{"2 cores, this has 8", "ferry calibrate"}, avx512Rates.attention * 4},
		{"AVX2 kernels on the same CPU", measured(&zen5, zen5.Model), capped, false, []string{"avx512 kernels, these run avx2", "ferry calibrate"}, avx2Rates.attention},
		{"old profile, same model", measured(nil, zen5.Model), zen5, true, []string{"does not say which CPU", "ferry calibrate"}, 0},
		{"old profile, no model", measured(nil, ""), zen3, true, []string{"does not say which CPU"}, 0},
		{"old profile, another model", measured(nil, zen5.Model), zen3, false, []string{"another CPU", "ferry calibrate"}, avx2Rates.attention},
		{"no profile, AVX-512", nil, zen5, false, nil, avx512Rates.attention},
		{"no profile, AVX2", nil, zen3, false, nil, avx2Rates.attention},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".json")
		if c.saved != nil {
			if err := Save(*c.saved, path); err != nil {
				t.Fatal(err)
			}
		}
		p, found, err := loadOrDefault(path, c.here)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if found != c.used {
			t.Errorf("%s: found %v, want %v", c.name, found, c.used)
		}
		if c.used && p.AttentionGFLOPS != 123 {
			t.Errorf("%s: attention %g, want the saved 123", c.name, p.AttentionGFLOPS)
		}
		if !c.used && (p.Source != "default" || p.AttentionGFLOPS != c.attention) {
			t.Errorf("%s: source %q attention %g, want this machine's default %g", c.name, p.Source, p.AttentionGFLOPS, c.attention)
		}
		if c.note == nil && p.Note != "" {
			t.Errorf("%s: note %q, want none", c.name, p.Note)
		}
		if p.Note != "" {
			t.Logf("%s: %s", c.name, p.Note)
		}
		if strings.Contains(p.Note, "\n") {
			t.Errorf("%s: note %q is not one line", c.name, p.Note)
		}
		for _, w := range c.note {
			if !strings.Contains(p.Note, w) {
				t.Errorf("%s: note %q does not say %q", c.name, p.Note, w)
			}
		}
	}
}

// TestMeasuredProfileRecordsMachine: a profile saved with its machine
// loads with it, and the machine survives the JSON round trip.
func TestMeasuredProfileRecordsMachine(t *testing.T) {
	m := Machine{Model: "m", Flags: []string{"avx2", "fma"}, Cores: 4, Kernels: "avx2"}
	p := DefaultFor(m)
	p.Machine = &m
	path := filepath.Join(t.TempDir(), "hw.json")
	if err := Save(p, path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"kernels": "avx2"`) || strings.Contains(string(data), `"Note"`) {
		t.Fatalf("saved JSON lacks the machine or stores the note:\n%s", data)
	}
	got, found, err := loadOrDefault(path, m)
	if err != nil || !found || !reflect.DeepEqual(got.Machine, &m) {
		t.Fatalf("loaded machine %+v found=%v err=%v, want %+v", got.Machine, found, err, m)
	}
}

// TestDefaultsPerISA: each kernel level gets its own table, the AVX2
// GEMMs below the AVX-512 ones, and every compute figure scales with the
// cores.
func TestDefaultsPerISA(t *testing.T) {
	for _, c := range []struct {
		kernels string
		rates   computeRates
	}{{"avx512", avx512Rates}, {"avx2", avx2Rates}, {"generic", avx2Rates}} {
		for _, cores := range []int{2, 4} {
			p := DefaultFor(Machine{Kernels: c.kernels, Cores: cores})
			scale := float64(cores) / 2
			r := c.rates
			for name, pair := range map[string][2]float64{
				"go GEMM":         {p.GEMMGFLOPS("go"), r.goGEMM},
				"openblas":        {p.GEMMGFLOPS("openblas"), r.openblas},
				"attention":       {p.AttentionGFLOPS, r.attention},
				"attention small": {p.AttentionSmallGFLOPS, r.attentionSmall},
				"conv":            {p.ConvGFLOPS, r.conv},
				"conv wide":       {p.ConvWideGFLOPS, r.convWide},
				"conv mid":        {p.ConvMidGFLOPS, r.convMid},
				"conv small":      {p.ConvSmallGFLOPS, r.convSmall},
			} {
				if pair[0] != scale*pair[1] {
					t.Errorf("%s on %d cores: %s default %g, want %g", c.kernels, cores, name, pair[0], scale*pair[1])
				}
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("%s on %d cores: %v", c.kernels, cores, err)
			}
		}
	}
	for name, pair := range map[string][2]float64{
		"go GEMM":  {avx2Rates.goGEMM, avx512Rates.goGEMM},
		"openblas": {avx2Rates.openblas, avx512Rates.openblas},
	} {
		if !(pair[0] < pair[1]) {
			t.Errorf("%s: avx2 default %g, not below avx512's %g", name, pair[0], pair[1])
		}
	}
}
