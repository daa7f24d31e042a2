package tokenizer

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func readGoldenModel(t testing.TB, model string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", model, "spiece.model"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestModelRoundTrip writes each golden model back out and checks that the
// result decodes to the same model, serializes to the same bytes again, and
// still encodes every case to the golden ids.
func TestModelRoundTrip(t *testing.T) {
	for _, model := range goldenModels {
		m, err := ParseModel(readGoldenModel(t, model))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := m.WriteSentencePiece(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := ParseModel(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, back) {
			t.Errorf("%s: model changed in a write/read round trip", model)
		}
		if again := back.Marshal(); !bytes.Equal(again, buf.Bytes()) {
			t.Errorf("%s: second serialization differs from the first", model)
		}
		tok, err := NewTokenizer(back)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range readCases(t, model) {
			if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) && len(got)+len(c.IDs) > 0 {
				t.Errorf("%s %q after round trip: %v, want %v", model, c.Text, got, c.IDs)
			}
		}
	}
}

// TestModelSpecFields checks the decoded specs against the values the
// golden models were trained with (manifest.json, tokenizer_* training).
func TestModelSpecFields(t *testing.T) {
	for _, c := range []struct {
		model        string
		vocab        int32
		byteFallback bool
	}{{"t5style", 400, false}, {"umt5style", 600, true}} {
		m, err := ParseModel(readGoldenModel(t, c.model))
		if err != nil {
			t.Fatal(err)
		}
		tr, nm := m.Trainer, m.Normalizer
		if tr.ModelType != ModelTypeUnigram || tr.VocabSize != c.vocab || tr.ByteFallback != c.byteFallback ||
			tr.PadID != 0 || tr.EosID != 1 || tr.UnkID != 2 || tr.BosID != -1 {
			t.Errorf("%s: trainer spec %+v", c.model, tr)
		}
		if nm.Name != "nmt_nfkc" || len(nm.PrecompiledCharsmap) == 0 || !nm.AddDummyPrefix ||
			!nm.RemoveExtraWhitespaces || !nm.EscapeWhitespaces {
			t.Errorf("%s: normalizer spec %q, charsmap %d bytes, %v %v %v", c.model, nm.Name,
				len(nm.PrecompiledCharsmap), nm.AddDummyPrefix, nm.RemoveExtraWhitespaces, nm.EscapeWhitespaces)
		}
	}
}

// TestUnknownFieldsKept checks that fields this package does not interpret
// survive a round trip byte for byte.
func TestUnknownFieldsKept(t *testing.T) {
	m := tinyModel(t)
	var w wireWriter
	w.buf = m.Marshal()
	w.stringField(4, "self test data")    // ModelProto.self_test_data
	w.varintField(300, 7)                 // an extension
	trainerExtra := []byte{0xa0, 0x1f, 5} // TrainerSpec field 500, varint 5
	back, err := ParseModel(w.buf)
	if err != nil {
		t.Fatal(err)
	}
	back.Trainer.unknownFields = append(back.Trainer.unknownFields, trainerExtra...)
	out := back.Marshal()
	for _, want := range [][]byte{[]byte("self test data"), {0xe0, 0x12, 7}, trainerExtra} {
		if !bytes.Contains(out, want) {
			t.Errorf("serialized model lost field bytes %x", want)
		}
	}
	again, err := ParseModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Trainer.unknownFields, trainerExtra) {
		t.Errorf("trainer unknown fields %x, want %x", again.Trainer.unknownFields, trainerExtra)
	}
}

// TestProtoDefaults decodes a model that sets no spec fields at all: the
// proto2 defaults apply (add_dummy_prefix etc. true, unk_id 0).
func TestProtoDefaults(t *testing.T) {
	var w wireWriter
	w.bytesField(fieldPieces, marshalPiece(Piece{Text: "<unk>", Type: Unknown}))
	w.bytesField(fieldPieces, marshalPiece(Piece{Text: "\u2581a", Score: -1, Type: Normal}))
	m, err := ParseModel(w.buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Trainer, DefaultTrainerSpec()) || !reflect.DeepEqual(m.Normalizer, DefaultNormalizerSpec()) {
		t.Errorf("defaults: %+v %+v", m.Trainer, m.Normalizer)
	}
	tok, err := NewTokenizer(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(" a "); !slices.Equal(got, []int32{1}) {
		t.Errorf("Encode(\" a \") = %v, want [1]", got)
	}
}

// tinyModel is a small valid model: <unk>, </s>, "▁", a few letters.
func tinyModel(t testing.TB) *Model {
	t.Helper()
	pieces := []Piece{
		{Text: "<pad>", Type: Control}, {Text: "</s>", Type: Control}, {Text: "<unk>", Type: Unknown},
		{Text: "\u2581", Score: -2}, {Text: "a", Score: -1}, {Text: "b", Score: -1}, {Text: "ab", Score: -2},
		{Text: "\u2581a", Score: -1.5},
	}
	tr := DefaultTrainerSpec()
	tr.PadID, tr.EosID, tr.UnkID, tr.BosID = 0, 1, 2, -1
	m, err := NewModel(pieces, tr, DefaultNormalizerSpec())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseModelErrors(t *testing.T) {
	valid := tinyModel(t)
	piece := func(p Piece) []byte {
		var w wireWriter
		w.bytesField(fieldPieces, marshalPiece(p))
		return w.buf
	}
	withPieces := func(extra ...Piece) []byte {
		m := *valid
		m.Pieces = append(slices.Clone(m.Pieces), extra...)
		return m.Marshal()
	}
	withTrainer := func(f func(*TrainerSpec)) []byte {
		m := *valid
		f(&m.Trainer)
		return m.Marshal()
	}
	cases := map[string][]byte{
		"truncated varint":   {0x0a, 0x80},
		"length past end":    {0x0a, 0x7f, 1, 2},
		"field number zero":  {0x00, 1},
		"wire type 7":        {0x0f},
		"pieces as varint":   {0x08, 1},
		"score as varint":    append(piece(Piece{Text: "x", Type: Unknown}), 0x0a, 2, 0x10, 1),
		"unclosed group":     {0x0b, 0x10, 1},
		"mismatched group":   {0x0b, 0x14},
		"overlong varint":    {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"no pieces":          {},
		"empty piece":        withPieces(Piece{Text: "", Type: Normal}),
		"duplicate piece":    withPieces(Piece{Text: "a", Type: Normal}),
		"second unknown":     withPieces(Piece{Text: "<unk2>", Type: Unknown}),
		"piece type 9":       withPieces(Piece{Text: "z", Type: 9}),
		"piece with NUL":     withPieces(Piece{Text: "z\x00", Type: Normal}),
		"byte without flag":  withPieces(Piece{Text: "<0x41>", Type: Byte}),
		"bpe model":          withTrainer(func(s *TrainerSpec) { s.ModelType = 2 }),
		"bytes incomplete":   withTrainer(func(s *TrainerSpec) { s.ByteFallback = true }),
		"no unknown piece":   piece(Piece{Text: "a", Type: Normal}),
		"trainer wrong type": append(slices.Clone(valid.Marshal()), 0x12, 2, 0x1a, 0x00),
	}
	for name, data := range cases {
		if _, err := ParseModel(data); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// A bad charsmap is found when the tokenizer is built.
	m := *valid
	m.Normalizer.PrecompiledCharsmap = []byte{0xff, 0xff, 0, 0, 1, 2}
	if _, err := NewTokenizer(&m); err == nil {
		t.Error("oversized charsmap trie: no error")
	}
}

func TestLoadSentencePieceErrorNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spiece.model")
	if err := os.WriteFile(path, []byte{0x0a, 0x7f}, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadSentencePiece(path)
	if err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %v does not name %s on one line", err, path)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty folder: no error")
	}
}

// FuzzLoadModel feeds arbitrary bytes to the model decoder: it must return
// an error or a model that builds a tokenizer and encodes without panicking.
func FuzzLoadModel(f *testing.F) {
	f.Add(tinyModel(f).Marshal())
	f.Add(charsmapModel(f).Marshal())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseModel(data)
		if err != nil {
			return
		}
		tok, err := NewTokenizer(m)
		if err != nil {
			return
		}
		for _, text := range []string{"ab a", "\u2581x\xff", "ﬁ  \t"} {
			ids := tok.Encode(text)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d outside vocabulary of %d", id, tok.VocabSize())
				}
			}
			tok.Decode(ids)
			tok.EncodeForModel(text, 8)
		}
		if _, err := ParseModel(m.Marshal()); err != nil {
			t.Fatalf("re-serialized model does not parse: %v", err)
		}
	})
}

// handCharsmap is a precompiled_charsmap built by hand with one rule,
// "a" -> "b", to test the double-array reader independently of the golden
// models: root offset 1, the unit for 'a' at 1^0x61 = 96 with a leaf, its
// value unit at 96^1 = 97 pointing at offset 0 of "b\x00".
func handCharsmap() []byte {
	units := make([]uint32, 98)
	units[0] = 1 << 10
	units[96] = 0x61 | 1<<8 | 1<<10
	units[97] = 1<<31 | 0
	blob := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		blob = binary.LittleEndian.AppendUint32(blob, u)
	}
	return append(blob, 'b', 0)
}

func charsmapModel(t testing.TB) *Model {
	m := tinyModel(t)
	m.Normalizer.Name = "hand"
	m.Normalizer.PrecompiledCharsmap = handCharsmap()
	return m
}

func TestHandCharsmap(t *testing.T) {
	tok, err := NewTokenizer(charsmapModel(t))
	if err != nil {
		t.Fatal(err)
	}
	// "a" is rewritten to "b"; "▁b" is not a piece, so "▁" and "b".
	if got := tok.EncodePieces("a ab"); !slices.Equal(got, []string{"\u2581", "b", "\u2581", "b", "b"}) {
		t.Errorf("pieces %q", got)
	}
}
