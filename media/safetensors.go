package media

import (
	"fmt"

	"ferry/checkpoint"
)

// writeSafetensors stores the frames unquantised, so a run can be compared
// number for number with diffusers' np output.
func writeSafetensors(path string, frames []float32, f, h, w int) error {
	if len(frames) != f*h*w*3 {
		return fmt.Errorf("media: %d values for %d frames of %dx%d RGB", len(frames), f, h, w)
	}
	t := checkpoint.F32Tensor("video", []int{1, f, h, w, 3}, frames)
	if err := checkpoint.WriteFile(path, []checkpoint.RawTensor{t}, map[string]string{"format": "np"}); err != nil {
		return fmt.Errorf("media: %w", err)
	}
	return nil
}
