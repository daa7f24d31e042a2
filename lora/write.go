package lora

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"ferry/checkpoint"
)

// Write saves ads as diffusers' save_lora_weights does: tensors
// "transformer.<module>.lora_A.weight" [Rank, In] and ".lora_B.weight"
// [Out, Rank] in float32, sorted by module, with metadata "format": "pt",
// the lora_adapter_metadata diffusers restores the alphas from, and meta.
// The file is written under a temporary name and renamed into place.
func Write(path string, ads []Adapter, meta map[string]string) error {
	if len(ads) == 0 {
		return fmt.Errorf("write %s: no adapters", path)
	}
	sorted := slices.Clone(ads)
	slices.SortFunc(sorted, func(a, b Adapter) int { return strings.Compare(a.Module, b.Module) })
	for i, a := range sorted {
		if err := a.valid(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if i > 0 && sorted[i-1].Module == a.Module {
			return fmt.Errorf("write %s: two adapters for %q", path, a.Module)
		}
	}
	md, err := fileMetadata(sorted, meta)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tensors := make([]checkpoint.RawTensor, 0, 2*len(sorted))
	for _, a := range sorted {
		pre := component + "." + a.Module
		tensors = append(tensors,
			checkpoint.F32Tensor(pre+".lora_A.weight", []int{a.Rank, a.In}, a.A),
			checkpoint.F32Tensor(pre+".lora_B.weight", []int{a.Out, a.Rank}, a.B))
	}
	return checkpoint.WriteFile(path, tensors, md)
}

// fileMetadata joins the caller's metadata with what diffusers reads.
func fileMetadata(ads []Adapter, meta map[string]string) (map[string]string, error) {
	lam, err := adapterMetadata(ads)
	if err != nil {
		return nil, err
	}
	md := map[string]string{"format": "pt", metadataKey: lam}
	for k, v := range meta {
		if _, reserved := md[k]; reserved {
			return nil, errors.New("metadata key " + k + " is written by lora.Write; choose another name")
		}
		md[k] = v
	}
	return md, nil
}
