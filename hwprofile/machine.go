package hwprofile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"ferry/backend/cpu"
)

// Machine identifies the CPU a profile was measured on: the figures hold
// for that CPU, that many cores and the kernels that ran (FERRY_CPU=avx2
// runs the AVX2 kernels on an AVX-512 machine, which measure slower).
type Machine struct {
	// Model is /proc/cpuinfo's model name (GOARCH where there is none).
	Model string `json:"model"`
	// Flags are those of ISAFlags the CPU has, in that order.
	Flags []string `json:"flags"`
	Cores int      `json:"cores"`
	// Kernels is the level the CPU backend's kernels ran at
	// (cpu.KernelISA: "avx512", "avx2" or "generic").
	Kernels string `json:"kernels"`
}

// ISAFlags are the /proc/cpuinfo flags that change which kernels run and
// how fast: the AVX2 and AVX-512 kernels, FMA under both, F16C for fp16
// weights, AVX512-BF16 for the bf16 GEMM.
var ISAFlags = []string{"avx2", "fma", "f16c", "avx512f", "avx512_bf16"}

// String describes m in a few words, e.g. "AMD EPYC 7B13, 2 cores, avx2
// kernels".
func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, %s kernels", m.Model, m.Cores, m.Kernels)
}

// differences lists how m (where a profile was measured) differs from
// here, in words; none when it is the same machine kind.
func (m Machine) differences(here Machine) []string {
	var d []string
	if m.Model != here.Model {
		d = append(d, fmt.Sprintf("CPU %q, this is %q", m.Model, here.Model))
	}
	if m.Cores != here.Cores {
		d = append(d, fmt.Sprintf("%d cores, this has %d", m.Cores, here.Cores))
	}
	if !slices.Equal(m.Flags, here.Flags) {
		d = append(d, fmt.Sprintf("flags %s, this has %s", flagList(m.Flags), flagList(here.Flags)))
	}
	if m.Kernels != here.Kernels {
		d = append(d, fmt.Sprintf("%s kernels, these run %s%s", m.Kernels, here.Kernels, capNote()))
	}
	return d
}

// capNote says that FERRY_CPU lowered the kernels, where it did.
func capNote() string {
	if os.Getenv("FERRY_CPU") != "" {
		return " (FERRY_CPU=" + os.Getenv("FERRY_CPU") + ")"
	}
	return ""
}

func flagList(f []string) string {
	if len(f) == 0 {
		return "none of " + strings.Join(ISAFlags, " ")
	}
	return strings.Join(f, " ")
}

// parseCPUInfo reads the model name and the ISAFlags present from the
// text of /proc/cpuinfo (its first processor; x86 lists "flags", arm64
// "Features").
func parseCPUInfo(text string) (model string, flags []string) {
	have := map[string]bool{}
	seenFlags := false
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags", "Features":
			if !seenFlags {
				seenFlags = true
				for _, f := range strings.Fields(v) {
					have[f] = true
				}
			}
		}
	}
	for _, f := range ISAFlags {
		if have[f] {
			flags = append(flags, f)
		}
	}
	return model, flags
}

// ThisMachine is the machine this process runs on (read once).
var ThisMachine = sync.OnceValue(func() Machine {
	data, _ := os.ReadFile("/proc/cpuinfo")
	model, flags := parseCPUInfo(string(data))
	if model == "" {
		model = runtime.GOARCH
	}
	return Machine{Model: model, Flags: flags, Cores: runtime.NumCPU(), Kernels: cpu.KernelISA()}
})

// LoadOrDefault loads the stored profile, or returns Default when none was
// saved; found says which. A stored file that does not parse is an error.
//
// A profile measured on another machine (another CPU model, core count,
// ISA flags, or kernel level: see Machine) is not used: LoadOrDefault
// returns the defaults for this machine, with Note saying why. A profile
// written before profiles recorded their machine is used, with a Note
// saying so, unless the CPU model it does record is another.
func LoadOrDefault(path string) (p Profile, found bool, err error) {
	return loadOrDefault(path, ThisMachine())
}

func loadOrDefault(path string, here Machine) (Profile, bool, error) {
	p, err := Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultFor(here), false, nil
	}
	if err != nil {
		return Profile{}, false, err
	}
	if use, note := matchMachine(p, here); !use {
		d := DefaultFor(here)
		d.Note = fmt.Sprintf("hardware profile %s: %s; using the defaults for %s (run `ferry calibrate` to measure this machine)",
			displayPath(path), note, here.Kernels)
		return d, false, nil
	} else if note != "" {
		p.Note = fmt.Sprintf("hardware profile %s: %s (run `ferry calibrate` to record it)", displayPath(path), note)
	}
	return p, true, nil
}

// matchMachine says whether profile p applies here: use false with what
// differs, or true with a note where p does not say which machine it
// came from.
func matchMachine(p Profile, here Machine) (use bool, note string) {
	if p.Machine == nil {
		// Written before profiles recorded their machine: only the model
		// name (CPU) may be there.
		if p.CPU != "" && p.CPU != here.Model {
			return false, fmt.Sprintf("measured on another CPU (%q, this is %q)", p.CPU, here.Model)
		}
		return true, "does not say which CPU flags and kernels it was measured with"
	}
	if d := p.Machine.differences(here); len(d) > 0 {
		where := "measured on another machine"
		if p.Machine.Model == here.Model && p.Machine.Cores == here.Cores && slices.Equal(p.Machine.Flags, here.Flags) {
			where = "measured with other kernels"
		}
		return false, where + " (" + strings.Join(d, "; ") + ")"
	}
	return true, ""
}

// displayPath is path, or the default location's when path is "".
func displayPath(path string) string {
	if path == "" {
		if p, err := Path(); err == nil {
			return p
		}
	}
	return path
}
