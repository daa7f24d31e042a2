package media

import (
	"encoding/binary"
	"fmt"
	"math"

	"ferry/checkpoint"
	"ferry/dtype"
)

// writeSafetensors stores the frames unquantised, so a run can be compared
// number for number with diffusers' np output.
func writeSafetensors(path string, frames []float32, f, h, w int) error {
	if len(frames) != f*h*w*3 {
		return fmt.Errorf("media: %d values for %d frames of %dx%d RGB", len(frames), f, h, w)
	}
	data := make([]byte, 4*len(frames))
	for i, v := range frames {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	t := checkpoint.RawTensor{Name: "video", DType: dtype.F32, Shape: []int{1, f, h, w, 3}, Data: data}
	if err := checkpoint.WriteFile(path, []checkpoint.RawTensor{t}, map[string]string{"format": "np"}); err != nil {
		return fmt.Errorf("media: %w", err)
	}
	return nil
}
