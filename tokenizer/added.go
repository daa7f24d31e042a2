package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is a token transformers matches in raw text before the model
// sees it (special tokens such as </s>, T5's <extra_id_N>).
type addedToken struct {
	content string
	id      int32
	lstrip  bool // swallow whitespace on its left
	rstrip  bool // swallow whitespace on its right
	special bool
}

// addedTokens finds added tokens in text, leftmost first and longest among
// those starting at the same place (transformers' Trie.split, tokenizers'
// LeftmostLongest matcher).
type addedTokens struct {
	tokens []addedToken
	trie   *pieceTrie // content -> index in tokens
	byIDs  map[int32]int
}

// chunk is a stretch of text: an added token (id >= 0) or plain text to
// encode (id == -1). offset is where it starts in the original text.
type chunk struct {
	text   string
	id     int32
	offset int
}

// newAddedTokens indexes toks; a content listed twice keeps its first entry.
func newAddedTokens(toks []addedToken) *addedTokens {
	a := &addedTokens{byIDs: make(map[int32]int)}
	seen := make(map[string]bool)
	var keys []trieKey
	for _, tok := range toks {
		if tok.content == "" || seen[tok.content] {
			continue
		}
		seen[tok.content] = true
		keys = append(keys, trieKey{tok.content, int32(len(a.tokens))})
		if _, dup := a.byIDs[tok.id]; !dup {
			a.byIDs[tok.id] = len(a.tokens)
		}
		a.tokens = append(a.tokens, tok)
	}
	if len(keys) > 0 {
		a.trie = buildTrie(keys)
	}
	return a
}

// split cuts text at added tokens, applying their lstrip/rstrip to the
// neighbouring text. Empty plain chunks are dropped.
func (a *addedTokens) split(text string) []chunk {
	if a == nil || a.trie == nil {
		return []chunk{{text: text, id: -1}}
	}
	var out []chunk
	plainStart := 0
	for i := 0; i < len(text); {
		idx, n := a.trie.longest(text[i:])
		if n == 0 {
			i++
			continue
		}
		tok := a.tokens[idx]
		plain := text[plainStart:i]
		if tok.lstrip {
			plain = strings.TrimRightFunc(plain, isPySpace)
		}
		if plain != "" {
			out = append(out, chunk{text: plain, id: -1, offset: plainStart})
		}
		out = append(out, chunk{text: tok.content, id: tok.id, offset: i})
		i += n
		if tok.rstrip {
			i += len(text[i:]) - len(strings.TrimLeftFunc(text[i:], isPySpace))
		}
		plainStart = i
	}
	if plainStart < len(text) {
		out = append(out, chunk{text: text[plainStart:], id: -1, offset: plainStart})
	}
	return out
}

func (a *addedTokens) byContent(content string) (addedToken, bool) {
	if a == nil || a.trie == nil {
		return addedToken{}, false
	}
	if idx := a.trie.lookup(content); idx >= 0 {
		return a.tokens[idx], true
	}
	return addedToken{}, false
}

func (a *addedTokens) byID(id int32) (addedToken, bool) {
	if a == nil {
		return addedToken{}, false
	}
	if idx, ok := a.byIDs[id]; ok {
		return a.tokens[idx], true
	}
	return addedToken{}, false
}

// isPySpace is Python's str.isspace for one character: Unicode White_Space
// plus the ASCII information separators U+001C..U+001F.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F)
}

// validUTF8 replaces each invalid byte of s by U+FFFD, as Python's
// "replace" error handler would before text reaches a tokenizer.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}
