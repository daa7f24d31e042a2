package pytext

import (
	"html"
	"regexp"
	"strings"
	"unicode/utf8"
)

// charrefRE is html.unescape's _charref: a numeric reference, or a name of
// up to 32 characters, each with an optional semicolon.
var charrefRE = regexp.MustCompile(`&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)`)

// HTMLUnescape is Python's html.unescape: named and numeric character
// references decoded by the HTML5 rules.
//
// Named references go to Go's html.UnescapeString, which holds the same
// HTML5 table and, like Python, takes the whole name when it is an entity
// and otherwise its longest prefix that is a legacy (semicolon-less)
// entity. Numeric references are decoded here because the two differ:
// Python drops control characters and noncharacters (&#1; &#127;
// &#xFFFF; become ""), Go keeps them.
func HTMLUnescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	return charrefRE.ReplaceAllStringFunc(s, func(m string) string {
		if m[1] == '#' {
			return numericRef(m[2:])
		}
		if name, ok := strings.CutSuffix(m[1:], ";"); ok {
			if v, ok := namedEntity(name); ok {
				return v
			}
		}
		return html.UnescapeString(m)
	})
}

// goMissing are the HTML5 entities Go's table leaves out (their values
// are longer than their names).
var goMissing = map[string]string{"nLt": "\u226A\u20D2", "nGt": "\u226B\u20D2"}

// namedEntity looks "name;" up in the HTML5 entity table. Go's table is
// not exported; html.UnescapeString decodes "&name;" whole exactly when
// the name is in it, and otherwise as it decodes "&name", with the ';'
// left over.
func namedEntity(name string) (string, bool) {
	if v, ok := goMissing[name]; ok {
		return v, true
	}
	v := html.UnescapeString("&" + name + ";")
	if v == html.UnescapeString("&"+name)+";" {
		return "", false
	}
	return v, true
}

// numericRef decodes the digits after "&#" (with "x" for hex and an
// optional ';') as html.unescape's _replace_charref does.
func numericRef(s string) string {
	s = strings.TrimSuffix(s, ";")
	base := rune(10)
	if s[0] == 'x' || s[0] == 'X' {
		base, s = 16, s[1:]
	}
	// Python's int has no limit; anything past U+10FFFF decodes the same.
	var n rune
	for i := 0; i < len(s); i++ {
		n = n*base + hexDigit(s[i])
		if n > utf8.MaxRune {
			n = utf8.MaxRune + 1
		}
	}
	switch {
	case n == 0:
		return "\uFFFD"
	case n == '\r':
		return "\r"
	case n >= 0x80 && n <= 0x9f:
		return string(windows1252(byte(n)))
	case n >= 0xd800 && n <= 0xdfff || n > utf8.MaxRune:
		return "\uFFFD"
	case invalidCodepoint(n):
		return ""
	}
	return string(n)
}

func hexDigit(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10
	}
	return rune(c-'A') + 10
}

// invalidCodepoint is html's _invalid_codepoints (past the cases
// numericRef handles first): C0 controls other than tab, newline, form
// feed and carriage return, DEL, and the noncharacters.
func invalidCodepoint(n rune) bool {
	switch {
	case n >= 0x1 && n <= 0x8, n == 0xb, n >= 0xe && n <= 0x1f, n == 0x7f:
		return true
	case n >= 0xfdd0 && n <= 0xfdef:
		return true
	}
	return n&0xfffe == 0xfffe
}

// windows1252 maps a byte 0x80..0x9F to its Windows-1252 character; the
// five bytes Windows-1252 leaves undefined stay as the C1 control of the
// same number (Python's html.unescape and ftfy's sloppy-windows-1252).
func windows1252(b byte) rune {
	if r := windows1252Strict[b]; r >= 0 {
		return r
	}
	return rune(b)
}
