package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// PieceType is sentencepiece's ModelProto.SentencePiece.Type.
type PieceType int32

// Piece types, numbered as in sentencepiece_model.proto.
const (
	Normal      PieceType = 1 // an ordinary vocabulary piece
	Unknown     PieceType = 2 // the <unk> piece
	Control     PieceType = 3 // <s>, </s>, <pad>: never produced from text
	UserDefined PieceType = 4 // always segmented as one unit
	Unused      PieceType = 5 // kept in the vocabulary, never produced
	Byte        PieceType = 6 // <0xNN> byte-fallback pieces
)

func (t PieceType) String() string {
	switch t {
	case Normal:
		return "NORMAL"
	case Unknown:
		return "UNKNOWN"
	case Control:
		return "CONTROL"
	case UserDefined:
		return "USER_DEFINED"
	case Unused:
		return "UNUSED"
	case Byte:
		return "BYTE"
	}
	return fmt.Sprintf("PieceType(%d)", int32(t))
}

// Piece is one vocabulary entry; its id is its index in Model.Pieces.
type Piece struct {
	Text  string
	Score float32
	Type  PieceType
}

// ModelTypeUnigram is TrainerSpec.ModelType for unigram models, the only
// kind this package segments.
const ModelTypeUnigram = 1

// TrainerSpec holds the fields of sentencepiece's TrainerSpec that change how
// text is encoded or which ids are special. Fields this package does not
// interpret are kept verbatim and written back.
type TrainerSpec struct {
	ModelType               int32 // 1 unigram, 2 BPE, 3 word, 4 char
	VocabSize               int32
	ByteFallback            bool
	UnkID, BosID            int32
	EosID, PadID            int32 // -1 when the model has none
	UnkPiece, BosPiece      string
	EosPiece, PadPiece      string
	UnkSurface              string // what Decode prints for <unk>
	TreatWhitespaceAsSuffix bool
	SplitByWhitespace       bool
	SplitDigits             bool

	unknownFields []byte
}

// NormalizerSpec is sentencepiece's NormalizerSpec.
type NormalizerSpec struct {
	Name                   string // "nmt_nfkc", "nfkc", "identity", ...
	PrecompiledCharsmap    []byte // double-array trie + replacement strings
	AddDummyPrefix         bool   // prepend "▁" to the text
	RemoveExtraWhitespaces bool   // strip ends, collapse runs of spaces
	EscapeWhitespaces      bool   // write spaces as "▁"

	unknownFields []byte
}

// Model is a decoded sentencepiece ModelProto.
type Model struct {
	Pieces     []Piece
	Trainer    TrainerSpec
	Normalizer NormalizerSpec

	unknownFields []byte // self_test_data, denormalizer_spec, extensions
}

// DefaultTrainerSpec returns the proto2 defaults of TrainerSpec.
func DefaultTrainerSpec() TrainerSpec {
	return TrainerSpec{
		ModelType:         ModelTypeUnigram,
		VocabSize:         8000,
		UnkID:             0,
		BosID:             1,
		EosID:             2,
		PadID:             -1,
		UnkPiece:          "<unk>",
		BosPiece:          "<s>",
		EosPiece:          "</s>",
		PadPiece:          "<pad>",
		UnkSurface:        " \u2047 ",
		SplitByWhitespace: true,
	}
}

// DefaultNormalizerSpec returns the proto2 defaults of NormalizerSpec.
func DefaultNormalizerSpec() NormalizerSpec {
	return NormalizerSpec{AddDummyPrefix: true, RemoveExtraWhitespaces: true, EscapeWhitespaces: true}
}

// ModelProto field numbers.
const (
	fieldPieces         = 1
	fieldTrainerSpec    = 2
	fieldNormalizerSpec = 3

	fieldPieceText  = 1
	fieldPieceScore = 2
	fieldPieceType  = 3

	fieldModelType         = 3
	fieldVocabSize         = 4
	fieldSplitByWhitespace = 22
	fieldTreatWSAsSuffix   = 24
	fieldSplitDigits       = 25
	fieldByteFallback      = 35
	fieldUnkID             = 40
	fieldBosID             = 41
	fieldEosID             = 42
	fieldPadID             = 43
	fieldUnkSurface        = 44
	fieldUnkPiece          = 45
	fieldBosPiece          = 46
	fieldEosPiece          = 47
	fieldPadPiece          = 48

	fieldNormName       = 1
	fieldNormCharsmap   = 2
	fieldNormDummy      = 3
	fieldNormExtraSpace = 4
	fieldNormEscape     = 5
)

// ParseModel decodes a serialized sentencepiece ModelProto (a spiece.model
// file) and checks it the way sentencepiece does when it loads one.
func ParseModel(data []byte) (*Model, error) {
	m, err := decodeModel(data)
	if err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeModel decodes without the semantic checks of Validate.
func decodeModel(data []byte) (*Model, error) {
	m := &Model{Trainer: DefaultTrainerSpec(), Normalizer: DefaultNormalizerSpec()}
	count, err := countPieces(data)
	if err != nil {
		return nil, err
	}
	// One allocation for every piece string: a 256k vocabulary would
	// otherwise be 256k small allocations.
	m.Pieces = make([]Piece, 0, count.pieces)
	arena := make([]byte, 0, count.textBytes)
	r := wireReader{buf: data}
	for {
		f, ok, err := r.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if err := m.decodeField(f, &arena); err != nil {
			return nil, err
		}
	}
	text := string(arena)
	off := 0
	for i := range m.Pieces {
		n := len(m.Pieces[i].Text)
		m.Pieces[i].Text = text[off : off+n]
		off += n
	}
	return m, nil
}

type pieceCount struct{ pieces, textBytes int }

// countPieces sizes the piece list and its text before decoding.
func countPieces(data []byte) (pieceCount, error) {
	var c pieceCount
	r := wireReader{buf: data}
	for {
		f, ok, err := r.next()
		if err != nil || !ok {
			return c, err
		}
		if f.number == fieldPieces && f.typ == wireBytes {
			c.pieces++
			c.textBytes += len(f.data) // an upper bound of the piece text
		}
	}
}

// decodeField decodes one ModelProto field. Piece texts are appended to
// arena; each Piece.Text temporarily holds a string of the right length
// only, replaced by a slice of the arena once it is complete.
func (m *Model) decodeField(f wireField, arena *[]byte) error {
	switch f.number {
	case fieldPieces:
		if err := f.expect(wireBytes, "pieces"); err != nil {
			return err
		}
		p, text, err := decodePiece(f.data)
		if err != nil {
			return fmt.Errorf("piece %d: %w", len(m.Pieces), err)
		}
		*arena = append(*arena, text...)
		p.Text = placeholder(len(text))
		m.Pieces = append(m.Pieces, p)
	case fieldTrainerSpec:
		if err := f.expect(wireBytes, "trainer_spec"); err != nil {
			return err
		}
		if err := m.Trainer.decode(f.data); err != nil {
			return fmt.Errorf("trainer_spec: %w", err)
		}
	case fieldNormalizerSpec:
		if err := f.expect(wireBytes, "normalizer_spec"); err != nil {
			return err
		}
		if err := m.Normalizer.decode(f.data); err != nil {
			return fmt.Errorf("normalizer_spec: %w", err)
		}
	default:
		m.unknownFields = append(m.unknownFields, f.raw...)
	}
	return nil
}

// placeholderBytes backs placeholder strings; pieces are shorter than
// maxPieceBytes... or not, in a malformed file, so longer ones allocate.
var placeholderBytes = strings.Repeat("x", 256)

func placeholder(n int) string {
	if n <= len(placeholderBytes) {
		return placeholderBytes[:n]
	}
	return strings.Repeat("x", n)
}

func decodePiece(data []byte) (p Piece, text []byte, err error) {
	p.Type = Normal
	r := wireReader{buf: data}
	for {
		f, ok, err := r.next()
		if err != nil || !ok {
			return p, text, err
		}
		switch f.number {
		case fieldPieceText:
			err = f.expect(wireBytes, "piece")
			text = f.data
		case fieldPieceScore:
			err = f.expect(wireFixed32, "score")
			p.Score = f.float32()
		case fieldPieceType:
			err = f.expect(wireVarint, "type")
			p.Type = PieceType(f.int32())
		}
		// Other fields are extensions no encoder reads; they are dropped.
		if err != nil {
			return p, text, err
		}
	}
}

// decode merges the fields of a serialized TrainerSpec into s. Scalar fields
// seen twice keep the last value, as protobuf parsers do.
func (s *TrainerSpec) decode(data []byte) error {
	r := wireReader{buf: data}
	for {
		f, ok, err := r.next()
		if err != nil || !ok {
			return err
		}
		if err := s.decodeField(f); err != nil {
			return err
		}
	}
}

func (s *TrainerSpec) decodeField(f wireField) error {
	ints := map[int]*int32{
		fieldModelType: &s.ModelType, fieldVocabSize: &s.VocabSize,
		fieldUnkID: &s.UnkID, fieldBosID: &s.BosID, fieldEosID: &s.EosID, fieldPadID: &s.PadID,
	}
	bools := map[int]*bool{
		fieldByteFallback: &s.ByteFallback, fieldTreatWSAsSuffix: &s.TreatWhitespaceAsSuffix,
		fieldSplitByWhitespace: &s.SplitByWhitespace, fieldSplitDigits: &s.SplitDigits,
	}
	strs := map[int]*string{
		fieldUnkPiece: &s.UnkPiece, fieldBosPiece: &s.BosPiece, fieldEosPiece: &s.EosPiece,
		fieldPadPiece: &s.PadPiece, fieldUnkSurface: &s.UnkSurface,
	}
	if p, ok := ints[f.number]; ok {
		*p = f.int32()
		return f.expect(wireVarint, fmt.Sprint(f.number))
	}
	if p, ok := bools[f.number]; ok {
		*p = f.bool()
		return f.expect(wireVarint, fmt.Sprint(f.number))
	}
	if p, ok := strs[f.number]; ok {
		*p = string(f.data)
		return f.expect(wireBytes, fmt.Sprint(f.number))
	}
	s.unknownFields = append(s.unknownFields, f.raw...)
	return nil
}

func (s *NormalizerSpec) decode(data []byte) error {
	r := wireReader{buf: data}
	for {
		f, ok, err := r.next()
		if err != nil || !ok {
			return err
		}
		switch f.number {
		case fieldNormName:
			err = f.expect(wireBytes, "name")
			s.Name = string(f.data)
		case fieldNormCharsmap:
			err = f.expect(wireBytes, "precompiled_charsmap")
			s.PrecompiledCharsmap = f.data
		case fieldNormDummy:
			err = f.expect(wireVarint, "add_dummy_prefix")
			s.AddDummyPrefix = f.bool()
		case fieldNormExtraSpace:
			err = f.expect(wireVarint, "remove_extra_whitespaces")
			s.RemoveExtraWhitespaces = f.bool()
		case fieldNormEscape:
			err = f.expect(wireVarint, "escape_whitespaces")
			s.EscapeWhitespaces = f.bool()
		default:
			s.unknownFields = append(s.unknownFields, f.raw...)
		}
		if err != nil {
			return err
		}
	}
}

// maxPieceBytes is sentencepiece's limit on one piece (kMaxPieceSize).
const maxPieceBytes = 8000

// Validate applies the checks sentencepiece makes when it loads a model:
// a unigram model, non-empty pieces without NUL, no piece defined twice,
// exactly one UNKNOWN piece, and byte pieces exactly when byte_fallback is on
// (all 256 of them).
func (m *Model) Validate() error {
	if err := m.validate(); err != nil {
		return err
	}
	// sentencepiece keeps NORMAL/USER_DEFINED/UNUSED pieces and the reserved
	// ones (UNKNOWN/CONTROL/BYTE) in two maps; a name may repeat only across
	// them. validate checks the reserved ones.
	seen := make(map[string]int, len(m.Pieces))
	for id, p := range m.Pieces {
		if !isReserved(p.Type) {
			if first, dup := seen[p.Text]; dup {
				return fmt.Errorf("piece %d %q is defined twice (first as %d)", id, p.Text, first)
			}
			seen[p.Text] = id
		}
	}
	return nil
}

// validate is Validate without the duplicate check of non-reserved pieces,
// which NewTokenizer gets from building its trie instead.
func (m *Model) validate() error {
	if m.Trainer.ModelType != ModelTypeUnigram {
		return fmt.Errorf("model_type %d is not supported (only unigram, 1)", m.Trainer.ModelType)
	}
	if len(m.Pieces) == 0 {
		return errors.New("model has no pieces")
	}
	var bytesSeen [256]bool
	reserved := make(map[string]bool, 3+256)
	unk := -1
	for id, p := range m.Pieces {
		if err := checkPiece(id, p, m.Trainer.ByteFallback, reserved, &bytesSeen); err != nil {
			return err
		}
		if p.Type == Unknown {
			if unk >= 0 {
				return fmt.Errorf("piece %d %q: a second UNKNOWN piece (first is %d)", id, p.Text, unk)
			}
			unk = id
		}
	}
	if unk < 0 {
		return errors.New("model has no UNKNOWN piece")
	}
	if m.Trainer.ByteFallback {
		for b, ok := range bytesSeen {
			if !ok {
				return fmt.Errorf("byte_fallback is on but piece <0x%02X> is missing", b)
			}
		}
	}
	return nil
}

func isReserved(t PieceType) bool { return t == Unknown || t == Control || t == Byte }

func checkPiece(id int, p Piece, byteFallback bool, reserved map[string]bool, bytesSeen *[256]bool) error {
	switch {
	case p.Text == "":
		return fmt.Errorf("piece %d is empty", id)
	case len(p.Text) >= maxPieceBytes:
		return fmt.Errorf("piece %d is %d bytes long", id, len(p.Text))
	case strings.IndexByte(p.Text, 0) >= 0:
		return fmt.Errorf("piece %d %q contains NUL", id, p.Text)
	case p.Type < Normal || p.Type > Byte:
		return fmt.Errorf("piece %d %q has invalid type %d", id, p.Text, int32(p.Type))
	}
	if !isReserved(p.Type) {
		return nil
	}
	if reserved[p.Text] {
		return fmt.Errorf("piece %d %q is defined twice", id, p.Text)
	}
	reserved[p.Text] = true
	if p.Type != Byte {
		return nil
	}
	if !byteFallback {
		return fmt.Errorf("byte piece %d %q found although byte_fallback is off", id, p.Text)
	}
	b, ok := pieceToByte(p.Text)
	if !ok {
		return fmt.Errorf("byte piece %d %q is not of the form <0xNN>", id, p.Text)
	}
	bytesSeen[b] = true
	return nil
}

// bytePiece returns the sentencepiece name of a byte piece, e.g. "<0x0A>".
func bytePiece(b byte) string {
	const hex = "0123456789ABCDEF"
	return string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
}

// pieceToByte parses "<0xNN>" (upper-case hex, as sentencepiece writes it).
func pieceToByte(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Marshal serializes m as a sentencepiece ModelProto. Every known field is
// written explicitly, so readers never depend on proto2 defaults; fields that
// were read but not interpreted are written back unchanged.
func (m *Model) Marshal() []byte {
	var w wireWriter
	for _, p := range m.Pieces {
		w.bytesField(fieldPieces, marshalPiece(p))
	}
	w.bytesField(fieldTrainerSpec, m.Trainer.marshal())
	w.bytesField(fieldNormalizerSpec, m.Normalizer.marshal())
	w.buf = append(w.buf, m.unknownFields...)
	return w.buf
}

// WriteSentencePiece writes m as spiece.model bytes that ParseModel and
// sentencepiece itself read.
func (m *Model) WriteSentencePiece(w io.Writer) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("write sentencepiece model: %w", err)
	}
	if _, err := w.Write(m.Marshal()); err != nil {
		return fmt.Errorf("write sentencepiece model: %w", err)
	}
	return nil
}

func marshalPiece(p Piece) []byte {
	var w wireWriter
	w.stringField(fieldPieceText, p.Text)
	w.float32Field(fieldPieceScore, p.Score)
	if p.Type != Normal {
		w.int32Field(fieldPieceType, int32(p.Type))
	}
	return w.buf
}

func (s *TrainerSpec) marshal() []byte {
	var w wireWriter
	w.int32Field(fieldModelType, s.ModelType)
	w.int32Field(fieldVocabSize, s.VocabSize)
	w.boolField(fieldSplitByWhitespace, s.SplitByWhitespace)
	w.boolField(fieldTreatWSAsSuffix, s.TreatWhitespaceAsSuffix)
	w.boolField(fieldSplitDigits, s.SplitDigits)
	w.boolField(fieldByteFallback, s.ByteFallback)
	w.int32Field(fieldUnkID, s.UnkID)
	w.int32Field(fieldBosID, s.BosID)
	w.int32Field(fieldEosID, s.EosID)
	w.int32Field(fieldPadID, s.PadID)
	w.stringField(fieldUnkSurface, s.UnkSurface)
	w.stringField(fieldUnkPiece, s.UnkPiece)
	w.stringField(fieldBosPiece, s.BosPiece)
	w.stringField(fieldEosPiece, s.EosPiece)
	w.stringField(fieldPadPiece, s.PadPiece)
	w.buf = append(w.buf, s.unknownFields...)
	return w.buf
}

func (s *NormalizerSpec) marshal() []byte {
	var w wireWriter
	w.stringField(fieldNormName, s.Name)
	if len(s.PrecompiledCharsmap) > 0 {
		w.bytesField(fieldNormCharsmap, s.PrecompiledCharsmap)
	}
	w.boolField(fieldNormDummy, s.AddDummyPrefix)
	w.boolField(fieldNormExtraSpace, s.RemoveExtraWhitespaces)
	w.boolField(fieldNormEscape, s.EscapeWhitespaces)
	w.buf = append(w.buf, s.unknownFields...)
	return w.buf
}

// NewModel builds a unigram model from pieces (ids are their indices; a
// zero Type means NORMAL) and checks it. The trainer spec's VocabSize is set
// to len(pieces) and its ModelType to unigram.
func NewModel(pieces []Piece, trainer TrainerSpec, normalizer NormalizerSpec) (*Model, error) {
	trainer.ModelType = ModelTypeUnigram
	trainer.VocabSize = int32(len(pieces))
	m := &Model{Pieces: append([]Piece(nil), pieces...), Trainer: trainer, Normalizer: normalizer}
	for i := range m.Pieces {
		if m.Pieces[i].Type == 0 {
			m.Pieces[i].Type = Normal
		}
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("new model: %w", err)
	}
	return m, nil
}
