// Package torchtest writes PyTorch zip checkpoints as torch.save writes a
// state dict, for tests that need one (ferry reads them, it does not write
// them): data.pkl pickled at protocol 2 with each tensor as
// torch._utils._rebuild_tensor_v2 over a persistent storage reference, and
// each storage's bytes stored uncompressed under data/<key>.
package torchtest

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"ferry/checkpoint"
	"ferry/dtype"
)

// storageClass is torch's storage class for each dtype.
var storageClass = map[dtype.DType]string{
	dtype.F32: "FloatStorage", dtype.F16: "HalfStorage", dtype.BF16: "BFloat16Storage",
	dtype.F8E4M3: "Float8_e4m3fnStorage", dtype.F8E5M2: "Float8_e5m2Storage",
	dtype.I64: "LongStorage", dtype.I32: "IntStorage", dtype.Bool: "BoolStorage", dtype.F64: "DoubleStorage",
}

// Write writes tensors as a state dict (an OrderedDict, in the order
// given) to path, under the archive folder "archive".
func Write(path string, tensors []checkpoint.RawTensor) error {
	var pkl bytes.Buffer
	p := pickler{&pkl}
	p.op(0x80, 2) // PROTO 2
	p.global("collections", "OrderedDict")
	p.op(')', 'R') // EMPTY_TUPLE, REDUCE
	for i, t := range tensors {
		if i%1000 == 0 {
			// Python's pickler sets a dict's items 1000 at a time.
			if i > 0 {
				p.op('u') // SETITEMS
			}
			p.op('(') // MARK
		}
		class, ok := storageClass[t.DType]
		if !ok {
			return fmt.Errorf("torchtest: %s: no torch storage for %s", t.Name, t.DType)
		}
		numel := int64(1)
		for _, d := range t.Shape {
			numel *= int64(d)
		}
		p.str(t.Name)
		p.global("torch._utils", "_rebuild_tensor_v2")
		p.op('(', '(') // the arguments, then the persistent id
		p.str("storage")
		p.global("torch", class)
		p.str(strconv.Itoa(i))
		p.str("cpu")
		p.int(numel)
		p.op('t', 'Q') // TUPLE, BINPERSID
		p.int(0)       // storage offset
		p.ints(t.Shape, func(i int) int64 { return int64(t.Shape[i]) })
		p.ints(t.Shape, func(i int) int64 { return stride(t.Shape, i) })
		p.op(0x89) // requires_grad False
		p.global("collections", "OrderedDict")
		p.op(')', 'R', 't', 'R') // backward hooks; the tuple; REDUCE
	}
	if len(tensors) > 0 {
		p.op('u') // SETITEMS
	}
	p.op('.') // STOP

	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	type entry struct {
		name string
		data []byte
	}
	entries := []entry{{"archive/data.pkl", pkl.Bytes()}, {"archive/byteorder", []byte("little")}}
	for i, t := range tensors {
		entries = append(entries, entry{"archive/data/" + strconv.Itoa(i), t.Data})
	}
	entries = append(entries, entry{"archive/version", []byte("3\n")})
	for _, e := range entries {
		w, err := z.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		if err != nil {
			return err
		}
		if _, err := w.Write(e.data); err != nil {
			return err
		}
	}
	if err := z.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// stride is dimension i's row-major stride.
func stride(shape []int, i int) int64 {
	s := int64(1)
	for _, d := range shape[i+1:] {
		s *= int64(d)
	}
	return s
}

type pickler struct{ b *bytes.Buffer }

func (p pickler) op(ops ...byte) { p.b.Write(ops) }

func (p pickler) global(module, name string) {
	p.b.WriteString("c" + module + "\n" + name + "\n")
}

func (p pickler) str(s string) {
	p.b.WriteByte('X')
	binary.Write(p.b, binary.LittleEndian, uint32(len(s)))
	p.b.WriteString(s)
}

// int writes BININT where the value fits in int32, else LONG1.
func (p pickler) int(v int64) {
	if v >= -1<<31 && v < 1<<31 {
		p.b.WriteByte('J')
		binary.Write(p.b, binary.LittleEndian, int32(v))
		return
	}
	p.b.Write([]byte{0x8a, 8})
	binary.Write(p.b, binary.LittleEndian, v)
}

// ints writes a tuple of n values.
func (p pickler) ints(dims []int, at func(i int) int64) {
	p.op('(')
	for i := range dims {
		p.int(at(i))
	}
	p.op('t')
}
