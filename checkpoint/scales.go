package checkpoint

import (
	"math"
	"strings"
)

// Scaled fp8 checkpoints (ComfyUI's "fp8_scaled" files) store each fp8
// Linear weight NAME.weight with a float32 scalar NAME.scale_weight beside
// it: the weight is the stored values times the scale. They also hold a
// "scaled_fp8" marker and, in some, NAME.scale_input, which only fp8
// matrix multiplication reads (ComfyUI ignores it otherwise, as ferry
// does).
const (
	scaleSuffix      = "scale_weight"
	inputScaleSuffix = "scale_input"
	scaledMarker     = "scaled_fp8"
)

// takeScales reads the set's weight scales and removes them, the marker
// and the input scales from its names: the tensors left are the weights.
func (s *Set) takeScales() error {
	drop := map[string]bool{}
	for _, n := range s.names {
		switch {
		case isLeaf(n, scaledMarker) || isLeaf(n, inputScaleSuffix):
			drop[n] = true
		case isLeaf(n, scaleSuffix):
			w := strings.TrimSuffix(n, scaleSuffix) + "weight"
			if _, ok := s.byName[w]; !ok {
				return formatErr(s.path, "%s scales a weight %s that the checkpoint does not hold", n, w)
			}
			v, err := s.scalar(n)
			if err != nil {
				return err
			}
			if s.scales == nil {
				s.scales = map[string]float32{}
			}
			s.scales[w] = v
			drop[n] = true
		}
	}
	if len(drop) == 0 {
		return nil
	}
	for n := range drop {
		delete(s.byName, n)
	}
	s.finish()
	return nil
}

// isLeaf says name is leaf or ends in "." + leaf.
func isLeaf(name, leaf string) bool { return name == leaf || strings.HasSuffix(name, "."+leaf) }

// scalar reads a one-element float tensor: a finite scale.
func (s *Set) scalar(name string) (float32, error) {
	t := s.byName[name]
	if t.Elements() != 1 || !t.DType.IsFloat() {
		return 0, formatErr(s.path, "%s is %s %v: a weight scale is one float", name, t.DType, t.Shape)
	}
	f, err := s.file(t)
	if err != nil {
		return 0, err
	}
	v, err := f.ReadF32(t)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(float64(v[0])) || math.IsInf(float64(v[0]), 0) {
		return 0, formatErr(s.path, "%s is %v: a weight scale must be finite", name, v[0])
	}
	return v[0], nil
}

// Scale is the factor weight name's stored values are multiplied by: its
// scale_weight in a scaled fp8 checkpoint, else 1.
func (s *Set) Scale(name string) float32 {
	if v, ok := s.scales[name]; ok {
		return v
	}
	return 1
}
