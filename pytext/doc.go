// Package pytext ports the Python text functions that diffusers' Wan
// pipelines run on a prompt before tokenizing it (pipeline_wan.py's
// prompt_clean), so ferry feeds the tokenizer the same string:
//
//   - FixText is ftfy.fix_text with ftfy 6.3.1's default TextFixerConfig,
//     fix_encoding included: text that looks like UTF-8 read as Latin-1,
//     Windows-125x, ISO-8859-2, MacRoman or cp437 (ftfy's badness
//     heuristic decides) is re-encoded and decoded as UTF-8, as ftfy does.
//     Its codec tables (codectables.go) are generated from Python's own
//     codecs by gen_tables.py; testdata/ftfy holds ftfy's own output on
//     over a thousand inputs, which the tests compare against.
//   - HTMLUnescape is Python's html.unescape.
//   - IsSpace and Strip are str.isspace and str.strip(); CollapseSpace is
//     regex.sub(r"\s+", " ", s) with the `regex` module.
//
// Strings are UTF-8; where a Python str would hold UTF-16 surrogates, the
// Go string holds their 3-byte encodings (CESU-8), which FixText pairs as
// ftfy's fix_surrogates does. FixText does that before anything else, where
// ftfy does it after the first round of fix_encoding; the two can differ
// only on a line that holds both encoded surrogates and mojibake.
package pytext

import (
	"strings"
	"unicode"
)

// IsSpace is Python's str.isspace for one character: Unicode White_Space
// plus the information separators U+001C..U+001F (bidi class B or S).
func IsSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// Strip is Python's str.strip() with no argument.
func Strip(s string) string { return strings.TrimFunc(s, IsSpace) }

// CollapseSpace replaces every run of white space with one space, as
// regex.sub(r"\s+", " ", s) does with the `regex` module (the one
// pipeline_wan.py imports as re). Its \s is Unicode White_Space, which is
// unicode.IsSpace: unlike str.isspace (and the standard re module), it
// does not match U+001C..U+001F.
func CollapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	inRun := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			if !inRun {
				b.WriteByte(' ')
			}
			inRun = true
			continue
		}
		inRun = false
		b.WriteRune(r)
	}
	return b.String()
}
