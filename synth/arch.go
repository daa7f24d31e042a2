package synth

import (
	"fmt"
	"sort"
	"strings"

	"ferry/dtype"
	"ferry/model/synthetic"
	"ferry/sampler"
)

// builders are the architectures synth knows, by name.
var builders = map[string]func() (Arch, error){
	"synthetic": func() (Arch, error) { return Synthetic(synthetic.Default()), nil },
}

// Names lists the architectures, sorted.
func Names() []string {
	names := make([]string, 0, len(builders))
	for n := range builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the architecture called name.
func Lookup(name string) (Arch, error) {
	b, ok := builders[name]
	if !ok {
		return Arch{}, fmt.Errorf("unknown architecture %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return b()
}

// Synthetic is the random transformer-shaped model of model/synthetic:
// every component's config.json carries the whole Config.
func Synthetic(c synthetic.Config) Arch {
	comp := func(name, class string) Component {
		return Component{Name: name, Library: "ferry", Class: class, Config: c,
			Params: c.Params(name), WeightsName: "diffusion_pytorch_model"}
	}
	sched := sampler.DefaultFlowMatchEulerConfig()
	return Arch{Name: "synthetic", Class: "SyntheticPipeline", Components: []Component{
		comp(synthetic.TextEncoder, "SyntheticTextEncoder"),
		comp(synthetic.Denoiser, "SyntheticDenoiser"),
		comp(synthetic.Decoder, "SyntheticDecoder"),
		{Name: "scheduler", Library: "diffusers", Class: "FlowMatchEulerDiscreteScheduler",
			Config: sched, ConfigFile: "scheduler_config.json"},
	}}
}

// checkDType refuses storage types synth cannot generate.
func checkDType(dt dtype.DType) error {
	switch dt {
	case dtype.F32, dtype.BF16, dtype.F16:
		return nil
	}
	return errUnsupported(dt)
}
