package lora

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"

	"ferry/checkpoint"
	"ferry/dtype"
)

// pair is what a file holds for one module.
type pair struct {
	tensors [3]*checkpoint.TensorInfo // by part
}

// Read reads the LoRA adapters of a safetensors file in any of the
// namings the package doc lists, sorted by module. Errors are one line
// naming the file and, where one is at fault, the tensor.
func Read(path string) ([]Adapter, error) { return read(path, true) }

// ReadShapes is Read without the A and B values: each adapter's module,
// rank, sizes and alpha, from the header (and the alpha scalars). What a
// server checks a request's LoRA with before it queues the job.
func ReadShapes(path string) ([]Adapter, error) { return read(path, false) }

func read(path string, values bool) ([]Adapter, error) {
	f, err := checkpoint.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ads, err := decode(f, values)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ads, nil
}

// decode groups the file's tensors by module and reads each pair (their
// values too when values is set).
func decode(f *checkpoint.File, values bool) ([]Adapter, error) {
	pairs, err := group(f.Tensors())
	if err != nil {
		return nil, err
	}
	alphaOf, err := metadataAlpha(f.Metadata())
	if err != nil {
		return nil, err
	}
	mods := make([]string, 0, len(pairs))
	for m := range pairs {
		mods = append(mods, m)
	}
	slices.Sort(mods)
	ads := make([]Adapter, 0, len(mods))
	for _, m := range mods {
		a, err := readPair(f, m, pairs[m], alphaOf, values)
		if err != nil {
			return nil, err
		}
		ads = append(ads, a)
	}
	return ads, nil
}

// group parses every tensor name, refusing names it cannot place and two
// tensors for the same part of a module.
func group(infos []checkpoint.TensorInfo) (map[string]*pair, error) {
	pairs := map[string]*pair{}
	for i := range infos {
		t := &infos[i]
		mod, p, err := parseKey(t.Name)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		pr := pairs[mod]
		if pr == nil {
			pr = &pair{}
			pairs[mod] = pr
		}
		if prev := pr.tensors[p]; prev != nil {
			return nil, fmt.Errorf("tensor %q: module %s already has its %s in %q", t.Name, mod, p, prev.Name)
		}
		pr.tensors[p] = t
	}
	if len(pairs) == 0 {
		return nil, errors.New("holds no tensors (want LoRA pairs such as blocks.0.attn1.to_q.lora_A.weight / .lora_B.weight)")
	}
	return pairs, nil
}

// readPair checks one module's tensors and, when values is set, reads them
// as float32.
func readPair(f *checkpoint.File, mod string, pr *pair, alphaOf alphaFunc, values bool) (Adapter, error) {
	ta, tb := pr.tensors[partA], pr.tensors[partB]
	switch {
	case ta == nil && tb == nil:
		return Adapter{}, fmt.Errorf("tensor %q: an alpha for module %s, which has no lora_A/lora_B pair", pr.tensors[partAlpha].Name, mod)
	case tb == nil:
		return Adapter{}, fmt.Errorf("tensor %q: module %s has no lora_B (up) half", ta.Name, mod)
	case ta == nil:
		return Adapter{}, fmt.Errorf("tensor %q: module %s has no lora_A (down) half", tb.Name, mod)
	}
	for _, t := range []*checkpoint.TensorInfo{ta, tb} {
		if len(t.Shape) != 2 || t.Shape[0] == 0 || t.Shape[1] == 0 {
			return Adapter{}, fmt.Errorf("tensor %q: shape %v, want a non-empty matrix (LoRAs of convolutions are not supported)", t.Name, t.Shape)
		}
		if !isFloat(t.DType) {
			return Adapter{}, fmt.Errorf("tensor %q: dtype %s, want F32, BF16, F16 or F64", t.Name, t.DType)
		}
	}
	a := Adapter{Module: mod, Rank: ta.Shape[0], In: ta.Shape[1], Out: tb.Shape[0]}
	if tb.Shape[1] != a.Rank {
		return Adapter{}, fmt.Errorf("tensor %q: shape %v, but lora_A %q has rank %d (want [%d, %d])", tb.Name, tb.Shape, ta.Name, a.Rank, a.Out, a.Rank)
	}
	var err error
	if values {
		if a.A, err = readFinite(f, ta); err != nil {
			return Adapter{}, err
		}
		if a.B, err = readFinite(f, tb); err != nil {
			return Adapter{}, err
		}
	}
	if a.Alpha, err = alphaFor(f, mod, a.Rank, pr.tensors[partAlpha], alphaOf); err != nil {
		return Adapter{}, err
	}
	if !finite(a.Alpha) {
		return Adapter{}, fmt.Errorf("module %s: alpha %g from metadata %s is not a finite number", mod, a.Alpha, metadataKey)
	}
	return a, nil
}

// alphaFor is the module's alpha: its alpha tensor, else the metadata's,
// else the rank.
func alphaFor(f *checkpoint.File, mod string, rank int, t *checkpoint.TensorInfo, alphaOf alphaFunc) (float32, error) {
	if t == nil {
		if alphaOf != nil {
			return alphaOf(mod, rank), nil
		}
		return float32(rank), nil
	}
	if t.Elements() != 1 || len(t.Shape) > 1 {
		return 0, fmt.Errorf("tensor %q: shape %v, want one value", t.Name, t.Shape)
	}
	if t.DType == dtype.Bool || t.DType.Size() == 0 {
		return 0, fmt.Errorf("tensor %q: dtype %s, want a number", t.Name, t.DType)
	}
	v, err := readFinite(f, t)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

func isFloat(d dtype.DType) bool {
	return d == dtype.F32 || d == dtype.BF16 || d == dtype.F16 || d == dtype.F64
}

// readFinite reads a tensor as float32 and refuses NaN and infinities,
// which would turn every frame into noise.
func readFinite(f *checkpoint.File, t *checkpoint.TensorInfo) ([]float32, error) {
	v, err := f.ReadF32(*t)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("tensor %q: value %d is %g", t.Name, i, x)
		}
	}
	return v, nil
}
