package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Protocol buffer wire types (https://protobuf.dev/programming-guides/encoding/).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireStart   = 3 // deprecated group start
	wireEnd     = 4 // deprecated group end
	wireFixed32 = 5
)

// maxGroupDepth bounds nested deprecated groups so hostile input cannot
// recurse without limit.
const maxGroupDepth = 64

var errTruncated = errors.New("truncated protobuf")

// wireField is one decoded field of a protobuf message. For wireBytes, data
// holds the payload; for the other wire types, num holds the value (fixed32
// and fixed64 bits included). raw is the whole field, tag included, so fields
// this package does not interpret can be written back unchanged.
type wireField struct {
	number int
	typ    int
	num    uint64
	data   []byte
	raw    []byte
}

// wireReader walks the fields of one protobuf message.
type wireReader struct {
	buf []byte
	pos int
}

// next returns the next field. ok is false at the end of the message.
func (r *wireReader) next() (f wireField, ok bool, err error) {
	if r.pos >= len(r.buf) {
		return wireField{}, false, nil
	}
	start := r.pos
	key, err := r.varint()
	if err != nil {
		return wireField{}, false, err
	}
	f.number = int(key >> 3)
	f.typ = int(key & 7)
	if key>>3 == 0 || key>>3 > math.MaxInt32 {
		return wireField{}, false, fmt.Errorf("invalid field number %d at byte %d", key>>3, start)
	}
	if err := r.value(&f, 0); err != nil {
		return wireField{}, false, fmt.Errorf("field %d at byte %d: %w", f.number, start, err)
	}
	f.raw = r.buf[start:r.pos]
	return f, true, nil
}

// value reads the payload of f according to its wire type.
func (r *wireReader) value(f *wireField, depth int) error {
	switch f.typ {
	case wireVarint:
		v, err := r.varint()
		f.num = v
		return err
	case wireFixed64:
		b, err := r.take(8)
		if err == nil {
			f.num = binary.LittleEndian.Uint64(b)
		}
		return err
	case wireFixed32:
		b, err := r.take(4)
		if err == nil {
			f.num = uint64(binary.LittleEndian.Uint32(b))
		}
		return err
	case wireBytes:
		n, err := r.varint()
		if err != nil {
			return err
		}
		if n > uint64(len(r.buf)-r.pos) {
			return errTruncated
		}
		f.data, _ = r.take(int(n))
		return nil
	case wireStart:
		return r.skipGroup(f.number, depth+1)
	default:
		return fmt.Errorf("unsupported wire type %d", f.typ)
	}
}

// skipGroup skips a deprecated group up to its matching end tag.
func (r *wireReader) skipGroup(number, depth int) error {
	if depth > maxGroupDepth {
		return errors.New("groups nested too deeply")
	}
	for {
		if r.pos >= len(r.buf) {
			return errTruncated
		}
		key, err := r.varint()
		if err != nil {
			return err
		}
		inner := wireField{number: int(key >> 3), typ: int(key & 7)}
		if inner.typ == wireEnd {
			if inner.number != number {
				return fmt.Errorf("group %d closed by end tag %d", number, inner.number)
			}
			return nil
		}
		if err := r.value(&inner, depth); err != nil {
			return err
		}
	}
}

func (r *wireReader) varint() (uint64, error) {
	v, n := binary.Uvarint(r.buf[r.pos:])
	if n == 0 {
		return 0, errTruncated
	}
	if n < 0 {
		return 0, errors.New("varint overflows 64 bits")
	}
	r.pos += n
	return v, nil
}

func (r *wireReader) take(n int) ([]byte, error) {
	if n > len(r.buf)-r.pos {
		return nil, errTruncated
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// expect checks that f has the wire type the schema gives its field.
func (f wireField) expect(typ int, name string) error {
	if f.typ != typ {
		return fmt.Errorf("field %s (%d) has wire type %d, want %d", name, f.number, f.typ, typ)
	}
	return nil
}

func (f wireField) int32() int32     { return int32(f.num) } // proto int32: low 32 bits of the varint
func (f wireField) bool() bool       { return f.num != 0 }
func (f wireField) float32() float32 { return math.Float32frombits(uint32(f.num)) }

// wireWriter appends protobuf fields to a buffer.
type wireWriter struct{ buf []byte }

func (w *wireWriter) tag(number, typ int) {
	w.buf = binary.AppendUvarint(w.buf, uint64(number)<<3|uint64(typ))
}

func (w *wireWriter) varintField(number int, v uint64) {
	w.tag(number, wireVarint)
	w.buf = binary.AppendUvarint(w.buf, v)
}

// int32Field writes a proto int32: negative values sign-extend to ten bytes,
// as every protobuf implementation does.
func (w *wireWriter) int32Field(number int, v int32) { w.varintField(number, uint64(int64(v))) }

func (w *wireWriter) boolField(number int, v bool) {
	var n uint64
	if v {
		n = 1
	}
	w.varintField(number, n)
}

func (w *wireWriter) float32Field(number int, v float32) {
	w.tag(number, wireFixed32)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(v))
}

func (w *wireWriter) bytesField(number int, b []byte) {
	w.tag(number, wireBytes)
	w.buf = binary.AppendUvarint(w.buf, uint64(len(b)))
	w.buf = append(w.buf, b...)
}

func (w *wireWriter) stringField(number int, s string) {
	w.tag(number, wireBytes)
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
}
