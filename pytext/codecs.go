package pytext

import (
	"bytes"
	"unicode/utf8"
)

//go:generate sh -c "python3 gen_tables.py > codectables.go"

// charmap is one of the single-byte codecs ftfy re-encodes text with
// (codectables.go holds Python's tables for them).
type charmap struct {
	name   string
	sloppy bool // ftfy's sloppy-windows-125x: replace_lossy_sequences applies
	decode [256]rune
	encode map[rune]byte
}

func init() {
	for _, cm := range charmaps {
		cm.encode = make(map[rune]byte, 256)
		for b, r := range cm.decode {
			cm.encode[r] = byte(b)
		}
	}
}

// possible is ftfy's possible_encoding(text, name): whether Python's
// text.encode(name) would succeed. ftfy asks it with a regex made of the
// ASCII characters but 0x1A, and whatever bytes 0x80..0xFF and 0x1A decode
// to; for the sloppy codecs 0x1A decodes to U+FFFD, so U+001A itself is out.
func (cm *charmap) possible(s string) bool {
	for _, r := range s {
		if r < 0x80 && r != 0x1a {
			continue
		}
		b, ok := cm.encode[r]
		if !ok || b < 0x80 && b != 0x1a {
			return false
		}
	}
	return true
}

// encodeString is text.encode(name) for text that possible accepts.
func (cm *charmap) encodeString(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		out = append(out, cm.encode[r])
	}
	return out
}

// isASCII is possible_encoding(text, "ascii").
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// decodeUTF8 is bytes.decode("utf-8"), or "utf-8-variants" where ftfy
// picks it (the bytes hold 0xED or 0xC0). Go's utf8.Valid rejects what
// Python's strict decoder rejects: encoded surrogates, overlong forms and
// code points past U+10FFFF.
func decodeUTF8(b []byte) (string, bool) {
	if bytes.IndexByte(b, 0xed) >= 0 || bytes.IndexByte(b, 0xc0) >= 0 {
		return decodeUTF8Variants(b)
	}
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// decodeUTF8Variants is ftfy's utf-8-variants decoder (strict, whole input
// at once): UTF-8, plus CESU-8 surrogate pairs (ED A0..AF 80..BF ED B0..BF
// 80..BF) as one supplementary character and C0 80 as U+0000.
//
// It follows the codec step by step: find the next "special" sequence;
// decode the bytes before it as strict UTF-8; then decode the special
// sequence or fail. The codec's patterns allow each byte after the lead
// to be missing at the end of the input, and Python's bytes '$' also
// matches before a final '\n', which makes "C0 \n" at the very end decode
// as U+0000 and lets a final '\n' stand for the last byte of a CESU-8
// pair. Those corners are kept.
func decodeUTF8Variants(b []byte) (string, bool) {
	var out []byte
	for p := 0; p < len(b); {
		s := nextSpecial(b, p)
		if s < 0 {
			s = len(b)
		}
		if s > p {
			if !utf8.Valid(b[p:s]) {
				return "", false
			}
			out = append(out, b[p:s]...)
			p = s
			continue
		}
		switch {
		case b[p] == 0xc0 && len(b)-p > 1:
			out = append(out, 0)
			p += 2
		case b[p] == 0xc0:
			return "", false
		case len(b)-p < 6:
			// The codec hands the rest to the strict decoder, which
			// rejects a surrogate, a truncated sequence or ED '\n'.
			if !utf8.Valid(b[p:]) {
				return "", false
			}
			out = append(out, b[p:]...)
			p = len(b)
		case cesu8At(b, p):
			r := rune(b[p+1]&0x0f)<<16 | rune(b[p+2]&0x3f)<<10 | rune(b[p+4]&0x0f)<<6 | rune(b[p+5]&0x3f)
			out = utf8.AppendRune(out, r+0x10000)
			p += 6
		default:
			// A lone encoded surrogate.
			return "", false
		}
	}
	return string(out), true
}

// atEnd is Python's '$' in a bytes pattern without MULTILINE: the end of
// the input, or just before a '\n' that ends it.
func atEnd(b []byte, i int) bool {
	return i == len(b) || i == len(b)-1 && b[i] == '\n'
}

// seqAt reports whether b[i:] matches the classes one by one, each of
// which may instead be missing at the end of the input (the codec's
// "(class|$)" groups: once '$' matches, the rest match '$' too).
func seqAt(b []byte, i int, classes ...[2]byte) bool {
	for _, c := range classes {
		if i < len(b) && b[i] >= c[0] && b[i] <= c[1] {
			i++
			continue
		}
		return atEnd(b, i)
	}
	return true
}

var (
	cesu8Classes     = [][2]byte{{0xa0, 0xaf}, {0x80, 0xbf}, {0xed, 0xed}, {0xb0, 0xbf}, {0x80, 0xbf}}
	surrogateClasses = [][2]byte{{0xa0, 0xbf}, {0x80, 0xbf}}
)

// cesu8At is CESU8_RE.match(b[p:]) for a b[p] of 0xED.
func cesu8At(b []byte, p int) bool { return seqAt(b, p+1, cesu8Classes...) }

// nextSpecial is SPECIAL_BYTES_RE.search(b[p:]): the first C0 80 (or a
// final C0), or ED starting a CESU-8 pair or an encoded surrogate, maybe
// cut off by the end; -1 if none.
func nextSpecial(b []byte, p int) int {
	for i := p; i < len(b); i++ {
		switch b[i] {
		case 0xc0:
			if seqAt(b, i+1, [2]byte{0x80, 0x80}) {
				return i
			}
		case 0xed:
			if cesu8At(b, i) || seqAt(b, i+1, surrogateClasses...) {
				return i
			}
		}
	}
	return -1
}

// latin1ToWindows1252 is text.encode("latin-1").decode("windows-1252")
// for text that is all Latin-1; false where Python's cp1252 decoder
// fails (U+0081, U+008D, U+008F, U+0090, U+009D).
func latin1ToWindows1252(s string) (string, bool) {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return "", false
		}
		w := windows1252Strict[r]
		if w < 0 {
			return "", false
		}
		out = append(out, w)
	}
	return string(out), true
}
