package checkpoint

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"path"
	"strings"

	"ferry/dtype"
)

// PyTorch checkpoints (.pth, .pt, .bin, .ckpt) as torch.save has written
// them since PyTorch 1.6: a zip archive whose one folder holds data.pkl
// (the pickled state dict, tensors as references to storages) and
// data/<key> (each storage's raw little-endian bytes, stored uncompressed).
// The tensors of such a file are read in place, like a safetensors file's.

// zipMagic starts every zip archive with entries.
var zipMagic = []byte("PK\x03\x04")

// maxPickleSize bounds data.pkl: a state dict of many thousand tensors
// pickles to a few MiB.
const maxPickleSize = 256 << 20

// legacyMagic starts a checkpoint torch.save wrote before PyTorch 1.6 (or
// with _use_new_zipfile_serialization=False): a pickled magic number.
var legacyMagic = []byte{0x80, 0x02, 0x8a, 0x0a}

// fileKind tells a PyTorch zip archive and a legacy PyTorch pickle from
// anything else (a safetensors file) by their first bytes.
func fileKind(r io.ReaderAt) (torchZip, legacy bool) {
	var head [4]byte
	n, _ := r.ReadAt(head[:], 0)
	if n < len(head) {
		return false, false
	}
	return bytes.Equal(head[:], zipMagic), bytes.Equal(head[:], legacyMagic)
}

// stateDictKeys are the keys training frameworks nest a state dict under.
var stateDictKeys = []string{"state_dict", "model", "module", "model_state_dict", "ema"}

// parseTorchZip reads the tensor table of a PyTorch zip checkpoint.
func parseTorchZip(name string, r io.ReaderAt, size int64) (*header, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, &FormatError{File: name, Reason: "not a readable PyTorch zip checkpoint: " + err.Error(), Err: err}
	}
	root, entries, err := torchEntries(name, zr)
	if err != nil {
		return nil, err
	}
	if bo, ok := entries[root+"byteorder"]; ok {
		b, err := readEntry(bo, 16)
		if err != nil {
			return nil, formatErr(name, "byteorder: %v", err)
		}
		if s := strings.TrimSpace(string(b)); s != "little" {
			return nil, formatErr(name, "stores tensors %s-endian; ferry reads little-endian checkpoints", s)
		}
	}
	raw, err := readEntry(entries[root+"data.pkl"], maxPickleSize)
	if err != nil {
		return nil, formatErr(name, "data.pkl: %v", err)
	}
	obj, err := unpickle(raw)
	if err != nil {
		return nil, formatErr(name, "data.pkl: %v", err)
	}
	dict, err := stateDict(obj)
	if err != nil {
		return nil, formatErr(name, "%v", err)
	}
	h := &header{}
	for i, k := range dict.keys {
		t, ok := dict.vals[i].(tensorRef)
		if !ok {
			continue // _metadata, step counters and the like
		}
		key, ok := k.(string)
		if !ok {
			return nil, formatErr(name, "a tensor is stored under the key %s, not a name", describe(k))
		}
		info, err := locateTensor(name, key, t, entries[root+"data/"+t.storage.key])
		if err != nil {
			return nil, err
		}
		h.tensors = append(h.tensors, info)
	}
	h.order() // no overlap check: tied weights share one storage
	return h, nil
}

// torchEntries finds the archive's folder (the one holding data.pkl) and
// indexes its entries by name.
func torchEntries(name string, zr *zip.Reader) (string, map[string]*zip.File, error) {
	entries := make(map[string]*zip.File, len(zr.File))
	var roots []string
	for _, f := range zr.File {
		entries[f.Name] = f
		if dir, file := path.Split(f.Name); file == "data.pkl" && dir != "" && !strings.Contains(strings.TrimSuffix(dir, "/"), "/") {
			roots = append(roots, dir)
		}
	}
	switch len(roots) {
	case 0:
		return "", nil, formatErr(name, "a zip archive without <folder>/data.pkl: not a torch.save checkpoint")
	case 1:
		return roots[0], entries, nil
	}
	return "", nil, formatErr(name, "a zip archive with %d data.pkl folders (%s): not one torch.save checkpoint", len(roots), strings.Join(roots, ", "))
}

// readEntry reads a small entry whole.
func readEntry(f *zip.File, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%d bytes, more than the %d expected", f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, limit))
}

// stateDict finds the name -> tensor dict: the object itself, or one nested
// under a key training frameworks use, when the object holds no tensors.
func stateDict(obj any) (*pyDict, error) {
	d, ok := obj.(*pyDict)
	if !ok {
		return nil, fmt.Errorf("holds %s, not a state dict (a dict of tensors)", describe(obj))
	}
	if hasTensor(d) {
		return d, nil
	}
	for _, k := range stateDictKeys {
		if i := d.find(k); i >= 0 {
			if inner, ok := d.vals[i].(*pyDict); ok && hasTensor(inner) {
				return inner, nil
			}
		}
	}
	return nil, fmt.Errorf("holds a dict without tensors (keys %s)", keyList(d))
}

func hasTensor(d *pyDict) bool {
	for _, v := range d.vals {
		if _, ok := v.(tensorRef); ok {
			return true
		}
	}
	return false
}

func keyList(d *pyDict) string {
	var ks []string
	for i, k := range d.keys {
		if i == 8 {
			ks = append(ks, "...")
			break
		}
		ks = append(ks, describe(k))
	}
	return strings.Join(ks, ", ")
}

// locateTensor turns a tensor reference into its byte range in the file:
// the storage's entry must be stored uncompressed, and the tensor must be a
// contiguous view inside it.
func locateTensor(name, key string, t tensorRef, entry *zip.File) (TensorInfo, error) {
	bad := func(format string, args ...any) (TensorInfo, error) {
		return TensorInfo{}, formatErr(name, "tensor %q: "+format, append([]any{key}, args...)...)
	}
	s := t.storage
	if s.dtype == dtype.Invalid {
		return bad("torch.%s is not a type ferry reads (float32, float16, bfloat16, float8, int64, int32, bool, float64)", s.class)
	}
	if entry == nil {
		return bad("its storage data/%s is missing from the archive", s.key)
	}
	if entry.Method != zip.Store {
		return bad("its storage data/%s is compressed; torch.save stores storages uncompressed (re-save it with torch.save)", s.key)
	}
	if !contiguous(t.shape, t.stride) {
		return bad("is a strided view (size %v, stride %v); save a contiguous copy", t.shape, t.stride)
	}
	esize := int64(s.dtype.Size())
	shape := make([]int, len(t.shape))
	numel := int64(1)
	for i, d := range t.shape {
		if d > 0 && numel > (1<<62)/d {
			return bad("size %v overflows", t.shape)
		}
		numel *= d
		shape[i] = int(d)
	}
	offset := t.offset
	if numel == 0 {
		offset = 0 // an empty view reads nothing
	} else if offset > s.numel || numel > s.numel-offset {
		return bad("elements [%d, %d) lie outside its storage of %d", offset, offset+numel, s.numel)
	}
	if uint64(s.numel) > entry.UncompressedSize64/uint64(esize) {
		return bad("storage data/%s holds %d bytes, too few for %d %s elements", s.key, entry.UncompressedSize64, s.numel, s.dtype)
	}
	start, err := entry.DataOffset()
	if err != nil {
		return bad("storage data/%s: %v", s.key, err)
	}
	return TensorInfo{Name: key, DType: s.dtype, Shape: shape, File: name, Offset: start + offset*esize, Size: numel * esize}, nil
}

// contiguous reports whether strides are row-major for the shape (dims of
// size 1 may have any stride, as torch's is_contiguous allows).
func contiguous(shape, stride []int64) bool {
	want := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 0 {
			return true
		}
		if shape[i] != 1 && stride[i] != want {
			return false
		}
		want *= shape[i]
	}
	return true
}
