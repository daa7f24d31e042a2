package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"

	"ferry/dtype"
)

// MaxHeaderSize is the largest header accepted, as in the reference
// safetensors implementation: a corrupt length must not make us allocate
// gigabytes before failing.
const MaxHeaderSize = 100_000_000

// metadataKey is the header entry holding free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one stored tensor.
type TensorInfo struct {
	Name   string
	DType  dtype.DType
	Shape  []int
	File   string // path of the file holding the data, as given to Open
	Offset int64  // absolute byte offset of the data in File
	Size   int64  // bytes of data
}

// Elements is the number of elements, the product of Shape (1 for a scalar).
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

func (t TensorInfo) clone() TensorInfo {
	t.Shape = slices.Clone(t.Shape)
	return t
}

// header is a parsed and validated safetensors header.
type header struct {
	tensors  []TensorInfo // sorted by Offset, then Name
	index    map[string]int
	metadata map[string]string
}

// parseHeader reads and validates the header of the safetensors file name,
// whose content r holds and whose length is size. Every check that can be
// made without reading tensor data is made here.
func parseHeader(name string, r io.ReaderAt, size int64) (*header, error) {
	if size < 8 {
		return nil, formatErr(name, "truncated: %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if got, err := r.ReadAt(lenBuf[:], 0); got < len(lenBuf) {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, formatErr(name, "header length %d exceeds the %d-byte limit (not a safetensors file?)", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, formatErr(name, "header length %d runs past the end of the file (%d bytes): truncated?", n, size)
	}
	raw := make([]byte, n)
	if got, err := r.ReadAt(raw, 8); got < len(raw) {
		return nil, fmt.Errorf("read %s header: %w", name, err)
	}
	dataStart := 8 + int64(n)
	h, err := decodeHeader(name, raw)
	if err != nil {
		return nil, err
	}
	if err := h.locate(name, dataStart, size-dataStart); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeHeader turns the header JSON into tensor entries with offsets
// relative to the data section.
func decodeHeader(name string, raw []byte) (*header, error) {
	if !utf8.Valid(raw) {
		return nil, formatErr(name, "header is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, formatErr(name, "header is not a JSON object")
	}
	if err := checkJSON(raw); err != nil {
		return nil, &FormatError{File: name, Reason: "header: " + err.Error(), Err: err}
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, &FormatError{File: name, Reason: "header is not a JSON object: " + err.Error(), Err: err}
	}
	h := &header{index: make(map[string]int, len(entries))}
	// Sorted, so that a header with several faults always reports the same.
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		val := entries[key]
		if key == metadataKey {
			md, err := decodeMetadata(val)
			if err != nil {
				return nil, formatErr(name, "%s: %v", metadataKey, err)
			}
			h.metadata = md
			continue
		}
		t, err := decodeEntry(val)
		if err != nil {
			return nil, formatErr(name, "tensor %q: %v", key, err)
		}
		t.Name = key
		h.tensors = append(h.tensors, t)
	}
	return h, nil
}

// decodeMetadata reads the optional string-to-string metadata map.
func decodeMetadata(raw json.RawMessage) (map[string]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return nil, errors.New("not an object of strings")
	}
	md := make(map[string]string, len(generic))
	for k, v := range generic {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("value of %q is not a string", k)
		}
		md[k] = s
	}
	return md, nil
}

// decodeEntry reads {"dtype": ..., "shape": [...], "data_offsets": [b, e]}
// and checks that the byte count matches dtype and shape. Offsets stay
// relative to the data section until locate. Field names are matched
// exactly (encoding/json's struct decoding would fold case).
func decodeEntry(raw json.RawMessage) (TensorInfo, error) {
	var t TensorInfo
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return t, errors.New("entry is not an object")
	}
	for _, f := range []string{"dtype", "shape", "data_offsets"} {
		if v, ok := fields[f]; !ok || isNull(v) {
			return t, fmt.Errorf("missing %s", f)
		}
	}
	var err error
	if t.DType, err = decodeDType(fields["dtype"]); err != nil {
		return t, err
	}
	elems, err := decodeShape(fields["shape"], &t)
	if err != nil {
		return t, err
	}
	var offs []int64
	if err := json.Unmarshal(fields["data_offsets"], &offs); err != nil || len(offs) != 2 {
		return t, errors.New("data_offsets is not a pair of integers")
	}
	begin, end := offs[0], offs[1]
	if begin < 0 || end < 0 {
		return t, fmt.Errorf("negative data_offsets [%d, %d]", begin, end)
	}
	if begin > end {
		return t, fmt.Errorf("data_offsets begin %d > end %d", begin, end)
	}
	hi, lo := bits.Mul64(uint64(elems), uint64(t.DType.Size()))
	if hi != 0 || lo > math.MaxInt64 || int64(lo) != end-begin {
		return t, fmt.Errorf("shape %v of %s needs %s bytes but data_offsets [%d, %d] span %d: size mismatch",
			t.Shape, t.DType, byteCount(hi, lo), begin, end, end-begin)
	}
	t.Offset, t.Size = begin, end-begin
	return t, nil
}

// decodeDType accepts exactly the safetensors spelling of a type ferry knows.
func decodeDType(raw json.RawMessage) (dtype.DType, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return dtype.Invalid, errors.New("dtype is not a string")
	}
	d, err := dtype.Parse(s)
	if err != nil || d.String() != s {
		return dtype.Invalid, fmt.Errorf("unsupported dtype %q (ferry reads F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, BOOL, F64)", s)
	}
	return d, nil
}

// decodeShape fills t.Shape and returns the element count, refusing
// negative dimensions and counts that overflow int64.
func decodeShape(raw json.RawMessage, t *TensorInfo) (int64, error) {
	var dims []int64
	if err := json.Unmarshal(raw, &dims); err != nil {
		return 0, errors.New("shape is not a list of integers")
	}
	t.Shape = make([]int, len(dims))
	elems := uint64(1)
	overflow := false
	for i, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", dims)
		}
		if d > math.MaxInt {
			return 0, fmt.Errorf("shape %v: dimension %d too large", dims, d)
		}
		t.Shape[i] = int(d)
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			overflow = true
		}
		elems = lo
	}
	// A zero dimension anywhere makes the count 0 even after an overflow.
	if slices.Contains(dims, 0) {
		return 0, nil
	}
	if overflow {
		return 0, fmt.Errorf("shape %v: element count overflows", dims)
	}
	return int64(elems), nil
}

// locate checks every tensor against the data section [dataStart,
// dataStart+dataLen), turns offsets absolute, sorts the tensors in file
// order and refuses overlaps.
func (h *header) locate(name string, dataStart, dataLen int64) error {
	for i := range h.tensors {
		t := &h.tensors[i]
		if t.Offset+t.Size > dataLen {
			return formatErr(name, "tensor %q: data_offsets [%d, %d] run past the end of the data section (%d bytes): truncated?",
				t.Name, t.Offset, t.Offset+t.Size, dataLen)
		}
		t.File = name
		t.Offset += dataStart
	}
	h.order()
	var prev *TensorInfo
	for i := range h.tensors {
		t := &h.tensors[i]
		if t.Size == 0 {
			continue // empty tensors occupy no bytes and may share an offset
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return formatErr(name, "tensor %q overlaps tensor %q", t.Name, prev.Name)
		}
		prev = t
	}
	return nil
}

// order sorts the tensors in file order (offset, then size, then name)
// and indexes them by name.
func (h *header) order() {
	slices.SortFunc(h.tensors, func(a, b TensorInfo) int {
		if a.Offset != b.Offset {
			return cmpInt64(a.Offset, b.Offset)
		}
		if a.Size != b.Size {
			return cmpInt64(a.Size, b.Size)
		}
		return strings.Compare(a.Name, b.Name)
	})
	if h.index == nil {
		h.index = make(map[string]int, len(h.tensors))
	}
	for i, t := range h.tensors {
		h.index[t.Name] = i
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// byteCount prints a 128-bit product, which only happens in error messages
// about absurd shapes.
func byteCount(hi, lo uint64) string {
	if hi == 0 {
		return fmt.Sprint(lo)
	}
	return "2^64 or more"
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// checkJSON verifies that data is exactly one JSON value (trailing
// whitespace allowed, as safetensors pads headers with spaces) in which no
// object repeats a key. encoding/json keeps the last of duplicate keys
// silently; a checkpoint with two tensors of one name is ambiguous, so it is
// refused.
func checkJSON(data []byte) error {
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(any)) // only for its message
		return fmt.Errorf("not valid JSON: %v", err)
	}
	return duplicateKey(data)
}

// duplicateKey reports the first key repeated within one object of data,
// which must be valid JSON. It walks the bytes once: structure characters
// outside strings, and keys, are all it needs to look at.
func duplicateKey(data []byte) error {
	var stack []map[string]struct{} // one per open object or array (nil)
	expectKey := false
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{':
			stack = append(stack, map[string]struct{}{})
			expectKey = true
		case '[':
			stack = append(stack, nil)
		case '}', ']':
			stack = stack[:len(stack)-1]
			expectKey = false
		case ',':
			expectKey = stack[len(stack)-1] != nil
		case '"':
			end := stringEnd(data, i)
			if expectKey {
				key, err := jsonKey(data[i : end+1])
				if err != nil {
					return err
				}
				keys := stack[len(stack)-1]
				if _, dup := keys[key]; dup {
					return fmt.Errorf("duplicate key %q", key)
				}
				keys[key] = struct{}{}
				expectKey = false
			}
			i = end
		}
	}
	return nil
}

// stringEnd returns the index of the quote closing the JSON string that
// opens at data[start].
func stringEnd(data []byte, start int) int {
	for i := start + 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(data) - 1 // unreachable for valid JSON
}

// jsonKey decodes a quoted key; only keys with escapes need the decoder,
// so that "a" and "\u0061" count as the same key.
func jsonKey(quoted []byte) (string, error) {
	if !bytes.ContainsRune(quoted, '\\') {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var key string
	if err := json.Unmarshal(quoted, &key); err != nil {
		return "", fmt.Errorf("not valid JSON: key %s: %v", quoted, err)
	}
	return key, nil
}
