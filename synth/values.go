package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strings"

	"ferry/dtype"
	"ferry/residency"
)

// chunkElems is how many values are generated and written at a time.
const chunkElems = 1 << 16

// scaleOf picks the spread of a tensor's uniform values so that a random
// model keeps its activations in a sane range, as the reference
// initialisations do: weights of fan-in f get variance 1/f, embedding
// tables unit variance, norm scales exactly one, biases a little noise.
// It returns (centre, half-width).
func scaleOf(p residency.ParamSpec) (float64, float64) {
	name := p.Name
	switch {
	case isNorm(name) && len(p.Shape) >= 1 && numel(p.Shape) == int64(p.Shape[0]):
		return 1, 0
	case strings.HasSuffix(name, ".gamma"):
		return 1, 0
	case strings.HasSuffix(name, "relative_attention_bias.weight"):
		return 0, 0.5
	case p.Rows || strings.HasSuffix(name, "shared.weight") || strings.HasSuffix(name, "embed_tokens.weight"):
		return 0, math.Sqrt(3)
	case strings.HasSuffix(name, "scale_shift_table"):
		return 0, math.Sqrt(3) / math.Sqrt(float64(p.Shape[len(p.Shape)-1]))
	case len(p.Shape) >= 2:
		fanIn := numel(p.Shape[1:])
		return 0, math.Sqrt(3 / float64(fanIn))
	default: // biases and other vectors
		return 0, 0.02
	}
}

// seedOf mixes the checkpoint seed with the tensor name.
func seedOf(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() ^ (seed * 0x9e3779b97f4a7c15)
}

// splitmix64 is a small, fast, well-mixed generator.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fill writes p's values in dtype dt to w, chunk by chunk.
func fill(w io.Writer, p residency.ParamSpec, dt dtype.DType, seed uint64, buf []byte) error {
	centre, half := scaleOf(p)
	rng := splitmix64(seedOf(seed, p.Name))
	size := dt.Size()
	n := numel(p.Shape)
	vals := make([]float32, chunkElems)
	for done := int64(0); done < n; {
		k := int(min(int64(chunkElems), n-done))
		for i := 0; i < k; i += 2 {
			r := rng.next()
			vals[i] = uniform(uint32(r), centre, half)
			if i+1 < k {
				vals[i+1] = uniform(uint32(r>>32), centre, half)
			}
		}
		out := buf[:k*size]
		if err := encode(out, vals[:k], dt); err != nil {
			return err
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
		done += int64(k)
	}
	return nil
}

func uniform(r uint32, centre, half float64) float32 {
	if half == 0 {
		return float32(centre)
	}
	u := float64(r>>8)/float64(1<<24)*2 - 1 // [-1, 1)
	return float32(centre + half*u)
}

// encode converts float32 values to dt's little-endian bytes.
func encode(dst []byte, vals []float32, dt dtype.DType) error {
	switch dt {
	case dtype.F32:
		for i, v := range vals {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case dtype.BF16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(dst[2*i:], dtype.F32ToBF16(v))
		}
	case dtype.F16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(dst[2*i:], dtype.F32ToF16(v))
		}
	default:
		return errUnsupported(dt)
	}
	return nil
}

func errUnsupported(dt dtype.DType) error {
	return fmt.Errorf("synth writes F32, BF16 or F16 weights, not %s", dt)
}
