package lora

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strings"

	"ferry/checkpoint"
	"ferry/dtype"
)

// pair is what a file holds for one module.
type pair struct {
	tensors [numParts]*checkpoint.TensorInfo // by part
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
		if errors.Is(err, errSkipped) {
			continue
		}
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
	dropTimeProjectionBias(pairs)
	if len(pairs) == 0 {
		return nil, errors.New("holds no tensors (want LoRA pairs such as blocks.0.attn1.to_q.lora_A.weight / .lora_B.weight)")
	}
	return pairs, nil
}

// dropTimeProjectionBias drops a time_projection difference that comes
// without the module's lora weights, as diffusers does (AccVideo's LoRA
// stores one; with no adapter for the module diffusers' PEFT config would
// not match it).
func dropTimeProjectionBias(pairs map[string]*pair) {
	const mod = "condition_embedder.time_proj"
	pr := pairs[mod]
	if pr == nil || pr.tensors[partA] != nil || pr.tensors[partB] != nil {
		return
	}
	for _, t := range pr.tensors {
		if t != nil && strings.Contains(t.Name, "time_projection") {
			delete(pairs, mod)
			return
		}
	}
}

// readPair checks one module's tensors and, when values is set, reads them
// as float32: a lora_A/lora_B pair, a bias, or both; a head's full weight
// difference is a pair whose lora_B is the identity.
func readPair(f *checkpoint.File, mod string, pr *pair, alphaOf alphaFunc, values bool) (Adapter, error) {
	ta, tb, tdiff := pr.tensors[partA], pr.tensors[partB], pr.tensors[partDiff]
	bias, biasPart := pr.tensors[partDiffB], partDiffB
	if bias == nil {
		bias, biasPart = pr.tensors[partBias], partBias
	} else if pr.tensors[partBias] != nil {
		return Adapter{}, fmt.Errorf("tensor %q: module %s also has a diff_b %q", pr.tensors[partBias].Name, mod, bias.Name)
	}
	switch {
	case tdiff != nil && (ta != nil || tb != nil):
		return Adapter{}, fmt.Errorf("tensor %q: module %s has a full difference and a LoRA pair", tdiff.Name, mod)
	case tdiff != nil:
		return readDiff(f, mod, tdiff, bias, values)
	case ta == nil && tb == nil && bias == nil:
		return Adapter{}, fmt.Errorf("tensor %q: an alpha for module %s, which has no lora_A/lora_B pair", pr.tensors[partAlpha].Name, mod)
	case ta == nil && tb == nil:
		return readBiasOnly(f, mod, bias, values)
	case tb == nil:
		return Adapter{}, fmt.Errorf("tensor %q: module %s has no lora_B (up) half", ta.Name, mod)
	case ta == nil:
		return Adapter{}, fmt.Errorf("tensor %q: module %s has no lora_A (down) half", tb.Name, mod)
	}
	for _, t := range []*checkpoint.TensorInfo{ta, tb} {
		if err := checkMatrix(t); err != nil {
			return Adapter{}, err
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
	if bias != nil {
		a.HasBias = true
		if a.Bias, err = readBias(f, bias, a.Out, values); err != nil {
			return Adapter{}, err
		}
		if biasPart == partBias {
			// PEFT scales lora_B's bias with the product: alpha/rank.
			for i := range a.Bias {
				a.Bias[i] *= a.Scale()
			}
		}
	}
	return a, nil
}

// readBiasOnly is a module with a bias difference and no pair: diffusers'
// PEFT layer for it starts with a zero lora_B, so only the bias acts.
func readBiasOnly(f *checkpoint.File, mod string, bias *checkpoint.TensorInfo, values bool) (Adapter, error) {
	if len(bias.Shape) != 1 || bias.Shape[0] == 0 {
		return Adapter{}, fmt.Errorf("tensor %q: shape %v, want a non-empty vector", bias.Name, bias.Shape)
	}
	a := Adapter{Module: mod, Out: bias.Shape[0], HasBias: true}
	var err error
	a.Bias, err = readBias(f, bias, a.Out, values)
	return a, err
}

// readDiff is the head's full weight difference [out, in] as diffusers
// loads it: lora_A is the difference, lora_B the identity, scale 1.
func readDiff(f *checkpoint.File, mod string, diff, bias *checkpoint.TensorInfo, values bool) (Adapter, error) {
	if err := checkMatrix(diff); err != nil {
		return Adapter{}, err
	}
	out := diff.Shape[0]
	a := Adapter{Module: mod, Rank: out, In: diff.Shape[1], Out: out, Alpha: float32(out)}
	var err error
	if values {
		if a.A, err = readFinite(f, diff); err != nil {
			return Adapter{}, err
		}
		a.B = make([]float32, out*out)
		for i := range out {
			a.B[i*out+i] = 1
		}
	}
	if bias != nil {
		a.HasBias = true
		a.Bias, err = readBias(f, bias, out, values)
	}
	return a, err
}

// checkMatrix checks a pair's or a difference's tensor: a non-empty float
// matrix.
func checkMatrix(t *checkpoint.TensorInfo) error {
	if len(t.Shape) != 2 || t.Shape[0] == 0 || t.Shape[1] == 0 {
		return fmt.Errorf("tensor %q: shape %v, want a non-empty matrix (LoRAs of convolutions are not supported)", t.Name, t.Shape)
	}
	return checkFloat(t)
}

// readBias checks a bias of out values and reads it when values is set.
func readBias(f *checkpoint.File, t *checkpoint.TensorInfo, out int, values bool) ([]float32, error) {
	if len(t.Shape) != 1 || t.Shape[0] != out {
		return nil, fmt.Errorf("tensor %q: shape %v, want [%d] (the module's outputs)", t.Name, t.Shape, out)
	}
	if err := checkFloat(t); err != nil {
		return nil, err
	}
	if !values {
		return nil, nil
	}
	return readFinite(f, t)
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

// checkFloat refuses a tensor stored in a dtype other than the float ones
// LoRA files use.
func checkFloat(t *checkpoint.TensorInfo) error {
	switch t.DType {
	case dtype.F32, dtype.BF16, dtype.F16, dtype.F64:
		return nil
	}
	return fmt.Errorf("tensor %q: dtype %s, want F32, BF16, F16 or F64", t.Name, t.DType)
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
