package tokenizer

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// spaceSymbol is U+2581 LOWER ONE EIGHTH BLOCK, sentencepiece's visible space.
const spaceSymbol = "\u2581"

// normalizer reproduces sentencepiece's Normalizer::Normalize: text is
// consumed one rule (prefix) at a time, then whitespace is cleaned up and
// escaped.
type normalizer struct {
	spec   NormalizerSpec
	suffix bool // treat_whitespace_as_suffix: the dummy space goes at the end

	chars *charsmap  // precompiled rules; nil when the model has none
	user  *pieceTrie // USER_DEFINED pieces, passed through unnormalized

	// Used only when the model carries no precompiled rules.
	form norm.Form
	nfx  bool // apply form
	nmt  bool // sentencepiece's extra NMT rules (whitespace, controls)
	fold bool // case folding (*_cf rule sets)
}

func newNormalizer(m *Model) (*normalizer, error) {
	n := &normalizer{spec: m.Normalizer, suffix: m.Trainer.TreatWhitespaceAsSuffix}
	if len(m.Normalizer.PrecompiledCharsmap) > 0 {
		c, err := parseCharsmap(m.Normalizer.PrecompiledCharsmap)
		if err != nil {
			return nil, err
		}
		n.chars = c
	} else {
		n.setFallback(m.Normalizer.Name)
	}
	var user []trieKey
	for id, p := range m.Pieces {
		if p.Type == UserDefined {
			user = append(user, trieKey{p.Text, int32(id)})
		}
	}
	if len(user) > 0 {
		n.user = buildTrie(user)
	}
	return n, nil
}

// setFallback picks a golang.org/x/text form for a rule set named like
// sentencepiece's built-in ones. sentencepiece itself leaves text unchanged
// when a model has no precompiled rules; models written by hand (ferry synth)
// rely on this fallback to get NFKC without shipping a charsmap.
func (n *normalizer) setFallback(name string) {
	base := strings.TrimPrefix(name, "nmt_")
	n.nmt = base != name
	if b, ok := strings.CutSuffix(base, "_cf"); ok {
		base, n.fold = b, true
	}
	forms := map[string]norm.Form{"nfkc": norm.NFKC, "nfc": norm.NFC, "nfkd": norm.NFKD, "nfd": norm.NFD}
	n.form, n.nfx = forms[base]
	if !n.nfx {
		n.nmt, n.fold = false, false // "identity" or a name we do not know
	}
}

// normalize returns the normalized form of input, with spaces escaped as
// "▁" and the dummy prefix added, exactly as sentencepiece feeds it to the
// segmenter.
func (n *normalizer) normalize(input string) string {
	removeExtra := n.spec.RemoveExtraWhitespaces
	if removeExtra {
		input = n.trimHeadingSpace(input)
	}
	if input == "" {
		return ""
	}
	out := make([]byte, 0, len(input)*3)
	space := " "
	if n.spec.EscapeWhitespaces {
		space = spaceSymbol
	}
	if !n.suffix && n.spec.AddDummyPrefix {
		out = append(out, space...)
	}
	prevSpace := removeExtra
	for input != "" {
		piece, consumed := n.prefix(input)
		for prevSpace && strings.HasPrefix(piece, " ") {
			piece = piece[1:]
		}
		if piece != "" {
			out = appendEscaped(out, piece, n.spec.EscapeWhitespaces)
			prevSpace = strings.HasSuffix(piece, " ")
		}
		input = input[consumed:]
		if !removeExtra {
			prevSpace = false
		}
	}
	if removeExtra {
		for bytes.HasSuffix(out, []byte(space)) {
			out = out[:len(out)-len(space)]
		}
	}
	if n.suffix && n.spec.AddDummyPrefix {
		out = append(out, space...)
	}
	return string(out)
}

// trimHeadingSpace drops leading rules that normalize to exactly one space.
func (n *normalizer) trimHeadingSpace(s string) string {
	for s != "" {
		piece, consumed := n.prefix(s)
		if piece != " " {
			break
		}
		s = s[consumed:]
	}
	return s
}

func appendEscaped(out []byte, s string, escape bool) []byte {
	if !escape {
		return append(out, s...)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			out = append(out, spaceSymbol...)
		} else {
			out = append(out, s[i])
		}
	}
	return out
}

// prefix normalizes the first unit of s: a user-defined piece (kept as is),
// else the longest precompiled rule, else one character. Malformed UTF-8
// becomes U+FFFD one byte at a time (Normalizer::NormalizePrefix).
func (n *normalizer) prefix(s string) (string, int) {
	if n.user != nil {
		if _, k := n.user.longest(s); k > 0 {
			return s[:k], k
		}
	}
	if n.chars != nil {
		if repl, k := n.chars.longestMatch(s); k > 0 {
			return repl, k
		}
	}
	r, size := decodeRune(s)
	if r == utf8.RuneError && size == 1 {
		return "\uFFFD", 1
	}
	if n.nfx {
		return n.fallbackPrefix(s, r, size)
	}
	return s[:size], size
}

// fallbackPrefix normalizes the segment of s up to the next normalization
// boundary with x/text, after sentencepiece's NMT rules for the first rune.
func (n *normalizer) fallbackPrefix(s string, r rune, size int) (string, int) {
	if n.nmt {
		if repl, ok := nmtRule(r); ok {
			return repl, size
		}
	}
	end := n.form.NextBoundaryInString(s, true)
	if end <= 0 || !utf8.ValidString(s[:end]) {
		end = size
	}
	out := n.form.String(s[:end])
	if n.fold {
		out = n.form.String(cases.Fold().String(out))
	}
	return out, end
}

// nmtRule returns sentencepiece's nmt_nfkc replacement for r
// (builder.cc, BuildNmtNFKCMap): odd whitespace becomes a space, most C0
// controls vanish, and FULLWIDTH TILDE is kept as is.
func nmtRule(r rune) (string, bool) {
	switch r {
	case 0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x200B, 0x200C, 0x200E, 0x200F,
		0x2028, 0x2029, 0x2581, 0xFEFF, 0xFFFD:
		return " ", true
	case 0x7F, 0x8F, 0x9F, 0x0B:
		return "", true
	case 0xFF5E:
		return string(r), true
	}
	if (r >= 0x01 && r <= 0x08) || (r >= 0x0E && r <= 0x1F) {
		return "", true
	}
	return "", false
}

// decodeRune is utf8.DecodeRuneInString; it exists so the callers read as
// the sentencepiece code they mirror.
func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

var oneCharLenTable = [16]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}

// oneCharLen is sentencepiece's OneCharLen: the UTF-8 length implied by the
// lead byte alone, which is how its lattice steps through text.
func oneCharLen(c byte) int {
	return int(oneCharLenTable[c>>4])
}
