package checkpoint

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Naming maps the tensor names of another layout of a model class to the
// diffusers names ferry binds weights by: the layout of the model's
// original repository, in which its official single-file releases and the
// files ComfyUI users download are stored. Model packages register one per
// class (RegisterNaming); a component whose weights are in that layout
// opens with its names mapped (Component.Weights), so every reader (the
// planner, the pipelines, the server) sees one layout.
type Naming struct {
	// Detect says a checkpoint's names (sorted) are in this layout.
	Detect func(names []string) bool
	// Rename maps one name; keep false leaves the tensor out (a marker
	// that holds no weight).
	Rename func(name string) (to string, keep bool)
}

var namings sync.Map // class -> Naming

// RegisterNaming declares the other layout of a model class's weights.
func RegisterNaming(class string, n Naming) { namings.Store(class, n) }

func namingOf(class string) (Naming, bool) {
	v, ok := namings.Load(class)
	if !ok {
		return Naming{}, false
	}
	return v.(Naming), true
}

// rename maps every tensor name through n, the weights' scales with them.
// Two names that map to one are an error: the checkpoint would be read
// ambiguously.
func (s *Set) rename(n Naming) error {
	by := make(map[string]TensorInfo, len(s.byName))
	var scales map[string]float32
	if s.scales != nil {
		scales = make(map[string]float32, len(s.scales))
	}
	for _, name := range s.names {
		to, keep := n.Rename(name)
		if !keep {
			continue
		}
		if prev, dup := by[to]; dup {
			return formatErr(s.path, "tensors %q and %q are both %q in diffusers' naming", prev.Name, name, to)
		}
		by[to] = s.byName[name]
		if v, ok := s.scales[name]; ok {
			scales[to] = v
		}
	}
	for to, t := range by {
		t.Name = to
		by[to] = t
	}
	s.byName, s.scales = by, scales
	s.names = slices.Sorted(maps.Keys(by))
	return nil
}

// OpenSetAs is OpenSet for the weights of a model class: names in the
// class's original layout are mapped to diffusers' (RegisterNaming).
func OpenSetAs(path, class string) (*Set, error) {
	s, err := OpenSet(path)
	if err != nil {
		return nil, err
	}
	if err := s.mapNames(class); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// mapNames applies the naming registered for class, when the set's names
// are in its layout.
func (s *Set) mapNames(class string) error {
	n, ok := namingOf(class)
	if !ok || !n.Detect(s.Names()) {
		return nil
	}
	if err := s.rename(n); err != nil {
		return fmt.Errorf("%s weights in the original layout: %w", class, err)
	}
	return nil
}
