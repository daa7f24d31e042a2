package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ferry/checkpoint"
	"ferry/dtype"
	"ferry/tensor"
)

// A checkpoint is a folder step-NNNNNNNN inside the checkpoint folder:
//
//	state.json            step, RNG state, data position, loss history
//	weights.safetensors   the trainable parameters (host masters)
//	optimizer.safetensors AdamW's moments m.<name> and v.<name>
//	ema.safetensors       the EMA, when there is one
//
// It is written whole into a temporary folder beside it and renamed into
// place, so a folder named step-* is always complete.
const (
	stateFile     = "state.json"
	weightsFile   = "weights.safetensors"
	optimizerFile = "optimizer.safetensors"
	emaFile       = "ema.safetensors"
	stepPrefix    = "step-"
	stateVersion  = 1
	// keepCheckpoints is how many of the newest checkpoints Save keeps.
	keepCheckpoints = 2
)

// state is state.json.
type state struct {
	Version   int         `json:"version"`
	Step      int         `json:"step"`
	AdamSteps int64       `json:"adam_steps"`
	RNG       []byte      `json:"rng"`
	Position  Position    `json:"data_position"`
	Params    []paramInfo `json:"params"`
	EMA       bool        `json:"ema"`
	History   []StepStat  `json:"history"`
}

type paramInfo struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// CheckpointName is the folder name of the checkpoint after step.
func CheckpointName(step int) string { return fmt.Sprintf("%s%08d", stepPrefix, step) }

// Save writes a checkpoint of the trainer's state into dir (created if
// missing) and returns its folder. Older checkpoints beyond the newest
// keepCheckpoints are removed.
func (t *Trainer) Save(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	final := filepath.Join(dir, CheckpointName(t.step))
	tmp, err := os.MkdirTemp(dir, "."+CheckpointName(t.step)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := t.writeState(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := replaceDir(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	pruneCheckpoints(dir, keepCheckpoints)
	return final, nil
}

// writeState writes every file of a checkpoint into dir.
func (t *Trainer) writeState(dir string) error {
	params := t.net.Params()
	if err := writeTensors(filepath.Join(dir, weightsFile), "", params, dataOf(params)); err != nil {
		return err
	}
	mv := append(namedCopy("m.", params, t.opt.M), namedCopy("v.", params, t.opt.V)...)
	if err := checkpoint.WriteFile(filepath.Join(dir, optimizerFile), mv, nil); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if t.ema != nil {
		w, err := t.ema.Values()
		if err != nil {
			return err
		}
		if err := writeTensors(filepath.Join(dir, emaFile), "", params, w); err != nil {
			return err
		}
	}
	rng, err := t.rng.MarshalBinary()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	st := state{Version: stateVersion, Step: t.step, AdamSteps: t.opt.Steps, RNG: rng, Position: t.data.Position(),
		EMA: t.ema != nil, History: t.History}
	for _, p := range params {
		st.Params = append(st.Params, paramInfo{Name: p.Name, Shape: p.Shape})
	}
	raw, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, stateFile), append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// replaceDir renames tmp to final, moving an existing final out of the
// way first (a second save of the same step).
func replaceDir(tmp, final string) error {
	if _, err := os.Stat(final); err == nil {
		old := final + ".old"
		os.RemoveAll(old)
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// checkpoints lists the complete checkpoint folders in dir, oldest first.
func checkpoints(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), stepPrefix) && !strings.Contains(e.Name(), ".") {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), stateFile)); err == nil {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(out) // zero-padded step numbers sort in order
	return out
}

func pruneCheckpoints(dir string, keep int) {
	all := checkpoints(dir)
	for len(all) > keep {
		os.RemoveAll(all[0])
		all = all[1:]
	}
}

// FindCheckpoint resolves --resume: a checkpoint folder itself, or a
// checkpoint folder's parent, whose newest checkpoint is taken.
func FindCheckpoint(path string) (string, error) {
	if _, err := os.Stat(filepath.Join(path, stateFile)); err == nil {
		return path, nil
	}
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return "", fmt.Errorf("resume: %s is not a folder", path)
	}
	all := checkpoints(path)
	if len(all) == 0 {
		return "", fmt.Errorf("resume: %s holds no checkpoint (no %s, no %s* folders)", path, stateFile, stepPrefix)
	}
	return all[len(all)-1], nil
}

// Restore loads a checkpoint written by Save: the parameters (then
// synced to the model), the optimizer's moments, the EMA, the RNG state,
// the data position and the history. The parameters must be those of the
// run that saved it.
func (t *Trainer) Restore(dir string) error {
	raw, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	st, err := decodeState(raw)
	if err != nil {
		return fmt.Errorf("resume: %s: %w", filepath.Join(dir, stateFile), err)
	}
	params := t.net.Params()
	if err := sameParams(st.Params, params); err != nil {
		return fmt.Errorf("resume: %s was saved by a different setup: %w", dir, err)
	}
	if st.EMA != (t.ema != nil) {
		return fmt.Errorf("resume: %s was saved with EMA %v; give the same --ema-decay setting", dir, st.EMA)
	}
	if err := readTensors(filepath.Join(dir, weightsFile), "", params, dataOf(params)); err != nil {
		return err
	}
	if err := readTensors(filepath.Join(dir, optimizerFile), "m.", params, t.opt.M); err != nil {
		return err
	}
	if err := readTensors(filepath.Join(dir, optimizerFile), "v.", params, t.opt.V); err != nil {
		return err
	}
	if t.ema != nil {
		if err := readTensors(filepath.Join(dir, emaFile), "", params, t.ema.W); err != nil {
			return err
		}
		if err := t.ema.load(); err != nil {
			return err
		}
	}
	if err := t.rng.UnmarshalBinary(st.RNG); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if err := t.data.Seek(st.Position); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	t.step, t.opt.Steps, t.History = st.Step, st.AdamSteps, st.History
	return t.net.Sync()
}

// decodeState parses and checks state.json.
func decodeState(raw []byte) (state, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return state{}, err
	}
	switch {
	case st.Version != stateVersion:
		return state{}, fmt.Errorf("version %d, this ferry reads version %d", st.Version, stateVersion)
	case st.Step < 0 || st.AdamSteps < 0 || st.Position.Epoch < 0 || st.Position.Index < 0:
		return state{}, fmt.Errorf("negative step %d, optimizer step %d or data position %v", st.Step, st.AdamSteps, st.Position)
	case len(st.History) != st.Step:
		return state{}, fmt.Errorf("history of %d steps for step %d", len(st.History), st.Step)
	case len(st.RNG) == 0:
		return state{}, errors.New("no RNG state")
	}
	for i, p := range st.Params {
		for _, d := range p.Shape {
			if d < 0 {
				return state{}, fmt.Errorf("parameter %d (%s) has shape %v", i, p.Name, p.Shape)
			}
		}
	}
	return st, nil
}

func sameParams(saved []paramInfo, params []*Param) error {
	if len(saved) != len(params) {
		return fmt.Errorf("%d parameters, this run trains %d", len(saved), len(params))
	}
	for i, p := range params {
		if saved[i].Name != p.Name || !slices.Equal(saved[i].Shape, p.Shape) {
			return fmt.Errorf("parameter %d is %s %v, this run has %s %v", i, saved[i].Name, saved[i].Shape, p.Name, p.Shape)
		}
	}
	return nil
}

func dataOf(params []*Param) [][]float32 {
	out := make([][]float32, len(params))
	for i, p := range params {
		out[i] = p.Data
	}
	return out
}

// namedCopy describes values (one per parameter) as float32 tensors
// named prefix+name.
func namedCopy(prefix string, params []*Param, values [][]float32) []checkpoint.RawTensor {
	out := make([]checkpoint.RawTensor, len(params))
	for i, p := range params {
		out[i] = checkpoint.F32Tensor(prefix+p.Name, p.Shape, values[i])
	}
	return out
}

// writeTensors writes values (one per parameter) as float32 tensors named
// prefix+name into a safetensors file, atomically.
func writeTensors(path, prefix string, params []*Param, values [][]float32) error {
	if err := checkpoint.WriteFile(path, namedCopy(prefix, params, values), nil); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// readTensors fills values (one per parameter) from the tensors named
// prefix+name of a safetensors file.
func readTensors(path, prefix string, params []*Param, values [][]float32) error {
	f, err := checkpoint.Open(path)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	defer f.Close()
	for i, p := range params {
		info, ok := f.Lookup(prefix + p.Name)
		if !ok {
			return fmt.Errorf("resume: %s has no tensor %q", path, prefix+p.Name)
		}
		if !slices.Equal(info.Shape, p.Shape) || info.DType != dtype.F32 {
			return fmt.Errorf("resume: %s: %s is %s%v, want F32%v", path, info.Name, info.DType, info.Shape, p.Shape)
		}
		d, err := f.ReadF32(info)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		copy(values[i], d)
	}
	return nil
}

// f32Bytes views float32 values as their little-endian bytes.
func f32Bytes(d []float32) []byte {
	if len(d) == 0 {
		return nil
	}
	return tensor.FromF32(d, len(d)).Raw()
}
