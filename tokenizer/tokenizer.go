package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Tokenizer turns text into the token ids a T5/UMT5 text encoder expects.
// It is safe for concurrent use.
type Tokenizer struct {
	model  *Model
	flavor flavor
	norm   *normalizer // sentencepiece flavor
	hf     *hfPipeline // Hugging Face flavor
	seg    *unigram

	reserved map[string]int32 // sentencepiece: CONTROL/UNKNOWN/BYTE pieces
	added    *addedTokens     // tokens split out of the text before encoding
	prefix   []int32          // special ids put before the text ids
	suffix   []int32          // special ids put after them (</s>)
	eosID    int32            // -1 when unknown
	padID    int32
	slowEOS  bool // T5Tokenizer skips </s> when the ids already end with it
}

// NewTokenizer builds a tokenizer over a sentencepiece model with the
// conventions of transformers' T5Tokenizer(legacy=True): </s> appended, pad
// with <pad>, and </s>, <unk>, <pad> recognized as special tokens in text.
// The tokenizer keeps m; do not modify it afterwards.
func NewTokenizer(m *Model) (*Tokenizer, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	n, err := newNormalizer(m)
	if err != nil {
		return nil, err
	}
	seg := newSentencePieceUnigram(m)
	if d := seg.trie.duplicate; d != "" {
		return nil, fmt.Errorf("piece %q is defined twice", d)
	}
	t := &Tokenizer{model: m, flavor: sentencepieceFlavor, norm: n, seg: seg, slowEOS: true}
	t.reserved = make(map[string]int32)
	for id, p := range m.Pieces {
		if p.Type == Unknown || p.Type == Control || p.Type == Byte {
			t.reserved[p.Text] = int32(id)
		}
	}
	t.applySpecials(defaultSpecials(m))
	return t, nil
}

// LoadSentencePiece reads a spiece.model file.
func LoadSentencePiece(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := decodeModel(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid sentencepiece model: %w", path, err)
	}
	t, err := NewTokenizer(m) // validates
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ReadModelFile reads and decodes a spiece.model file.
func ReadModelFile(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := ParseModel(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid sentencepiece model: %w", path, err)
	}
	return m, nil
}

// Load reads the tokenizer in a Hugging Face tokenizer folder: spiece.model
// when present (what the slow T5Tokenizer uses), else tokenizer.json, plus
// tokenizer_config.json and special_tokens_map.json for the special tokens.
func Load(dir string) (*Tokenizer, error) {
	cfg, err := readFolderConfig(dir)
	if err != nil {
		return nil, err
	}
	var t *Tokenizer
	sp, js := filepath.Join(dir, "spiece.model"), filepath.Join(dir, "tokenizer.json")
	switch {
	case fileExists(sp):
		t, err = LoadSentencePiece(sp)
	case fileExists(js):
		t, err = LoadHF(js)
	default:
		return nil, fmt.Errorf("%s: no spiece.model or tokenizer.json", dir)
	}
	if err != nil {
		return nil, err
	}
	if err := t.applyConfig(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return t, nil
}

// FollowFast makes EncodeForModel end the ids as T5TokenizerFast does: its
// post-processor appends </s> always, where the slow T5Tokenizer leaves it
// out after ids that already end with it (a text ending in "</s>").
func (t *Tokenizer) FollowFast() { t.slowEOS = false }

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// Encode returns the ids of the pieces of text: normalization and unigram
// segmentation only, no special tokens and no splitting on them. For a
// sentencepiece model this is SentencePieceProcessor.encode(text).
func (t *Tokenizer) Encode(text string) []int32 {
	return t.encodeChunk(nil, text, true)
}

// EncodePieces is Encode returning piece strings; an unknown run without
// byte fallback is reported as its normalized text, as sentencepiece does.
func (t *Tokenizer) EncodePieces(text string) []string {
	var pieces []string
	t.eachWord(text, true, func(word string) {
		spans := t.seg.segment(word, nil)
		pieces = t.seg.appendPieces(pieces, word, spans)
	})
	return pieces
}

// encodeChunk appends the ids of one stretch of text that holds no special
// token; atStart says whether it begins the original text.
func (t *Tokenizer) encodeChunk(ids []int32, text string, atStart bool) []int32 {
	var spans []span
	t.eachWord(text, atStart, func(word string) {
		spans = t.seg.segment(word, spans[:0])
		ids = t.seg.appendIDs(ids, word, spans)
	})
	return ids
}

// eachWord calls fn with each normalized unit the segmenter works on: the
// whole normalized text for sentencepiece, the pre-tokenized words for a
// tokenizer.json pipeline.
func (t *Tokenizer) eachWord(text string, atStart bool, fn func(string)) {
	if t.flavor == sentencepieceFlavor {
		if s := t.norm.normalize(text); s != "" {
			fn(s)
		}
		return
	}
	for _, w := range t.hf.words(text, atStart) {
		fn(w)
	}
}

// EncodeForModel reproduces what a transformers T5 tokenizer returns for
// tokenizer(text, padding="max_length", max_length=maxLen, truncation=True,
// add_special_tokens=True, return_attention_mask=True): special tokens
// written in the text are recognized, the ids are cut so that they and the
// appended </s> fit in maxLen, then padded with the pad id. mask is 1 for
// real tokens and 0 for padding. maxLen <= 0 means no truncation or padding.
func (t *Tokenizer) EncodeForModel(text string, maxLen int) (ids, mask []int32) {
	for _, c := range t.added.split(text) {
		if c.id >= 0 {
			ids = append(ids, c.id)
		} else {
			ids = t.encodeChunk(ids, c.text, c.offset == 0)
		}
	}
	ids = t.addSpecials(ids, maxLen)
	mask = make([]int32, len(ids), max(len(ids), maxLen))
	for i := range mask {
		mask[i] = 1
	}
	for len(ids) < maxLen {
		ids = append(ids, t.padID)
		mask = append(mask, 0)
	}
	return ids, mask
}

// addSpecials truncates ids so that they fit maxLen together with the
// special tokens, then adds those (prepare_for_model's order).
func (t *Tokenizer) addSpecials(ids []int32, maxLen int) []int32 {
	nSpecial := len(t.prefix) + len(t.suffix)
	if maxLen > 0 && len(ids)+nSpecial > maxLen {
		ids = ids[:max(0, maxLen-nSpecial)]
	}
	suffix := t.suffix
	// T5Tokenizer._add_eos_if_not_present: no second </s>.
	if t.slowEOS && len(ids) > 0 && len(suffix) == 1 && ids[len(ids)-1] == suffix[0] {
		suffix = nil
	}
	out := make([]int32, 0, max(maxLen, len(ids)+nSpecial))
	out = append(out, t.prefix...)
	out = append(out, ids...)
	out = append(out, suffix...)
	if maxLen > 0 && len(out) > maxLen {
		out = out[:maxLen]
	}
	return out
}

// Decode turns ids back into text the way sentencepiece's DecodeIds does:
// control tokens vanish, <unk> prints as the model's unk surface (" ⁇ "),
// byte pieces are reassembled into UTF-8 (invalid bytes become U+FFFD),
// "▁" becomes a space and the leading space is dropped. Ids outside the
// vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	var out strings.Builder
	var bytes []byte
	atStart, sawSpace := true, false
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.model.Pieces) {
			continue
		}
		p := t.model.Pieces[id]
		if p.Type == Byte {
			bytes = append(bytes, p.Text[3:5]...)
			continue
		}
		bytes = flushBytes(&out, bytes)
		if sawSpace || out.Len() > 0 {
			atStart = false
		}
		var text string
		text, sawSpace = t.decodePiece(p, atStart)
		out.WriteString(text)
	}
	flushBytes(&out, bytes)
	return out.String()
}

// decodePiece is DecodeSentencePiece in sentencepiece_processor.cc.
func (t *Tokenizer) decodePiece(p Piece, atStart bool) (text string, consumedSpace bool) {
	switch p.Type {
	case Control:
		return "", false
	case Unknown:
		return t.model.Trainer.UnkSurface, false
	}
	s := p.Text
	spec := t.model.Normalizer
	if atStart && (spec.AddDummyPrefix || spec.RemoveExtraWhitespaces) {
		s, consumedSpace = strings.CutPrefix(s, spaceSymbol)
		if spec.RemoveExtraWhitespaces {
			consumedSpace = false // keep dropping leading spaces
		}
	}
	return strings.ReplaceAll(s, spaceSymbol, " "), consumedSpace
}

// flushBytes writes the bytes collected from <0xNN> pieces (kept as hex
// digit pairs) as UTF-8, one U+FFFD per invalid byte.
func flushBytes(out *strings.Builder, hexPairs []byte) []byte {
	raw := make([]byte, 0, len(hexPairs)/2)
	for i := 0; i+1 < len(hexPairs); i += 2 {
		hi, _ := hexDigit(hexPairs[i])
		lo, _ := hexDigit(hexPairs[i+1])
		raw = append(raw, hi<<4|lo)
	}
	for len(raw) > 0 {
		r, size := utf8.DecodeRune(raw)
		if r == utf8.RuneError && size == 1 {
			out.WriteString("\uFFFD")
		} else {
			out.Write(raw[:size])
		}
		raw = raw[size:]
	}
	return hexPairs[:0]
}

// VocabSize is the number of pieces in the model (sentencepiece's
// GetPieceSize); added tokens with larger ids are not counted.
func (t *Tokenizer) VocabSize() int { return len(t.model.Pieces) }

// PieceToID returns the id of a piece or added token.
func (t *Tokenizer) PieceToID(piece string) (int32, bool) {
	if id, ok := t.reserved[piece]; ok {
		return id, true
	}
	if id := t.seg.trie.lookup(piece); id >= 0 {
		return id, true
	}
	if tok, ok := t.added.byContent(piece); ok {
		return tok.id, true
	}
	return -1, false
}

// IDToPiece returns the piece string of id, or "" when id is out of range.
func (t *Tokenizer) IDToPiece(id int32) string {
	if id < 0 || int(id) >= len(t.model.Pieces) {
		if tok, ok := t.added.byID(id); ok {
			return tok.content
		}
		return ""
	}
	return t.model.Pieces[id].Text
}

// Model returns the sentencepiece model behind the tokenizer; for a
// tokenizer.json it is the equivalent model built from its vocabulary.
func (t *Tokenizer) Model() *Model { return t.model }

// EOSID returns the id appended after the text ids, or -1.
func (t *Tokenizer) EOSID() int32 { return t.eosID }

// PadID returns the id used for padding.
func (t *Tokenizer) PadID() int32 { return t.padID }

// UnkID returns the id of the unknown piece.
func (t *Tokenizer) UnkID() int32 { return t.seg.unkID }

// specials names the special tokens of a tokenizer; an empty name means none.
type specials struct {
	eos, pad, unk string
	added         []addedToken // explicit added tokens (ids known)
	extraIDs      int          // T5's <extra_id_N> tokens, when not listed
	additional    []string     // additional_special_tokens
}

// defaultSpecials are T5Tokenizer's defaults over the model's own pieces.
func defaultSpecials(m *Model) specials {
	s := specials{unk: m.Trainer.UnkPiece}
	if id := m.Trainer.EosID; id >= 0 && int(id) < len(m.Pieces) && m.Pieces[id].Type == Control {
		s.eos = m.Pieces[id].Text
	}
	if id := m.Trainer.PadID; id >= 0 && int(id) < len(m.Pieces) && m.Pieces[id].Type == Control {
		s.pad = m.Pieces[id].Text
	}
	return s
}

// applySpecials sets the added tokens, </s> and pad ids from s.
func (t *Tokenizer) applySpecials(s specials) {
	toks := s.added
	switch {
	case t.flavor == huggingFaceFlavor:
		// tokenizer.json's own list comes first and wins on duplicates.
		toks = append(append([]addedToken(nil), t.hf.added...), toks...)
	case len(toks) == 0:
		toks = t.implicitAddedTokens(s)
	}
	t.added = newAddedTokens(toks)
	t.eosID, t.padID = -1, 0
	if id, ok := t.PieceToID(s.eos); ok && s.eos != "" {
		t.eosID = id
	}
	if id, ok := t.PieceToID(s.pad); ok && s.pad != "" {
		t.padID = id
	}
	t.prefix, t.suffix = nil, nil
	if t.flavor == huggingFaceFlavor && t.hf.template != nil {
		t.prefix, t.suffix = t.hf.template.prefix, t.hf.template.suffix
	} else if t.eosID >= 0 {
		t.suffix = []int32{t.eosID}
	}
}

// implicitAddedTokens lists the tokens T5Tokenizer registers when the
// config gives no added_tokens_decoder: eos/unk/pad and additional special
// tokens found in the vocabulary, and the <extra_id_N> sentinels, which it
// numbers vocab_size-1+extra_ids-N whether or not they are listed.
func (t *Tokenizer) implicitAddedTokens(s specials) []addedToken {
	var toks []addedToken
	listedExtra := 0
	for _, name := range append([]string{s.eos, s.unk, s.pad}, s.additional...) {
		if strings.HasPrefix(name, "<extra_id_") {
			listedExtra++
			continue
		}
		if id, ok := t.lookupPiece(name); ok && name != "" {
			toks = append(toks, addedToken{content: name, id: id, special: true})
		}
	}
	extra := s.extraIDs
	if listedExtra > 0 {
		extra = listedExtra
	}
	n := int32(len(t.model.Pieces))
	for i := 0; i < extra; i++ {
		toks = append(toks, addedToken{content: fmt.Sprintf("<extra_id_%d>", i),
			id: n - 1 + int32(s.extraIDs-i), lstrip: true, rstrip: true, special: true})
	}
	return toks
}

// lookupPiece finds a piece in the vocabulary only (not among added tokens).
func (t *Tokenizer) lookupPiece(piece string) (int32, bool) {
	if id, ok := t.reserved[piece]; ok {
		return id, true
	}
	if id := t.seg.trie.lookup(piece); id >= 0 {
		return id, true
	}
	return -1, false
}
