// Package pytext ports the Python text functions that diffusers' Wan
// pipelines run on a prompt before tokenizing it (pipeline_wan.py's
// prompt_clean), so ferry feeds the tokenizer the same string:
//
//   - FixText is ftfy.fix_text with ftfy 6.3's default TextFixerConfig,
//     except fix_encoding (mojibake repair: re-decoding text that looks
//     like UTF-8 read as Latin-1, Windows-125x, MacRoman or cp437). That
//     step needs ftfy's badness heuristics and codec tables, is large, and
//     leaves text alone unless it looks like mojibake, so ordinary prompts
//     come out the same; a mojibake prompt keeps its mojibake here.
//   - HTMLUnescape is Python's html.unescape.
//   - IsSpace and Strip are str.isspace and str.strip(); CollapseSpace is
//     regex.sub(r"\s+", " ", s) with the `regex` module.
//
// Strings are UTF-8; where a Python str would hold UTF-16 surrogates, the
// Go string holds their 3-byte encodings (CESU-8), which FixText pairs as
// ftfy's fix_surrogates does.
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
