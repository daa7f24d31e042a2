package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// hfPipeline is the part of a tokenizer.json around its Unigram model:
// normalizers, pre-tokenizers, post-processor template and added tokens.
type hfPipeline struct {
	normalizers []func(string) string
	pretok      []func([]hfWord) []hfWord
	template    *hfTemplate
	added       []addedToken
	specials    specials
}

// hfWord is a pre-tokenized word; atStart says whether it begins the text
// (Metaspace's prepend_scheme "first" looks at that).
type hfWord struct {
	text    string
	atStart bool
}

// hfTemplate is the single-sequence template of the post-processor.
type hfTemplate struct{ prefix, suffix []int32 }

// words normalizes and pre-tokenizes one stretch of text.
func (p *hfPipeline) words(text string, atStart bool) []string {
	s := validUTF8(text)
	for _, f := range p.normalizers {
		s = f(s)
	}
	ws := []hfWord{{s, atStart}}
	for _, f := range p.pretok {
		ws = f(ws)
	}
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		if w.text != "" {
			out = append(out, w.text)
		}
	}
	return out
}

// JSON shapes of tokenizer.json.
type hfFileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Model         hfModelJSON      `json:"model"`
}

type hfModelJSON struct {
	Type         string          `json:"type"`
	UnkID        *int            `json:"unk_id"`
	RawVocab     json.RawMessage `json:"vocab"`
	ByteFallback bool            `json:"byte_fallback"`

	Vocab []hfVocabJSON `json:"-"` // parsed from RawVocab by parseVocab
}

// hfVocabJSON is one ["piece", score] pair.
type hfVocabJSON struct {
	piece string
	score float64
}

// hfComponentJSON holds every field the supported components use.
type hfComponentJSON struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Charsmap      *string           `json:"precompiled_charsmap"`
	Pattern       struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content        string                     `json:"content"`
	StripLeft      *bool                      `json:"strip_left"`
	StripRight     *bool                      `json:"strip_right"`
	Prepend        string                     `json:"prepend"`
	Replacement    string                     `json:"replacement"`
	PrependScheme  string                     `json:"prepend_scheme"`
	AddPrefixSpace *bool                      `json:"add_prefix_space"`
	Split          *bool                      `json:"split"`
	Single         []json.RawMessage          `json:"single"`
	SpecialTokens  map[string]hfSpecialIDJSON `json:"special_tokens"`
	Sep            []json.RawMessage          `json:"sep"`
	Cls            []json.RawMessage          `json:"cls"`
}

type hfSpecialIDJSON struct {
	IDs []int32 `json:"ids"`
}

// LoadHF reads a Hugging Face tokenizer.json whose model is Unigram.
func LoadHF(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := parseHF(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func parseHF(data []byte) (*Tokenizer, error) {
	var f hfFileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a valid tokenizer.json: %w", err)
	}
	if err := checkHFModel(&f.Model); err != nil {
		return nil, err
	}
	p := &hfPipeline{}
	var err error
	var charsmapBlob []byte
	if p.normalizers, charsmapBlob, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	var prepends bool
	if p.pretok, prepends, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if p.template, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	for i, a := range f.AddedTokens {
		if a.ID == nil || *a.ID < 0 {
			return nil, fmt.Errorf("added_tokens[%d] %q has no valid id", i, a.Content)
		}
		p.added = append(p.added, addedToken{content: a.Content, id: *a.ID, lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special})
	}
	m := hfModel(&f.Model, p.added, charsmapBlob, prepends)
	scores := make([]float64, len(f.Model.Vocab))
	for i, v := range f.Model.Vocab {
		scores[i] = v.score
	}
	t := &Tokenizer{model: m, flavor: huggingFaceFlavor, hf: p}
	t.seg = newHFUnigram(m.Pieces, scores, int32(*f.Model.UnkID), f.Model.ByteFallback)
	p.specials = hfDefaultSpecials(t, m)
	t.applySpecials(p.specials)
	return t, nil
}

func checkHFModel(m *hfModelJSON) error {
	if m.Type != "Unigram" {
		return fmt.Errorf("model type %q is not supported (only Unigram)", m.Type)
	}
	var err error
	if m.Vocab, err = parseVocab(m.RawVocab); err != nil {
		return fmt.Errorf("Unigram vocab: %w", err)
	}
	if len(m.Vocab) == 0 {
		return errors.New("Unigram vocab is empty")
	}
	if m.UnkID == nil {
		return errors.New("Unigram model has no unk_id")
	}
	if *m.UnkID < 0 || *m.UnkID >= len(m.Vocab) {
		return fmt.Errorf("unk_id %d is outside the vocab (%d entries)", *m.UnkID, len(m.Vocab))
	}
	for i, v := range m.Vocab {
		if v.piece == "" {
			return fmt.Errorf("vocab entry %d is an empty piece", i)
		}
	}
	return nil
}

// hfModel builds the sentencepiece model equivalent to a tokenizer.json
// vocabulary, so that Decode and WriteSentencePiece work on it too.
func hfModel(j *hfModelJSON, added []addedToken, charsmapBlob []byte, prepends bool) *Model {
	kind := make(map[int32]PieceType)
	for _, a := range added {
		if a.special {
			kind[a.id] = Control
		} else {
			kind[a.id] = UserDefined
		}
	}
	m := &Model{Trainer: DefaultTrainerSpec(), Normalizer: DefaultNormalizerSpec()}
	m.Pieces = make([]Piece, len(j.Vocab))
	bytesSeen := 0
	for i, v := range j.Vocab {
		p := Piece{Text: v.piece, Score: float32(v.score), Type: Normal}
		if k, ok := kind[int32(i)]; ok {
			p.Type = k
		}
		if _, ok := pieceToByte(v.piece); ok && j.ByteFallback {
			p.Type = Byte
			bytesSeen++
		}
		if i == *j.UnkID {
			p.Type = Unknown
		}
		m.Pieces[i] = p
	}
	m.Trainer.VocabSize = int32(len(m.Pieces))
	m.Trainer.UnkID = int32(*j.UnkID)
	m.Trainer.ByteFallback = j.ByteFallback && bytesSeen == 256
	m.Trainer.BosID, m.Trainer.EosID, m.Trainer.PadID = -1, -1, -1
	m.Normalizer.Name = "identity"
	if len(charsmapBlob) > 0 {
		m.Normalizer.Name = "precompiled"
	}
	m.Normalizer.PrecompiledCharsmap = charsmapBlob
	m.Normalizer.AddDummyPrefix = prepends
	return m
}

// hfDefaultSpecials are T5TokenizerFast's defaults where the vocabulary has them.
func hfDefaultSpecials(t *Tokenizer, m *Model) specials {
	s := specials{unk: m.Pieces[m.Trainer.UnkID].Text}
	if id, ok := t.PieceToID("</s>"); ok {
		s.eos = "</s>"
		m.Trainer.EosID = id
	}
	if id, ok := t.PieceToID("<pad>"); ok {
		s.pad = "<pad>"
		m.Trainer.PadID = id
	}
	return s
}

func parseComponent(raw json.RawMessage) (*hfComponentJSON, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c hfComponentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// parseNormalizer returns the normalizer chain and the precompiled charsmap
// blob it uses, if any.
func parseNormalizer(raw json.RawMessage) ([]func(string) string, []byte, error) {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return nil, nil, err
	}
	if c.Type == "Sequence" {
		var chain []func(string) string
		var blob []byte
		for i, sub := range c.Normalizers {
			fs, b, err := parseNormalizer(sub)
			if err != nil {
				return nil, nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			chain = append(chain, fs...)
			if b != nil {
				blob = b
			}
		}
		return chain, blob, nil
	}
	if c.Type == "Precompiled" {
		return precompiledNormalizer(c)
	}
	f, err := simpleNormalizer(c)
	if err != nil {
		return nil, nil, err
	}
	return []func(string) string{f}, nil, nil
}

func precompiledNormalizer(c *hfComponentJSON) ([]func(string) string, []byte, error) {
	if c.Charsmap == nil || *c.Charsmap == "" {
		return nil, nil, nil
	}
	blob, err := base64.StdEncoding.DecodeString(*c.Charsmap)
	if err != nil {
		return nil, nil, fmt.Errorf("Precompiled: precompiled_charsmap is not base64: %w", err)
	}
	cm, err := parseCharsmap(blob)
	if err != nil {
		return nil, nil, fmt.Errorf("Precompiled: %w", err)
	}
	return []func(string) string{cm.apply}, blob, nil
}

func simpleNormalizer(c *hfComponentJSON) (func(string) string, error) {
	switch c.Type {
	case "NFC", "NFD", "NFKC", "NFKD":
		form := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}[c.Type]
		return form.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "StripAccents":
		return func(s string) string {
			return strings.Map(func(r rune) rune {
				if unicode.Is(unicode.M, r) {
					return -1
				}
				return r
			}, s)
		}, nil
	case "Strip":
		left, right := c.StripLeft == nil || *c.StripLeft, c.StripRight == nil || *c.StripRight
		return func(s string) string {
			if left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "Prepend":
		return func(s string) string {
			if s == "" {
				return s
			}
			return c.Prepend + s
		}, nil
	case "Replace":
		return replaceNormalizer(c)
	}
	return nil, fmt.Errorf("normalizer type %q is not supported", c.Type)
}

func replaceNormalizer(c *hfComponentJSON) (func(string) string, error) {
	content := c.Content
	switch {
	case c.Pattern.String != nil:
		old := *c.Pattern.String
		if old == "" {
			return func(s string) string { return s }, nil
		}
		return func(s string) string { return strings.ReplaceAll(s, old, content) }, nil
	case c.Pattern.Regex != nil:
		re, err := regexp.Compile(*c.Pattern.Regex)
		if err != nil {
			return nil, fmt.Errorf("Replace: pattern %q: %w", *c.Pattern.Regex, err)
		}
		return func(s string) string { return re.ReplaceAllLiteralString(s, content) }, nil
	}
	return nil, errors.New("Replace: pattern has neither String nor Regex")
}

// parsePreTokenizer returns the pre-tokenizer chain and whether it prepends
// "▁" to the text (for decoding).
func parsePreTokenizer(raw json.RawMessage) ([]func([]hfWord) []hfWord, bool, error) {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		var chain []func([]hfWord) []hfWord
		prepends := false
		for i, sub := range c.Pretokenizers {
			fs, p, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, false, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			chain, prepends = append(chain, fs...), prepends || p
		}
		return chain, prepends, nil
	case "WhitespaceSplit":
		return []func([]hfWord) []hfWord{whitespaceSplit}, false, nil
	case "Metaspace":
		f, prepends, err := metaspace(c)
		return []func([]hfWord) []hfWord{f}, prepends, err
	}
	return nil, false, fmt.Errorf("pre-tokenizer type %q is not supported", c.Type)
}

// whitespaceSplit splits words on Unicode whitespace, dropping it.
func whitespaceSplit(ws []hfWord) []hfWord {
	var out []hfWord
	for _, w := range ws {
		first := true
		for i := 0; i < len(w.text); {
			j := i + strings.IndexFunc(w.text[i:], func(r rune) bool { return !unicode.IsSpace(r) })
			if j < i {
				break
			}
			k := j + strings.IndexFunc(w.text[j:], unicode.IsSpace)
			if k < j {
				k = len(w.text)
			}
			out = append(out, hfWord{w.text[j:k], w.atStart && first && j == 0})
			first = false
			i = k
		}
	}
	return out
}

// metaspace is tokenizers' Metaspace pre-tokenizer: spaces become the
// replacement, which is prepended per prepend_scheme, then words are split
// before each replacement.
func metaspace(c *hfComponentJSON) (func([]hfWord) []hfWord, bool, error) {
	repl := c.Replacement
	if repl == "" {
		repl = spaceSymbol
	}
	scheme := c.PrependScheme
	if scheme == "" { // files older than prepend_scheme
		scheme = "always"
		if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
			scheme = "never"
		}
	}
	if scheme != "always" && scheme != "first" && scheme != "never" {
		return nil, false, fmt.Errorf("Metaspace: unknown prepend_scheme %q", scheme)
	}
	split := c.Split == nil || *c.Split
	f := func(ws []hfWord) []hfWord {
		var out []hfWord
		for _, w := range ws {
			s := strings.ReplaceAll(w.text, " ", repl)
			prepend := scheme == "always" || (scheme == "first" && w.atStart)
			if prepend && s != "" && !strings.HasPrefix(s, repl) {
				s = repl + s
			}
			if !split {
				out = append(out, hfWord{s, w.atStart})
				continue
			}
			out = splitBefore(out, s, repl, w.atStart)
		}
		return out
	}
	return f, scheme != "never", nil
}

// splitBefore splits s before every occurrence of sep (the separator joins
// the word after it) and appends the pieces to out.
func splitBefore(out []hfWord, s, sep string, atStart bool) []hfWord {
	start := 0
	for i := len(sep); i <= len(s)-len(sep); {
		j := strings.Index(s[i:], sep)
		if j < 0 {
			break
		}
		out = append(out, hfWord{s[start : i+j], atStart && start == 0})
		start = i + j
		i = start + len(sep)
	}
	if start < len(s) {
		out = append(out, hfWord{s[start:], atStart && start == 0})
	}
	return out
}

// parsePostProcessor reads the single-sequence special tokens.
func parsePostProcessor(raw json.RawMessage) (*hfTemplate, error) {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return nil, err
	}
	switch c.Type {
	case "TemplateProcessing":
		return templateProcessing(c)
	case "BertProcessing", "RobertaProcessing":
		cls, err1 := pairID(c.Cls)
		sep, err2 := pairID(c.Sep)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Type, err)
		}
		return &hfTemplate{prefix: []int32{cls}, suffix: []int32{sep}}, nil
	case "ByteLevel":
		return &hfTemplate{}, nil
	case "Sequence":
		tmpl := &hfTemplate{}
		for i, sub := range c.Processors {
			t, err := parsePostProcessor(sub)
			if err != nil {
				return nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if t != nil && len(t.prefix)+len(t.suffix) > 0 {
				tmpl = t
			}
		}
		return tmpl, nil
	}
	return nil, fmt.Errorf("post-processor type %q is not supported", c.Type)
}

func templateProcessing(c *hfComponentJSON) (*hfTemplate, error) {
	t := &hfTemplate{}
	seenSeq := false
	for i, raw := range c.Single {
		var item struct {
			Sequence     *struct{ ID string } `json:"Sequence"`
			SpecialToken *struct{ ID string } `json:"SpecialToken"`
		}
		if err := json.Unmarshal(raw, &item); err != nil {
			return nil, fmt.Errorf("TemplateProcessing: single[%d]: %w", i, err)
		}
		switch {
		case item.Sequence != nil:
			seenSeq = true
		case item.SpecialToken != nil:
			ids, ok := c.SpecialTokens[item.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("TemplateProcessing: special token %q has no ids", item.SpecialToken.ID)
			}
			if seenSeq {
				t.suffix = append(t.suffix, ids.IDs...)
			} else {
				t.prefix = append(t.prefix, ids.IDs...)
			}
		default:
			return nil, fmt.Errorf("TemplateProcessing: single[%d] is neither Sequence nor SpecialToken", i)
		}
	}
	return t, nil
}

// pairID reads the id of a ["[CLS]", 101] pair.
func pairID(pair []json.RawMessage) (int32, error) {
	var id int32
	if len(pair) != 2 {
		return 0, errors.New("token is not a [content, id] pair")
	}
	if err := json.Unmarshal(pair[1], &id); err != nil {
		return 0, fmt.Errorf("token id: %w", err)
	}
	return id, nil
}
