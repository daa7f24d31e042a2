package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// TestSpecialTokensInText: T5Tokenizer splits registered special tokens
// out of the text before sentencepiece sees it, and does not append a
// second </s> when the ids already end with one (_add_eos_if_not_present);
// tokenizers' TemplateProcessing always appends it.
func TestSpecialTokensInText(t *testing.T) {
	sp := loadGolden(t, "umt5style")
	hf, err := LoadHF(writeHF(t, sp.Model()))
	if err != nil {
		t.Fatal(err)
	}
	a := sp.Encode("a") // [268]: "▁a"
	cases := []struct {
		text   string
		sp, hf []int32
	}{
		{"<unk> </s> <pad>", []int32{2, 1, 0, 1}, []int32{2, 1, 0, 1}},
		{"a</s>", append(slices.Clone(a), 1), append(slices.Clone(a), 1, 1)},
		{"</s>a", append([]int32{1}, append(slices.Clone(a), 1)...), append([]int32{1}, append(slices.Clone(a), 1)...)},
	}
	for _, c := range cases {
		if got, _ := sp.EncodeForModel(c.text, 0); !slices.Equal(got, c.sp) {
			t.Errorf("sentencepiece %q: %v, want %v", c.text, got, c.sp)
		}
		if got, _ := hf.EncodeForModel(c.text, 0); !slices.Equal(got, c.hf) {
			t.Errorf("tokenizer.json %q: %v, want %v", c.text, got, c.hf)
		}
	}
	// Encode alone never splits special tokens (sentencepiece's encode).
	if got := sp.Encode("</s>"); slices.Contains(got, 1) {
		t.Errorf("Encode(</s>) = %v contains </s>", got)
	}
	// Following T5TokenizerFast, the spiece.model ends its ids as the
	// tokenizer.json does.
	sp.FollowFast()
	for _, c := range cases {
		if got, _ := sp.EncodeForModel(c.text, 0); !slices.Equal(got, c.hf) {
			t.Errorf("sentencepiece following the fast tokenizer %q: %v, want %v", c.text, got, c.hf)
		}
	}
}

// TestTruncation checks prepare_for_model's order: cut the ids so that they
// and </s> fit max_length, append </s>, pad.
func TestTruncation(t *testing.T) {
	tok := loadGolden(t, "umt5style")
	text := strings.Repeat("a", 40)
	full := tok.Encode(text)
	if len(full) != 40 {
		t.Fatalf("Encode gave %d ids, want 40", len(full))
	}
	ones := func(n int) []int32 { return slices.Repeat([]int32{1}, n) }
	zeros := func(n int) []int32 { return make([]int32, n) }
	cases := []struct {
		text     string
		maxLen   int
		ids      []int32
		mask     []int32
		describe string
	}{
		{text, 32, append(slices.Clone(full[:31]), 1), ones(32), "cut to 31 + </s>"},
		{text, 41, append(slices.Clone(full), 1), ones(41), "exact fit"},
		{text, 44, append(append(slices.Clone(full), 1), zeros(3)...), append(ones(41), zeros(3)...), "padded"},
		{text, 1, []int32{1}, ones(1), "only </s>"},
		{"", 3, []int32{1, 0, 0}, []int32{1, 0, 0}, "empty text"},
		// The cut leaves </s> last, so T5Tokenizer adds no second one.
		{"a</s>a a", 3, []int32{full[0], 1, 0}, []int32{1, 1, 0}, "cut ends in </s>"},
	}
	for _, c := range cases {
		ids, mask := tok.EncodeForModel(c.text, c.maxLen)
		if !slices.Equal(ids, c.ids) || !slices.Equal(mask, c.mask) {
			t.Errorf("%s: ids %v mask %v, want %v %v", c.describe, ids, mask, c.ids, c.mask)
		}
	}
}

// TestTieBreak: with equal path scores sentencepiece keeps the path whose
// last piece starts earliest (candidates replace only when strictly better).
func TestTieBreak(t *testing.T) {
	pieces := []Piece{{Text: "<unk>", Type: Unknown}, {Text: "a", Score: -1}, {Text: "b", Score: -1}, {Text: "ab", Score: -2}}
	spec := NormalizerSpec{Name: "identity", RemoveExtraWhitespaces: true, EscapeWhitespaces: true}
	m, err := NewModel(pieces, DefaultTrainerSpec(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewTokenizer(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("ab"); !slices.Equal(got, []int32{3}) {
		t.Errorf("Encode(ab) = %v, want [3]", got)
	}
	// With "ab" worse by the smallest step the split wins.
	m.Pieces[3].Score = -2.0000002
	if tok, err = NewTokenizer(m); err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("ab"); !slices.Equal(got, []int32{1, 2}) {
		t.Errorf("Encode(ab) = %v, want [1 2]", got)
	}
}

// TestUnknownRuns: without byte fallback, a run of unknown characters is one
// <unk>; with it, each byte of the run is a byte piece.
func TestUnknownRuns(t *testing.T) {
	m := tinyModel(t)
	tok, err := NewTokenizer(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.EncodePieces("a€€b"); !slices.Equal(got, []string{"\u2581a", "€€", "b"}) {
		t.Errorf("pieces %q", got)
	}
	if got := tok.Encode("a€€b"); !slices.Equal(got, []int32{7, 2, 5}) {
		t.Errorf("ids %v", got)
	}
	if got := tok.Decode([]int32{7, 2, 5}); got != "a \u2047 b" {
		t.Errorf("decode %q", got)
	}
}

// TestUserDefined: a USER_DEFINED piece is matched whole wherever it occurs
// and escapes normalization.
func TestUserDefined(t *testing.T) {
	pieces := []Piece{
		{Text: "<unk>", Type: Unknown}, {Text: "\u2581", Score: -1}, {Text: "x", Score: -1},
		{Text: "ﬁ<sep>", Type: UserDefined}, {Text: "f", Score: -1}, {Text: "i", Score: -1},
		{Text: "\u2581x", Score: -0.5}, {Text: "xﬁ", Score: 0},
	}
	spec := DefaultNormalizerSpec()
	spec.Name = "nfkc" // no charsmap: x/text NFKC would turn "ﬁ" into "fi"
	m, err := NewModel(pieces, DefaultTrainerSpec(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewTokenizer(m)
	if err != nil {
		t.Fatal(err)
	}
	// "ﬁ<sep>" is kept unnormalized and matched whole, although the normal
	// piece "xﬁ" scores better than "▁x"; the lone "ﬁ" becomes "fi".
	if got := tok.EncodePieces("xﬁ<sep>ﬁ"); !slices.Equal(got, []string{"\u2581x", "ﬁ<sep>", "f", "i"}) {
		t.Errorf("pieces %q", got)
	}
}

// TestFallbackNormalizer compares the x/text NFKC fallback with the golden
// model's compiled nmt_nfkc rules on every case text and a few more.
func TestFallbackNormalizer(t *testing.T) {
	m, err := ParseModel(readGoldenModel(t, "umt5style"))
	if err != nil {
		t.Fatal(err)
	}
	precompiled, err := newNormalizer(m)
	if err != nil {
		t.Fatal(err)
	}
	m.Normalizer.PrecompiledCharsmap = nil
	fallback, err := newNormalizer(m)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"ｶﾞｷﾞ", "①②", "Å Å", "ﾊﾟﾝ", "\x01ctrl\x7f", "a\u00a0\u2003b", "x\xffy", "～", "㍻", "ＡＢＣ"}
	for _, c := range readCases(t, "umt5style") {
		texts = append(texts, c.Text)
	}
	for _, text := range texts {
		want, got := precompiled.normalize(text), fallback.normalize(text)
		if got != want {
			t.Errorf("%q: fallback %q, precompiled %q", text, got, want)
		}
	}
}

// TestSyntheticFolder builds a UMT5-style model, writes it as a tokenizer
// folder and reads it back.
func TestSyntheticFolder(t *testing.T) {
	words := []Piece{{Text: "\u2581", Score: -3}, {Text: "\u2581cat", Score: -2}, {Text: "\u2581the", Score: -2}, {Text: "s", Score: -3}}
	charsmap := loadGolden(t, "umt5style").Model().Normalizer.PrecompiledCharsmap
	for _, cm := range [][]byte{nil, charsmap} {
		m, err := NewUMT5StyleModel(words, cm)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "tokenizer")
		if err := m.WriteFolder(dir); err != nil {
			t.Fatal(err)
		}
		tok, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		ids, mask := tok.EncodeForModel("the ＣＡＴＳ cats", 8)
		// "▁the", "▁" + bytes of "CATS" (NFKC of the full-width letters),
		// "▁cat", "s", </s>; cut to 7 + </s>.
		want := []int32{261, 259, 3 + 'C', 3 + 'A', 3 + 'T', 3 + 'S', 260, 1}
		if !slices.Equal(ids, want) || slices.Contains(mask, 0) {
			t.Errorf("charsmap %d bytes: ids %v mask %v, want %v", len(cm), ids, mask, want)
		}
		if got := tok.Decode(tok.Encode("the CATS cats")); got != "the CATS cats" {
			t.Errorf("round trip %q", got)
		}
		if tok.VocabSize() != 263 || tok.EOSID() != 1 || tok.PadID() != 0 || tok.UnkID() != 2 {
			t.Errorf("vocab %d eos %d pad %d unk %d", tok.VocabSize(), tok.EOSID(), tok.PadID(), tok.UnkID())
		}
	}
}

// TestConfigOverrides: tokenizer_config.json can rename </s> and the pad token.
func TestConfigOverrides(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, filepath.Join("testdata", "umt5style", "spiece.model"), filepath.Join(dir, "spiece.model"))
	cfg := `{"eos_token": {"content": "<unk>"}, "pad_token": "</s>", "extra_ids": 2}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.EncodeForModel("a <extra_id_0> a", 6)
	// <extra_id_0> is id vocab-1+2 = 601 and strips the spaces around it.
	want := []int32{268, 601, 268, 2, 1, 1}
	if !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	// Sentinels listed with extra_ids 0 are numbered down from the last piece.
	cfg = `{"additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"], "extra_ids": 0}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if tok, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if ids, _ = tok.EncodeForModel("<extra_id_1><extra_id_0>", 0); !slices.Equal(ids, []int32{598, 599, 1}) {
		t.Errorf("listed sentinels: ids %v, want [598 599 1]", ids)
	}
	if err := os.WriteFile(filepath.Join(dir, "special_tokens_map.json"), []byte(`{"eos_token": "<nope>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Error("unknown eos_token: no error")
	}
	if err := os.WriteFile(filepath.Join(dir, "special_tokens_map.json"), []byte(`{"eos_token": 5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "special_tokens_map.json") {
		t.Errorf("bad special_tokens_map.json: %v", err)
	}
}

// FuzzEncode checks, on the byte-fallback golden model, that any text
// encodes to in-vocabulary ids and decodes back to its normalized form.
func FuzzEncode(f *testing.F) {
	for _, c := range readCases(f, "umt5style") {
		f.Add(c.Text)
	}
	f.Add("\xff\xfe bad utf8 \xe2\x96")
	tok := loadGolden(f, "umt5style")
	f.Fuzz(func(t *testing.T, text string) {
		ids := tok.Encode(text)
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() || id == tok.UnkID() {
				t.Fatalf("id %d: outside the vocabulary or <unk> despite byte fallback", id)
			}
		}
		want := strings.ReplaceAll(tok.norm.normalize(text), spaceSymbol, " ")
		want = strings.TrimPrefix(want, " ")
		if got := tok.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", text, got, want)
		}
		if !utf8.ValidString(want) {
			t.Fatalf("normalized text %q is not valid UTF-8", want)
		}
		ids, mask := tok.EncodeForModel(text, 16)
		if len(ids) != 16 || len(mask) != 16 {
			t.Fatalf("EncodeForModel lengths %d %d", len(ids), len(mask))
		}
	})
}

// TestConcurrentEncode shares one tokenizer between goroutines (run with
// -race to check the scratch-buffer pool).
func TestConcurrentEncode(t *testing.T) {
	tok := loadGolden(t, "umt5style")
	cases := readCases(t, "umt5style")
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range cases {
				if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) && len(got)+len(c.IDs) > 0 {
					t.Errorf("%q: %v, want %v", c.Text, got, c.IDs)
				}
			}
		}()
	}
	wg.Wait()
}

func TestLookups(t *testing.T) {
	m, err := ReadModelFile(filepath.Join("testdata", "t5style", "spiece.model"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewTokenizer(m)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id    int32
		piece string
		typ   PieceType
	}{{0, "<pad>", Control}, {1, "</s>", Control}, {2, "<unk>", Unknown}, {13, "\u2581a", Normal}}
	for _, c := range cases {
		if got := tok.IDToPiece(c.id); got != c.piece {
			t.Errorf("IDToPiece(%d) = %q, want %q", c.id, got, c.piece)
		}
		if got := m.Pieces[c.id].Type; got != c.typ {
			t.Errorf("piece %d type %v, want %v", c.id, got, c.typ)
		}
	}
	if got := tok.IDToPiece(-1) + tok.IDToPiece(400); got != "" {
		t.Errorf("out-of-range IDToPiece = %q", got)
	}
	if _, ok := tok.PieceToID("no such piece"); ok {
		t.Error("PieceToID found a missing piece")
	}
	if s := Byte.String() + PieceType(9).String(); s != "BYTEPieceType(9)" {
		t.Errorf("PieceType strings %q", s)
	}
	if _, err := ReadModelFile(filepath.Join("testdata", "t5style", "cases.json")); err == nil {
		t.Error("ReadModelFile of a JSON file: no error")
	}
}
