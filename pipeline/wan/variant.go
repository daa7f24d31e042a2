package wan

import (
	"fmt"

	"ferry/checkpoint"
)

// checkWan21 refuses the Wan 2.2 folders WanPipeline 0.40.0 runs
// differently from Wan 2.1: two experts (boundary_ratio set, the
// low-noise transformer_2 switched in below boundary_ratio ·
// num_train_timesteps) or per-token timesteps (expand_timesteps, the TI2V
// 5B). Running them with the first transformer alone would produce a
// wrong video without a word.
func checkWan21(f *checkpoint.Folder) error {
	_, hasSecond := f.Components["transformer_2"]
	if b := f.Config["boundary_ratio"]; b != nil || hasSecond {
		return fmt.Errorf("%s: Wan 2.2 two-expert pipelines are not supported yet: this folder has %s; only Wan 2.1 (one transformer) runs",
			f.Dir, twoExpertSigns(f, hasSecond))
	}
	if e, _ := f.Config["expand_timesteps"].(bool); e {
		return fmt.Errorf("%s: Wan 2.2 TI2V pipelines (expand_timesteps: true) are not supported yet; only Wan 2.1 runs", f.Dir)
	}
	return nil
}

// twoExpertSigns names what marks the folder as two-expert.
func twoExpertSigns(f *checkpoint.Folder, hasSecond bool) string {
	var signs string
	if b := f.Config["boundary_ratio"]; b != nil {
		signs = fmt.Sprintf("boundary_ratio %v", b)
	}
	if hasSecond {
		if signs != "" {
			signs += " and "
		}
		signs += "a transformer_2 component"
	}
	return signs
}
