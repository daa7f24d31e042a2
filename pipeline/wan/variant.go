package wan

import (
	"ferry/checkpoint"
)

// checkWan21 refuses the Wan 2.2 folders WanPipeline 0.40.0 runs in a
// way ferry does not yet: two-expert folders whose experts do not add up
// (readExperts). Per-token timesteps (expand_timesteps, the TI2V 5B) run
// (ti2v.go). Running the refused ones as Wan 2.1 would produce a wrong
// video without a word.
func checkWan21(f *checkpoint.Folder) error {
	if _, err := readExperts(f); err != nil {
		return err
	}
	return nil
}
