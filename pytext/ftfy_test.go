package pytext

import (
	"fmt"
	"html"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFixText: each fixer of ftfy 6.3's default fix_text on the text it
// changes; the expected strings follow ftfy's tables and docstrings.
func TestFixText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain prompt unchanged", "A cat walks on the grass, realistic", "A cat walks on the grass, realistic"},
		{"curly quotes", "‘single’ ‚low‛ “double” „low‟ ʼtwas", `'single' 'low' "double" "low" 'twas`},
		{"primes and guillemets are not quotes", "5′ 11″ «oui»", "5′ 11″ «oui»"},
		{"latin ligatures", "ﬁsh ﬂour ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ĳ ǅ ǉ", "fish flour ff ffi ffl ſt st IJ ij Dž lj"},
		{"ligature then quote in one round", "ŉ", "'n"},
		{"other ligatures kept", "æ œ", "æ œ"},
		{"fullwidth and halfwidth", "ＬＯＵＤ　ＮＯＩＳＥＳ！ ｶﾀｶﾅ", "LOUD NOISES! カタカナ"},
		{"line breaks", "a\r\nb\rc\u2028d\u2029e", "a\nb\nc\nd\ne"},
		{"C1 controls read as Windows-1252", "wait\u0085 \u0093hi\u0094 \u0080", "wait… \"hi\" €"},
		{"undefined Windows-1252 bytes stay", "a\u0081b\u009d", "a\u0081b\u009d"},
		{"control characters", "a\x00b\x07c\x0bd\x7fe\u206af\ufeffg\ufffch", "abcdefgh"},
		{"tab, newline, form feed, CR kept as such", "a\tb\x0cc\nd", "a\tb\x0cc\nd"},
		{"information separators removed", "\x1cfoo\x1dbar\x1e \x1f", "foobar "},
		{"terminal escapes", "\x1b[36;44mblue\x1b[0m and \x1b[1mbold", "blue and bold"},
		{"HTML entities", "Tom &amp; Jerry &lt;3 caf&eacute; it&#x2019;s &#65;", "Tom & Jerry <3 café it's A"},
		{"capitalised entities", "P&EACUTE;REZ BUNDESSTRA&SZLIG;E &NTILDE; &nTILDE;", "PÉREZ BUNDESSTRASSE Ñ &nTILDE;"},
		{"entities without ';' kept", "this&not that &amp", "this&not that &amp"},
		{"nested entities unescaped round by round", "fish &amp;amp;amp; chips", "fish & chips"},
		{"numeric ';' kept", "&#59; &#12a;", "&#59; &#12a;"},
		{"numeric control dropped", "x&#28;y", "xy"},
		{"'<' turns entities off", "<b>fish &amp; chips</b>", "<b>fish &amp; chips</b>"},
		{"'<' turns entities off from its line on", "a &amp; b\n<i>c &amp; d</i>\ne &amp; f", "a & b\n<i>c &amp; d</i>\ne &amp; f"},
		{"NFC", "cafe\u0301", "café"},
		{"surrogate pair", "\xed\xa0\xbd\xed\xb2\xa9!", "\U0001F4A9!"},
		{"lone surrogates", "\xed\xb2\xa9\xed\xa0\xbd", "\uFFFD\uFFFD"},
		{"invalid byte", "a\xffb", "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FixText(tt.in); got != tt.want {
				t.Errorf("FixText(%+q) = %+q, want %+q", tt.in, got, tt.want)
			}
		})
	}
}

// TestWindows1252 checks the C1 table against Go's html package, whose
// numeric-reference table is the same Windows-1252 mapping.
func TestWindows1252(t *testing.T) {
	for b := 0x80; b <= 0x9f; b++ {
		want := html.UnescapeString(fmt.Sprintf("&#%d;", b))
		if got := string(windows1252(byte(b))); got != want {
			t.Errorf("0x%x: %+q, want %+q", b, got, want)
		}
	}
}

// TestSegmentEnd: a line is a segment; a line longer than
// max_decode_length characters is cut there.
func TestSegmentEnd(t *testing.T) {
	long := strings.Repeat("é", maxDecodeLength+3)
	tests := []struct {
		in   string
		want int
	}{
		{"ab\ncd", 3},
		{"abc", 3},
		{"\n", 1},
		{long, 2 * maxDecodeLength},
	}
	for _, tt := range tests {
		if got := segmentEnd(tt.in); got != tt.want {
			t.Errorf("segmentEnd(%d bytes) = %d, want %d", len(tt.in), got, tt.want)
		}
	}
}

// FuzzFixText: valid UTF-8 out, and fixing again changes nothing for text
// without '<' (entities stay on) and without '&' (a second pass can form
// no new entity), as long as the fix kept the lines as they were. ftfy is
// not idempotent when a fix adds or removes a line break: "Ã\ufffd\rÀ0" is
// fixed as one line, to "Ã\ufffd\nÀ0", whose first line is then mojibake
// of its own (ftfy 6.3.1 gives the same two results).
func FuzzFixText(f *testing.F) {
	for _, s := range []string{
		"“ﬁ” &amp;lt; ＡＢ\r\n\x1b[0m\x1c", "\xed\xa0\xbd\xed\xb2\xa9", "<a>&amp;</a>\n&lt;",
		"schÃ¶n â€œquotedâ€\ufffd", "Ð¿Ñ€Ð¸Ð²ÐµÑ‚\nvoilÃ le", "Ã\u00a0 la â€” ÃƒÂ©", "√©√ß ‚Äù",
		"ÃƒÆ’Ã‚Â©", "Ã©À\n", "\x93hi\x94 \x81 Ã¡?",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := FixText(s)
		if !utf8.ValidString(got) {
			t.Fatalf("FixText(%+q) = %+q, not UTF-8", s, got)
		}
		if !strings.ContainsAny(s, "<&") && !strings.Contains(got, "&") && strings.Count(got, "\n") == strings.Count(s, "\n") {
			if again := FixText(got); again != got {
				t.Fatalf("FixText(%+q) = %+q, again %+q", s, got, again)
			}
		}
	})
}
