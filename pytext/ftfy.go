package pytext

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// maxDecodeLength is TextFixerConfig.max_decode_length: the longest
// segment, in characters, fixed at once.
const maxDecodeLength = 1_000_000

// FixText is ftfy.fix_text(text) with the default configuration.
//
// As ftfy does, the text is fixed one line at a time (each segment ends
// after a '\n'). HTML entities are unescaped only until a segment contains
// '<': ftfy's "auto" mode takes that as real HTML and, from that segment
// on, keeps entities as they are. Each segment goes through the fixers in
// ftfy's order, repeatedly, until a round changes nothing.
func FixText(text string) string {
	text = fixSurrogates(text)
	unescape := true
	var out strings.Builder
	out.Grow(len(text))
	for text != "" {
		n := segmentEnd(text)
		seg := text[:n]
		text = text[n:]
		if strings.Contains(seg, "<") {
			unescape = false
		}
		out.WriteString(fixSegment(seg, unescape))
	}
	return out.String()
}

// segmentEnd is the byte length of the first segment: through the first
// '\n', at most maxDecodeLength characters.
func segmentEnd(s string) int {
	n := strings.IndexByte(s, '\n') + 1
	if n == 0 {
		n = len(s)
	}
	if utf8.RuneCountInString(s[:n]) <= maxDecodeLength {
		return n
	}
	i := 0
	for range maxDecodeLength {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return i
}

// fixSegment is ftfy's fix_and_explain loop.
func fixSegment(s string, unescape bool) string {
	for {
		orig := s
		if unescape {
			s = unescapeHTML(s)
		}
		s = fixEncoding(s)
		s = fixC1Controls(s)
		s = ligatureReplacer.Replace(s)
		s = fixCharacterWidth(s)
		s = uncurlQuotes(s)
		s = lineBreakReplacer.Replace(s)
		// fix_surrogates runs here in ftfy; FixText has done it once for
		// the whole text, as no other fixer makes or removes surrogates.
		s = ansiRE.ReplaceAllString(s, "")
		s = removeControlChars(s)
		s = norm.NFC.String(s)
		if s == orig {
			return s
		}
	}
}

// entityRE is ftfy's HTML_ENTITY_RE: only references that end in ';'.
var entityRE = regexp.MustCompile(`&#?[0-9A-Za-z]{1,24};`)

// unescapeHTML is ftfy.fixes.unescape_html: HTML5 named entities that end
// in ';', the same names written all in capitals (ftfy reads P&EACUTE;REZ
// as PÉREZ) where that is not itself an entity, and numeric references
// when html.unescape consumes all of them.
func unescapeHTML(s string) string {
	return entityRE.ReplaceAllStringFunc(s, func(m string) string {
		if m[1] == '#' {
			if u := HTMLUnescape(m); !strings.Contains(u, ";") {
				return u
			}
			return m
		}
		name := m[1 : len(m)-1]
		if v, ok := namedEntity(name); ok {
			return v
		}
		lower := strings.ToLower(name)
		if name != strings.ToUpper(lower) || HTMLUnescape(m) != m {
			return m
		}
		if v, ok := namedEntity(lower); ok {
			// Python's str.upper: full case mapping (ß -> SS, ﬁ -> FI).
			return cases.Upper(language.Und).String(v)
		}
		return m
	})
}

// fixC1Controls is ftfy.fixes.fix_c1_controls: U+0080..U+009F read as the
// Windows-1252 bytes they come from (the five bytes it leaves undefined
// stay).
func fixC1Controls(s string) string {
	if !strings.ContainsFunc(s, isC1) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isC1(r) {
			return windows1252(byte(r))
		}
		return r
	}, s)
}

func isC1(r rune) bool { return r >= 0x80 && r <= 0x9f }

// ligatureReplacer is ftfy's LIGATURES: Latin ligatures and the digraphs
// made for legacy encodings, split into their letters (ligatures of other
// scripts, and æ, œ, are kept).
var ligatureReplacer = strings.NewReplacer(
	"Ĳ", "IJ", "ĳ", "ij", "ŉ", "ʼn",
	"Ǳ", "DZ", "ǲ", "Dz", "ǳ", "dz", "Ǆ", "DŽ", "ǅ", "Dž", "ǆ", "dž",
	"Ǉ", "LJ", "ǈ", "Lj", "ǉ", "lj", "Ǌ", "NJ", "ǋ", "Nj", "ǌ", "nj",
	"ﬀ", "ff", "ﬁ", "fi", "ﬂ", "fl", "ﬃ", "ffi", "ﬄ", "ffl", "ﬅ", "ſt", "ﬆ", "st",
)

// fixCharacterWidth is ftfy.fixes.fix_character_width (its WIDTH_MAP):
// the halfwidth and fullwidth forms U+FF01..U+FFEF become their NFKC
// form (fullwidth ASCII -> ASCII, halfwidth katakana -> katakana) and the
// ideographic space U+3000 becomes ' '.
func fixCharacterWidth(s string) string {
	if !strings.ContainsFunc(s, isWidthForm) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == 0x3000:
			b.WriteByte(' ')
		case isWidthForm(r):
			b.WriteString(norm.NFKC.String(string(r)))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isWidthForm(r rune) bool { return r == 0x3000 || r >= 0xff01 && r <= 0xffef }

// uncurlQuotes is ftfy.fixes.uncurl_quotes: SINGLE_QUOTE_RE
// [\u02bc\u2018-\u201b] becomes ' and DOUBLE_QUOTE_RE [\u201c-\u201f]
// becomes ". Primes (U+2032, U+2033) and guillemets are not quotes there.
func uncurlQuotes(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == 0x02bc || r >= 0x2018 && r <= 0x201b:
			return '\''
		case r >= 0x201c && r <= 0x201f:
			return '"'
		}
		return r
	}, s)
}

// lineBreakReplacer is ftfy.fixes.fix_line_breaks: CRLF, CR, LINE
// SEPARATOR, PARAGRAPH SEPARATOR and NEXT LINE become '\n'. (NEXT LINE
// rarely survives: fix_c1_controls has made it an ellipsis.)
var lineBreakReplacer = strings.NewReplacer(
	"\r\n", "\n", "\r", "\n", "\u2028", "\n", "\u2029", "\n", "\u0085", "\n",
)

// ansiRE is ftfy's ANSI_RE (remove_terminal_escapes); Python's \d in a
// str pattern is any Unicode decimal digit.
var ansiRE = regexp.MustCompile(`\x1b\[[\p{Nd};]*[a-zA-Z]`)

// removeControlChars is ftfy.fixes.remove_control_chars (its
// CONTROL_CHARS): C0 controls but tab, newline, form feed and carriage
// return; DEL; the deprecated Arabic format controls U+206A..U+206F; the
// byte order mark; the interlinear annotation characters and the object
// replacement character U+FFF9..U+FFFC.
func removeControlChars(s string) string {
	return strings.Map(func(r rune) rune {
		if isControlChar(r) {
			return -1
		}
		return r
	}, s)
}

func isControlChar(r rune) bool {
	switch {
	case r <= 0x08, r == 0x0b, r >= 0x0e && r <= 0x1f, r == 0x7f:
		return true
	case r >= 0x206a && r <= 0x206f, r == 0xfeff, r >= 0xfff9 && r <= 0xfffc:
		return true
	}
	return false
}

// fixSurrogates makes the string valid UTF-8 as ftfy's fix_surrogates
// fixes a str: the CESU-8 encoding of a high surrogate followed by a low
// one becomes the character the pair stands for, and a lone encoded
// surrogate becomes U+FFFD. Any other invalid byte, which a Python str
// cannot hold, becomes U+FFFD too.
func fixSurrogates(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if hi, ok := surrogateAt(s, i); ok {
			if lo, ok := surrogateAt(s, i+3); ok && hi < 0xdc00 && lo >= 0xdc00 {
				b.WriteRune(0x10000 + (hi-0xd800)<<10 + (lo - 0xdc00))
				i += 6
				continue
			}
			b.WriteRune(utf8.RuneError)
			i += 3
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // RuneError for an invalid byte
		i += w
	}
	return b.String()
}

// surrogateAt decodes a 3-byte encoded surrogate (ED A0..BF 80..BF) at i.
func surrogateAt(s string, i int) (rune, bool) {
	if i+3 > len(s) || s[i] != 0xed || s[i+1] < 0xa0 || s[i+1] > 0xbf || s[i+2] < 0x80 || s[i+2] > 0xbf {
		return 0, false
	}
	return 0xd000 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f), true
}
