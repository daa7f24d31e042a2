package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Conventional weight file names, in the order OpenSet looks for them in a
// folder: transformers models, then diffusers models; an index before a
// single file, since an index names every shard explicitly; safetensors
// before PyTorch checkpoints, as diffusers and transformers prefer them.
var conventionalWeights = []string{
	"model.safetensors.index.json",
	"diffusion_pytorch_model.safetensors.index.json",
	"model.safetensors",
	"diffusion_pytorch_model.safetensors",
	"pytorch_model.bin.index.json",
	"diffusion_pytorch_model.bin.index.json",
	"pytorch_model.bin",
	"diffusion_pytorch_model.bin",
}

const (
	indexSuffix      = ".safetensors.index.json"
	torchIndexSuffix = ".bin.index.json"
)

// torchExtensions are the names torch.save checkpoints go by.
var torchExtensions = []string{".bin", ".pth", ".pt", ".ckpt"}

func isTorchName(name string) bool {
	return slices.ContainsFunc(torchExtensions, func(ext string) bool { return strings.HasSuffix(name, ext) })
}

// Set is the tensors of one model across its files: a single safetensors
// file or the shards an index names. Every shard is opened and validated
// when the set is opened and stays open until Close. Methods taking a
// TensorInfo dispatch on its File, so infos from Lookup work directly.
type Set struct {
	path   string  // the file or index that was opened
	files  []*File // in the order opened
	byPath map[string]*File
	byName map[string]TensorInfo
	names  []string // sorted
	// scales are the per-tensor scales of a scaled fp8 checkpoint, by
	// weight name (scales.go).
	scales map[string]float32
	// indexMetadata is the index's "metadata" object (nil for one file).
	indexMetadata map[string]any
}

// OpenSet opens the weights at path: a .safetensors file, a PyTorch zip
// checkpoint (.bin, .pth, .pt, .ckpt), an index of shards
// (*.safetensors.index.json, *.bin.index.json), or a component folder
// holding one of those under a conventional name
// (model.safetensors[.index.json], diffusion_pytorch_model.safetensors
// [.index.json], their pytorch_model.bin forms) or, failing that, exactly
// one index or one weights file (safetensors first).
func OpenSet(path string) (*Set, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open weights: %w", err)
	}
	if st.IsDir() {
		found, err := findWeights(path)
		if err != nil {
			return nil, err
		}
		path = found
	}
	if strings.HasSuffix(path, ".index.json") {
		return openIndex(path)
	}
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	s := newSet(path)
	if err := s.add(f, nil); err != nil {
		f.Close()
		return nil, err
	}
	s.finish()
	if err := s.takeScales(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// findWeights picks the weights file of a component folder.
func findWeights(dir string) (string, error) {
	for _, name := range conventionalWeights {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("find weights: %w", err)
	}
	found := make([][]string, len(weightKinds))
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if k := slices.IndexFunc(weightKinds, func(k weightKind) bool { return k.match(e.Name()) }); k >= 0 {
			found[k] = append(found[k], e.Name())
		}
	}
	for k, names := range found {
		switch {
		case len(names) == 1:
			return filepath.Join(dir, names[0]), nil
		case len(names) > 1:
			return "", &FormatError{File: dir, Reason: weightKinds[k].several(names)}
		}
	}
	return "", &FormatError{File: dir, Reason: "no weights (looked for " + strings.Join(conventionalWeights, ", ") + ", or one .safetensors, .bin, .pth, .pt or .ckpt file)", Err: fs.ErrNotExist}
}

// weightKind is a kind of file a folder's weights may be in, and what
// findWeights says of a folder holding several of it.
type weightKind struct {
	match   func(name string) bool
	several func(names []string) string
}

// weightKinds are in the order findWeights prefers them.
var weightKinds = []weightKind{
	{func(n string) bool { return strings.HasSuffix(n, indexSuffix) }, severalIndexes},
	{func(n string) bool { return strings.HasSuffix(n, ".safetensors") }, func(names []string) string {
		return fmt.Sprintf("%d .safetensors files and no *%s to say how they go together", len(names), indexSuffix)
	}},
	{func(n string) bool { return strings.HasSuffix(n, torchIndexSuffix) }, severalIndexes},
	{isTorchName, func(names []string) string {
		return fmt.Sprintf("several PyTorch checkpoints (%s) and no *%s to say how they go together: open one by name", strings.Join(names, ", "), torchIndexSuffix)
	}},
}

func severalIndexes(names []string) string {
	return fmt.Sprintf("several weight indexes (%s): open one by name", strings.Join(names, ", "))
}

// shardIndex is the content of a *.safetensors.index.json.
type shardIndex struct {
	Metadata  map[string]any     `json:"metadata"`
	WeightMap map[string]*string `json:"weight_map"`
}

// openIndex opens every shard an index names and checks that each mapped
// tensor is in the shard the index says.
func openIndex(path string) (*Set, error) {
	idx, err := readIndex(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	byShard := map[string][]string{}
	for name, shard := range idx.WeightMap {
		byShard[*shard] = append(byShard[*shard], name)
	}
	shards := slices.Sorted(maps.Keys(byShard))
	s := newSet(path)
	s.indexMetadata = idx.Metadata
	for _, shard := range shards {
		f, err := Open(filepath.Join(dir, shard))
		if err != nil {
			s.Close()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, &FormatError{File: path, Reason: fmt.Sprintf("shard %s is missing", shard), Err: err}
			}
			return nil, fmt.Errorf("shard %s of %s: %w", shard, path, err)
		}
		if err := s.add(f, byShard[shard]); err != nil {
			f.Close()
			s.Close()
			return nil, err
		}
	}
	s.finish()
	if err := s.takeScales(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// readIndex parses and checks an index file.
func readIndex(path string) (*shardIndex, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read weight index: %w", err)
	}
	if err := checkJSON(data); err != nil {
		return nil, &FormatError{File: path, Reason: err.Error(), Err: err}
	}
	var idx shardIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, &FormatError{File: path, Reason: "malformed index: " + err.Error(), Err: err}
	}
	if idx.WeightMap == nil {
		return nil, formatErr(path, "malformed index: no weight_map")
	}
	for name, shard := range idx.WeightMap {
		if shard == nil {
			return nil, formatErr(path, "malformed index: weight_map[%q] is null", name)
		}
		if !filepath.IsLocal(*shard) || !(strings.HasSuffix(*shard, ".safetensors") || isTorchName(*shard)) {
			return nil, formatErr(path, "malformed index: weight_map[%q] = %q is not a .safetensors or PyTorch file beside the index", name, *shard)
		}
	}
	return &idx, nil
}

func newSet(path string) *Set {
	return &Set{path: path, byPath: map[string]*File{}, byName: map[string]TensorInfo{}}
}

// add takes ownership of f once it returns nil. want lists the tensors an
// index maps to f, each of which must be there.
func (s *Set) add(f *File, want []string) error {
	for _, name := range want {
		if _, ok := f.Lookup(name); !ok {
			return formatErr(s.path, "maps tensor %q to shard %s, which does not contain it", name, filepath.Base(f.Path()))
		}
	}
	for _, t := range f.hdr.tensors {
		if prev, dup := s.byName[t.Name]; dup {
			return formatErr(s.path, "tensor %q is in both %s and %s", t.Name, prev.File, f.Path())
		}
		s.byName[t.Name] = t
	}
	s.files = append(s.files, f)
	s.byPath[f.Path()] = f
	return nil
}

func (s *Set) finish() {
	s.names = slices.Sorted(maps.Keys(s.byName))
}

// Path is the file or index the set was opened from.
func (s *Set) Path() string { return s.path }

// Files lists the open files, shards in name order.
func (s *Set) Files() []*File { return slices.Clone(s.files) }

// Names lists every tensor name, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Len is the number of tensors.
func (s *Set) Len() int { return len(s.names) }

// Lookup describes the tensor called name.
func (s *Set) Lookup(name string) (TensorInfo, bool) {
	t, ok := s.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return t.clone(), true
}

// IndexMetadata is the index's "metadata" object (nil for a single file).
// It is shared: do not modify it.
func (s *Set) IndexMetadata() map[string]any { return s.indexMetadata }

// TotalBytes is the sum of all tensors' data sizes.
func (s *Set) TotalBytes() int64 {
	var n int64
	for _, f := range s.files {
		n += f.TotalBytes()
	}
	return n
}

// file finds the open file holding info.
func (s *Set) file(info TensorInfo) (*File, error) {
	f, ok := s.byPath[info.File]
	if !ok {
		return nil, fmt.Errorf("tensor %q: file %q is not part of %s", info.Name, info.File, s.path)
	}
	return f, nil
}

// ReadAt reads the whole tensor into dst (len(dst) == info.Size) by pread.
func (s *Set) ReadAt(info TensorInfo, dst []byte) error {
	f, err := s.file(info)
	if err != nil {
		return err
	}
	return f.ReadAt(info, dst)
}

// ReadRange reads bytes [off, off+len(dst)) of the tensor's data by pread.
func (s *Set) ReadRange(info TensorInfo, off int64, dst []byte) error {
	f, err := s.file(info)
	if err != nil {
		return err
	}
	return f.ReadRange(info, off, dst)
}

// ReadRows gathers rows of the tensor's first dimension; see File.ReadRows.
func (s *Set) ReadRows(info TensorInfo, rows []int, dst []byte) error {
	f, err := s.file(info)
	if err != nil {
		return err
	}
	return f.ReadRows(info, rows, dst)
}

// ReadF32 reads the tensor converted to float32 (see File.ReadF32),
// times its scale in a scaled fp8 checkpoint (Scale).
func (s *Set) ReadF32(info TensorInfo) ([]float32, error) {
	f, err := s.file(info)
	if err != nil {
		return nil, err
	}
	out, err := f.ReadF32(info)
	if sc := s.Scale(info.Name); err == nil && sc != 1 {
		for i := range out {
			out[i] *= sc
		}
	}
	return out, err
}

// Bytes returns a zero-copy view of the tensor's data; see File.Bytes.
func (s *Set) Bytes(info TensorInfo) ([]byte, error) {
	f, err := s.file(info)
	if err != nil {
		return nil, err
	}
	return f.Bytes(info)
}

// DropCache releases the tensor's pages; see File.DropCache.
func (s *Set) DropCache(info TensorInfo) error {
	f, err := s.file(info)
	if err != nil {
		return err
	}
	return f.DropCache(info)
}

// DropAll releases the pages of every file in the set.
func (s *Set) DropAll() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.DropAll())
	}
	return errors.Join(errs...)
}

// Close closes every file. Views from Bytes become invalid.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
