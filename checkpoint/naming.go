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
	// Views, when set and not nil for a tensor, replaces Rename for it:
	// the tensor becomes one or more diffusers tensors that are ranges of
	// its rows (a fused projection split) or it under another shape of
	// the same elements (a [1, n, d] table read as [n, d]).
	Views func(name string, shape []int) []View
}

// View is one diffusers tensor read from rows [Row0, Row0+Rows) of a
// stored tensor (its first dimension; the elements of a 1-D tensor), with
// the shape given, whose elements must number those rows'.
type View struct {
	Name       string
	Row0, Rows int
	Shape      []int
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
		infos, err := mapped(n, s.byName[name])
		if err != nil {
			return formatErr(s.path, "%v", err)
		}
		for _, t := range infos {
			if prev, dup := by[t.Name]; dup {
				return formatErr(s.path, "tensors %q and %q are both %q in diffusers' naming", prev.Name, name, t.Name)
			}
			by[t.Name] = t
			if v, ok := s.scales[name]; ok {
				scales[t.Name] = v
			}
		}
	}
	s.byName, s.scales = by, scales
	s.names = slices.Sorted(maps.Keys(by))
	return nil
}

// mapped returns what a stored tensor is in diffusers' naming: its views,
// or it renamed, or nothing.
func mapped(n Naming, t TensorInfo) ([]TensorInfo, error) {
	var views []View
	if n.Views != nil {
		views = n.Views(t.Name, t.Shape)
	}
	if views == nil {
		to, keep := n.Rename(t.Name)
		if !keep {
			return nil, nil
		}
		t.Name = to
		return []TensorInfo{t}, nil
	}
	rows, rowElems := 1, int64(1)
	if len(t.Shape) > 0 {
		rows, rowElems = t.Shape[0], t.Elements()/max(int64(t.Shape[0]), 1)
	}
	esize := int64(t.DType.Size())
	out := make([]TensorInfo, 0, len(views))
	for _, v := range views {
		vt := TensorInfo{Name: v.Name, DType: t.DType, Shape: slices.Clone(v.Shape), File: t.File,
			Offset: t.Offset + int64(v.Row0)*rowElems*esize}
		elems := vt.Elements()
		if v.Row0 < 0 || v.Rows < 0 || v.Row0+v.Rows > rows || elems != int64(v.Rows)*rowElems {
			return nil, fmt.Errorf("tensor %q %v: cannot be read as %q, rows [%d, %d) shaped %v", t.Name, t.Shape, v.Name, v.Row0, v.Row0+v.Rows, v.Shape)
		}
		vt.Size = elems * esize
		out = append(out, vt)
	}
	return out, nil
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
