package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"ferry/dtype"
)

// A restricted reader of the pickle stream torch.save writes for a state
// dict (data.pkl of a PyTorch zip checkpoint). It interprets the opcodes
// such a stream uses and never runs code: a class or function the stream
// names becomes an opaque value, except the few whose meaning a state dict
// needs (OrderedDict, torch's tensor rebuild functions, storage classes),
// which are read as data.

// pyDict is a Python dict or OrderedDict, in insertion order.
type pyDict struct {
	keys, vals []any
	index      map[any]int // key -> its position; keys are comparable (setPairs)
}

// find returns the position of key k, or -1.
func (d *pyDict) find(k any) int {
	if i, ok := d.index[k]; ok {
		return i
	}
	return -1
}

// pyList is a Python list; pointers, so that APPEND after memoisation
// reaches every reference.
type pyList struct{ items []any }

// pyGlobal is a class or function named by GLOBAL or STACK_GLOBAL.
type pyGlobal struct{ module, name string }

// pyOpaque is the result of calling something this reader does not model.
type pyOpaque struct{ what string }

// pyMark is the MARK opcode's stack marker.
type pyMark struct{}

// storageRef is a persistent id ('storage', StorageClass, key, location,
// numel): the tensor data in the zip entry data/<key>.
type storageRef struct {
	dtype dtype.DType
	class string
	key   string
	numel int64
}

// tensorRef is torch._utils._rebuild_tensor_v2's arguments: a view of a
// storage.
type tensorRef struct {
	storage storageRef
	offset  int64 // in elements
	shape   []int64
	stride  []int64
}

// storageDTypes maps torch's storage class names to dtypes.
var storageDTypes = map[string]dtype.DType{
	"FloatStorage":         dtype.F32,
	"HalfStorage":          dtype.F16,
	"BFloat16Storage":      dtype.BF16,
	"Float8_e4m3fnStorage": dtype.F8E4M3,
	"Float8_e5m2Storage":   dtype.F8E5M2,
	"LongStorage":          dtype.I64,
	"IntStorage":           dtype.I32,
	"BoolStorage":          dtype.Bool,
	"DoubleStorage":        dtype.F64,
}

// maxPickleDepth bounds the values on the stack and the MARKs open at
// once, so a hostile stream cannot exhaust memory through the stack alone.
// Python's pickler sets a dict's items 1000 at a time, so a state dict
// of any size stays far below it.
const maxPickleDepth = 1 << 16

var errPickleEOF = errors.New("unexpected end of pickle data")

// unpickler holds the machine's state.
type unpickler struct {
	data  []byte
	pos   int
	stack []any
	marks []int
	memo  map[uint32]any
}

// unpickle interprets a pickle stream and returns the object it builds.
func unpickle(data []byte) (any, error) {
	u := &unpickler{data: data, memo: map[uint32]any{}}
	for {
		if u.pos >= len(u.data) {
			return nil, errPickleEOF
		}
		op := u.data[u.pos]
		u.pos++
		done, err := u.step(op)
		if err != nil {
			return nil, fmt.Errorf("pickle opcode 0x%02x at byte %d: %w", op, u.pos-1, err)
		}
		if done {
			if len(u.stack) != 1 {
				return nil, fmt.Errorf("pickle stops with %d values on the stack, want 1", len(u.stack))
			}
			return u.stack[0], nil
		}
		if len(u.stack) > maxPickleDepth || len(u.marks) > maxPickleDepth {
			return nil, fmt.Errorf("pickle holds more than %d values or open MARKs at once (Python's pickler batches a dict's items by 1000)", maxPickleDepth)
		}
	}
}

// step runs one opcode; done is true at STOP.
func (u *unpickler) step(op byte) (done bool, err error) {
	switch op {
	case '.': // STOP
		return true, nil
	case 0x80: // PROTO
		_, err = u.take(1)
	case 0x95: // FRAME
		_, err = u.take(8)
	case '}': // EMPTY_DICT
		u.push(&pyDict{})
	case ']': // EMPTY_LIST
		u.push(&pyList{})
	case ')': // EMPTY_TUPLE
		u.push([]any{})
	case '(': // MARK
		u.marks = append(u.marks, len(u.stack))
	case 't': // TUPLE
		var items []any
		if items, err = u.popMark(); err == nil {
			u.push(items)
		}
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		err = u.tupleN(int(op-0x85) + 1)
	case 'l': // LIST
		var items []any
		if items, err = u.popMark(); err == nil {
			u.push(&pyList{items: items})
		}
	case 'd': // DICT
		var items []any
		if items, err = u.popMark(); err == nil {
			d := &pyDict{}
			err = d.setPairs(items)
			u.push(d)
		}
	case 'N':
		u.push(nil)
	case 0x88:
		u.push(true)
	case 0x89:
		u.push(false)
	case 'K', 'M', 'J', 0x8a, 0x8b, 'G':
		err = u.number(op)
	case 'X', 0x8c, 0x8d, 'U', 'T', 'C', 'B', 0x8e:
		err = u.text(op)
	case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
		err = u.put(op)
	case 'h', 'j': // BINGET, LONG_BINGET
		err = u.get(op)
	case 'c': // GLOBAL
		err = u.global()
	case 0x93: // STACK_GLOBAL
		err = u.stackGlobal()
	case 'Q': // BINPERSID
		err = u.persistent()
	case 'R', 0x81: // REDUCE, NEWOBJ
		err = u.reduce()
	case 'b': // BUILD: the state of an object; a state dict never needs it
		_, err = u.pop()
	case 's', 'u': // SETITEM, SETITEMS
		err = u.setItems(op)
	case 'a', 'e': // APPEND, APPENDS
		err = u.appendItems(op)
	case '0': // POP
		_, err = u.pop()
	case '2': // DUP
		var v any
		if v, err = u.top(); err == nil {
			u.push(v)
		}
	default:
		err = fmt.Errorf("not an opcode torch.save writes")
	}
	return false, err
}

func (u *unpickler) take(n int) ([]byte, error) {
	if n < 0 || n > len(u.data)-u.pos {
		return nil, errPickleEOF
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && u.marks[len(u.marks)-1] >= len(u.stack)) {
		return nil, errors.New("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 {
		return nil, errors.New("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops the values above the last MARK, and the MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) tupleN(n int) error {
	items, err := u.popN(n)
	if err == nil {
		u.push(items)
	}
	return err
}

// popN pops the top n values, in stack order.
func (u *unpickler) popN(n int) ([]any, error) {
	items := make([]any, n)
	for i := n - 1; i >= 0; i-- {
		v, err := u.pop()
		if err != nil {
			return nil, err
		}
		items[i] = v
	}
	return items, nil
}

// operands pops SETITEM's or APPEND's n values, or SETITEMS' or APPENDS'
// values above the last MARK, and returns them with the container below
// them.
func (u *unpickler) operands(marked bool, n int) ([]any, any, error) {
	var items []any
	var err error
	if marked {
		items, err = u.popMark()
	} else {
		items, err = u.popN(n)
	}
	if err != nil {
		return nil, nil, err
	}
	target, err := u.top()
	return items, target, err
}

// number reads the integer and float opcodes.
func (u *unpickler) number(op byte) error {
	switch op {
	case 'K': // BININT1
		b, err := u.take(1)
		if err != nil {
			return err
		}
		u.push(int64(b[0]))
	case 'M': // BININT2
		b, err := u.take(2)
		if err != nil {
			return err
		}
		u.push(int64(binary.LittleEndian.Uint16(b)))
	case 'J': // BININT, signed
		b, err := u.take(4)
		if err != nil {
			return err
		}
		u.push(int64(int32(binary.LittleEndian.Uint32(b))))
	case 0x8a, 0x8b: // LONG1, LONG4: little-endian two's complement
		n, err := u.length(op == 0x8a)
		if err != nil {
			return err
		}
		b, err := u.take(n)
		if err != nil {
			return err
		}
		u.push(longValue(b))
	case 'G': // BINFLOAT, big-endian
		b, err := u.take(8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	}
	return nil
}

// longValue decodes a LONG opcode's bytes: an int64 where it fits, else
// an opaque value (no tensor size or offset is that large).
func longValue(b []byte) any {
	if len(b) > 8 {
		return pyOpaque{what: "large integer"}
	}
	if len(b) == 0 {
		return int64(0)
	}
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	shift := 64 - 8*uint(len(b))
	return int64(v<<shift) >> shift // sign-extend
}

// length reads a 1-byte (short) or 4-byte little-endian length.
func (u *unpickler) length(short bool) (int, error) {
	if short {
		b, err := u.take(1)
		if err != nil {
			return 0, err
		}
		return int(b[0]), nil
	}
	b, err := u.take(4)
	if err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint32(b)
	if int64(n) > int64(len(u.data)-u.pos) {
		return 0, errPickleEOF
	}
	return int(n), nil
}

// text reads the string and bytes opcodes (bytes become strings too).
func (u *unpickler) text(op byte) error {
	var n int
	var err error
	switch op {
	case 0x8c, 'U', 'C': // one-byte lengths
		n, err = u.length(true)
	case 0x8d, 0x8e: // eight-byte lengths
		var b []byte
		if b, err = u.take(8); err == nil {
			v := binary.LittleEndian.Uint64(b)
			if v > uint64(len(u.data)-u.pos) {
				return errPickleEOF
			}
			n = int(v)
		}
	default:
		n, err = u.length(false)
	}
	if err != nil {
		return err
	}
	b, err := u.take(n)
	if err != nil {
		return err
	}
	u.push(string(b))
	return nil
}

func (u *unpickler) memoKey(op byte) (uint32, error) {
	switch op {
	case 'q', 'h':
		b, err := u.take(1)
		if err != nil {
			return 0, err
		}
		return uint32(b[0]), nil
	case 'r', 'j':
		b, err := u.take(4)
		if err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint32(b), nil
	}
	return uint32(len(u.memo)), nil // MEMOIZE
}

func (u *unpickler) put(op byte) error {
	k, err := u.memoKey(op)
	if err != nil {
		return err
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	u.memo[k] = v
	return nil
}

func (u *unpickler) get(op byte) error {
	k, err := u.memoKey(op)
	if err != nil {
		return err
	}
	v, ok := u.memo[k]
	if !ok {
		return fmt.Errorf("memo key %d not set", k)
	}
	u.push(v)
	return nil
}

// global reads GLOBAL's two text lines, module and name.
func (u *unpickler) global() error {
	var parts [2]string
	for i := range parts {
		end := bytes.IndexByte(u.data[u.pos:min(len(u.data), u.pos+1024)], '\n')
		if end < 0 {
			return errors.New("GLOBAL name not terminated")
		}
		parts[i] = string(u.data[u.pos : u.pos+end])
		u.pos += end + 1
	}
	u.push(pyGlobal{module: parts[0], name: parts[1]})
	return nil
}

func (u *unpickler) stackGlobal() error {
	v, err := u.popN(2) // module, name
	if err != nil {
		return err
	}
	m, ok1 := v[0].(string)
	n, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return errors.New("STACK_GLOBAL needs two strings")
	}
	u.push(pyGlobal{module: m, name: n})
	return nil
}

// persistent resolves BINPERSID: torch.save's storage references.
func (u *unpickler) persistent() error {
	pid, err := u.pop()
	if err != nil {
		return err
	}
	t, ok := pid.([]any)
	if !ok || len(t) != 5 || t[0] != "storage" {
		return fmt.Errorf("persistent id %v is not a torch storage reference", describe(pid))
	}
	class, ok := t[1].(pyGlobal)
	if !ok || class.module != "torch" {
		return fmt.Errorf("storage type %v is not a torch storage class", describe(t[1]))
	}
	key, ok1 := t[2].(string)
	numel, ok2 := t[4].(int64)
	if !ok1 || !ok2 || numel < 0 {
		return fmt.Errorf("storage reference %v: want a key and an element count", describe(pid))
	}
	dt, known := storageDTypes[class.name]
	if !known {
		dt = dtype.Invalid
	}
	u.push(storageRef{dtype: dt, class: class.name, key: key, numel: numel})
	return nil
}

// reduce applies a callable to its arguments (REDUCE, NEWOBJ).
func (u *unpickler) reduce() error {
	v, err := u.popN(2) // callable, arguments
	if err != nil {
		return err
	}
	r, err := apply(v[0], v[1], 0)
	if err != nil {
		return err
	}
	u.push(r)
	return nil
}

// apply evaluates the few callables a state dict needs as data; anything
// else is an opaque value.
func apply(fn, args any, depth int) (any, error) {
	a, _ := args.([]any)
	g, _ := fn.(pyGlobal)
	switch g.module + "." + g.name {
	case "collections.OrderedDict", "builtins.dict", "__builtin__.dict":
		return &pyDict{}, nil
	case "torch._utils._rebuild_tensor_v2":
		return rebuildTensor(a)
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		if len(a) == 0 {
			return nil, errors.New("_rebuild_parameter without arguments")
		}
		return a[0], nil // the parameter's data tensor
	case "torch._tensor._rebuild_from_type_v2":
		// (func, type, args, state): a tensor subclass; its data is
		// func(*args).
		if len(a) < 3 || depth > 4 {
			return nil, errors.New("_rebuild_from_type_v2 needs (func, type, args, state)")
		}
		return apply(a[0], a[2], depth+1)
	}
	return pyOpaque{what: describe(fn)}, nil
}

// rebuildTensor reads _rebuild_tensor_v2(storage, storage_offset, size,
// stride, requires_grad, backward_hooks[, metadata]).
func rebuildTensor(a []any) (tensorRef, error) {
	if len(a) < 4 {
		return tensorRef{}, fmt.Errorf("_rebuild_tensor_v2 with %d arguments, want at least 4", len(a))
	}
	s, ok := a[0].(storageRef)
	if !ok {
		return tensorRef{}, fmt.Errorf("_rebuild_tensor_v2's storage is %s", describe(a[0]))
	}
	off, ok := a[1].(int64)
	if !ok || off < 0 {
		return tensorRef{}, fmt.Errorf("_rebuild_tensor_v2's offset is %s", describe(a[1]))
	}
	shape, err := int64s(a[2])
	if err != nil {
		return tensorRef{}, fmt.Errorf("size: %w", err)
	}
	stride, err := int64s(a[3])
	if err != nil {
		return tensorRef{}, fmt.Errorf("stride: %w", err)
	}
	if len(stride) != len(shape) {
		return tensorRef{}, fmt.Errorf("%d sizes and %d strides", len(shape), len(stride))
	}
	return tensorRef{storage: s, offset: off, shape: shape, stride: stride}, nil
}

func int64s(v any) ([]int64, error) {
	t, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a tuple", describe(v))
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 {
			return nil, fmt.Errorf("element %d is %s, not a non-negative integer", i, describe(x))
		}
		out[i] = n
	}
	return out, nil
}

func (u *unpickler) setItems(op byte) error {
	items, target, err := u.operands(op == 'u', 2)
	if err != nil {
		return err
	}
	d, ok := target.(*pyDict)
	if !ok {
		return nil // items set on an opaque object: not part of a state dict
	}
	return d.setPairs(items)
}

// setPairs sets key/value pairs, replacing a key that is already there.
func (d *pyDict) setPairs(items []any) error {
	if len(items)%2 != 0 {
		return errors.New("odd number of dict items")
	}
	for i := 0; i < len(items); i += 2 {
		k := items[i]
		switch k.(type) {
		case string, int64, bool, nil:
		default:
			k = describe(k) // unhashable or opaque keys: kept by description
		}
		if j := d.find(k); j >= 0 {
			d.vals[j] = items[i+1]
			continue
		}
		if d.index == nil {
			d.index = map[any]int{}
		}
		d.index[k] = len(d.keys)
		d.keys = append(d.keys, k)
		d.vals = append(d.vals, items[i+1])
	}
	return nil
}

func (u *unpickler) appendItems(op byte) error {
	items, target, err := u.operands(op == 'e', 1)
	if err != nil {
		return err
	}
	if l, ok := target.(*pyList); ok {
		l.items = append(l.items, items...)
	}
	return nil
}

// describe names a pickled value in an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return fmt.Sprintf("%q", x)
	case int64, bool, float64:
		return fmt.Sprint(x)
	case pyGlobal:
		return x.module + "." + x.name
	case pyOpaque:
		return "a " + x.what + " object"
	case []any:
		return fmt.Sprintf("a tuple of %d", len(x))
	case *pyList:
		return fmt.Sprintf("a list of %d", len(x.items))
	case *pyDict:
		return fmt.Sprintf("a dict of %d", len(x.keys))
	case storageRef:
		return "storage " + x.key
	case tensorRef:
		return "a tensor"
	}
	return fmt.Sprintf("%T", v)
}
