package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// FuzzParseHeader feeds arbitrary bytes to the parser as a whole file. It
// must never panic, must explain every refusal with a one-line
// *FormatError, and whatever it accepts must be self-consistent. Seeds are
// in testdata/fuzz/FuzzParseHeader.
func FuzzParseHeader(f *testing.F) {
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, data)
	})
}

// FuzzHeaderJSON fuzzes the header text alone behind a correct length
// prefix and 64 bytes of data, so the fuzzer spends its time in the JSON
// and the validation rather than in guessing the prefix.
func FuzzHeaderJSON(f *testing.F) {
	f.Add(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"I64","shape":[],"data_offsets":[12,20]}}`, uint8(20))
	f.Add(`{"a":{"dtype":"F8_E4M3","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}}`, uint8(64))
	f.Add(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, uint8(16))
	f.Fuzz(func(t *testing.T, header string, dataLen uint8) {
		checkParse(t, rawFile(header, int(dataLen)))
	})
}

func checkParse(t *testing.T, data []byte) {
	const name = "fuzz.safetensors"
	h, err := parseHeader(name, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != name || !strings.HasPrefix(err.Error(), name+": ") {
			t.Fatalf("error %q is not a *FormatError naming the file", err)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("error %q is not one line", err)
		}
		return
	}
	dataStart := 8 + int64(binary.LittleEndian.Uint64(data))
	var end int64
	for i, ti := range h.tensors {
		if ti.File != name || ti.Offset < dataStart || ti.Size < 0 || ti.Offset+ti.Size > int64(len(data)) {
			t.Fatalf("accepted tensor %q at [%d,+%d) outside data [%d,%d)", ti.Name, ti.Offset, ti.Size, dataStart, len(data))
		}
		if ti.DType.Size() == 0 || ti.Elements()*int64(ti.DType.Size()) != ti.Size {
			t.Fatalf("accepted tensor %q: shape %v of %s in %d bytes", ti.Name, ti.Shape, ti.DType, ti.Size)
		}
		for _, d := range ti.Shape {
			if d < 0 {
				t.Fatalf("accepted tensor %q with shape %v", ti.Name, ti.Shape)
			}
		}
		if ti.Size > 0 {
			if ti.Offset < end {
				t.Fatalf("accepted overlapping tensor %q", ti.Name)
			}
			end = ti.Offset + ti.Size
		}
		if j, ok := h.index[ti.Name]; !ok || j != i {
			t.Fatalf("index of %q = %d, %v; want %d", ti.Name, j, ok, i)
		}
	}
	if len(h.index) != len(h.tensors) {
		t.Fatalf("%d names for %d tensors", len(h.index), len(h.tensors))
	}
}

// FuzzDuplicateKey checks the byte scanner that finds repeated keys against
// a slower reference built on json.Decoder tokens.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":{"a":2},"c":[{"a":1,"a":2}]}`,
		`{"a\"b":1,"a\u0022b":2}`,
		`{"x":"{\"y\":1,\"y\":2}","z":[1,"a",{"k":{}}],"k":null}`,
		`[{"a":[]},{"a":{}}]`,
		`{"\\":1,"\u005c":2}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		data := []byte(s)
		if !json.Valid(data) {
			return // duplicateKey is only defined on valid JSON
		}
		got := duplicateKey(data)
		want := duplicateKeyReference(t, data)
		if (got == nil) != (want == "") || got != nil && got.Error() != want {
			t.Fatalf("duplicateKey(%s) = %v, reference says %q", s, got, want)
		}
	})
}

// duplicateKeyReference finds the first repeated key with json.Decoder.
func duplicateKeyReference(t *testing.T, data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a valid number may not fit a float64 (1e700)
	type frame struct {
		keys      map[string]bool // nil for arrays
		expectKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return ""
		}
		if err != nil {
			t.Fatalf("reference decoder: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.keys != nil && top.expectKey && tok != json.Delim('}') {
			key := tok.(string)
			if top.keys[key] {
				return fmt.Sprintf("duplicate key %q", key)
			}
			top.keys[key] = true
			top.expectKey = false
			continue
		}
		switch tok {
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.keys != nil {
			top.expectKey = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		}
	}
}
