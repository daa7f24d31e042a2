package pytext

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
)

// fixEncoding is ftfy.fix_encoding: one step of mojibake repair after
// another until a step changes nothing.
func fixEncoding(s string) string {
	for {
		fixed := fixEncodingStep(s)
		if fixed == s {
			return s
		}
		s = fixed
	}
}

// fixEncodingStep is ftfy's _fix_encoding_one_step_and_explain with the
// default configuration.
func fixEncodingStep(s string) string {
	if s == "" || isASCII(s) || !isBad(s) {
		return s
	}
	latin1 := false
	for _, cm := range charmaps {
		if !cm.possible(s) {
			continue
		}
		if cm.name == "latin-1" {
			latin1 = true
		}
		if fixed, ok := redecode(s, cm); ok {
			return fixed
		}
	}
	// ftfy searches UTF8_DETECTOR_RE first; without a match the fix
	// returns the text as it is, so the search need not run twice.
	if fixed := decodeInconsistentUTF8(s); fixed != s {
		return fixed
	}
	// ftfy checks for "windows-1252" among the encodings it could encode
	// with, but its list only has "sloppy-windows-1252", so text that is
	// all Latin-1 always gets this re-decoding.
	if latin1 {
		if fixed, ok := latin1ToWindows1252(s); ok && fixed != s {
			return fixed
		}
	}
	if strings.ContainsFunc(s, isC1) {
		return fixC1Controls(s)
	}
	return s
}

// redecode encodes s with cm, repairs the bytes as ftfy does, and decodes
// them as UTF-8; false if that fails.
func redecode(s string, cm *charmap) (string, bool) {
	b := cm.encodeString(s)
	// In MacRoman an en dash before a space would look like an altered
	// sequence, so ftfy skips the repair there.
	if cm.name != "macroman" && alteredUTF8RE.MatchString(latin1String(b)) {
		b = restoreByteA0(b)
	}
	if cm.sloppy {
		b = replaceLossySequences(b)
	}
	return decodeUTF8(b)
}

// The byte patterns below (ftfy's ALTERED_UTF8_RE and LOSSY_UTF8_RE) run
// on bytes. Go's regexp reads UTF-8, so the bytes are handed to it as a
// Latin-1 string, each byte b as the rune U+00b, and the patterns name
// bytes as \x{..} runes. The patterns have no lookaround, and Go's regexp
// picks the match a backtracking engine would, so matches and replacements
// are Python's.

// alteredUTF8RE is ALTERED_UTF8_RE: UTF-8 sequences that would be whole if
// a space were byte A0.
var alteredUTF8RE = regexp.MustCompile(`[\x{c2}\x{c3}\x{c5}\x{ce}\x{d0}\x{d9}] ` +
	`|[\x{e2}\x{e3}] [\x{80}-\x{84}\x{86}-\x{9f}\x{a1}-\x{bf}]` +
	`|[\x{e0}-\x{e3}][\x{80}-\x{84}\x{86}-\x{9f}\x{a1}-\x{bf}] ` +
	`|\x{f0} [\x{80}-\x{bf}][\x{80}-\x{bf}]` +
	`|\x{f0}[\x{80}-\x{bf}] [\x{80}-\x{bf}]` +
	`|\x{f0}[\x{80}-\x{bf}][\x{80}-\x{bf}] `)

// lossyUTF8RE is LOSSY_UTF8_RE: UTF-8 sequences with bytes lost to 0x1A
// (what the sloppy codecs encode U+FFFD as) or, once, to '?'.
var lossyUTF8RE = regexp.MustCompile(`[\x{c2}-\x{df}]\x{1a}` +
	`|[\x{c2}-\x{c3}]\?` +
	`|\x{ed}[\x{a0}-\x{af}][\x{1a}?]\x{ed}[\x{b0}-\x{bf}][\x{1a}?\x{80}-\x{bf}]` +
	`|\x{ed}[\x{a0}-\x{af}][\x{1a}?\x{80}-\x{bf}]\x{ed}[\x{b0}-\x{bf}][\x{1a}?]` +
	`|[\x{e0}-\x{ef}][\x{1a}?][\x{1a}\x{80}-\x{bf}]` +
	`|[\x{e0}-\x{ef}][\x{1a}\x{80}-\x{bf}][\x{1a}?]` +
	`|[\x{f0}-\x{f4}][\x{1a}?][\x{1a}\x{80}-\x{bf}][\x{1a}\x{80}-\x{bf}]` +
	`|[\x{f0}-\x{f4}][\x{1a}\x{80}-\x{bf}][\x{1a}?][\x{1a}\x{80}-\x{bf}]` +
	`|[\x{f0}-\x{f4}][\x{1a}\x{80}-\x{bf}][\x{1a}\x{80}-\x{bf}][\x{1a}?]` +
	`|\x{1a}`)

// latin1String maps each byte to the rune of the same number.
func latin1String(b []byte) string {
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = rune(c)
	}
	return string(rs)
}

// latin1Bytes undoes latin1String (every rune is below 0x100).
func latin1Bytes(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		out = append(out, byte(r))
	}
	return out
}

// restoreByteA0 is ftfy.fixes.restore_byte_a0: a space that stands where
// byte A0 of a UTF-8 sequence belongs becomes A0 again. First, C3 followed
// by a space becomes C3 A0 plus the space ("à" as a word of its own),
// except before a second space or the Portuguese "quele", "quela", "quilo",
// "s " (A_GRAVE_WORD_RE; its lookahead is done by hand).
func restoreByteA0(b []byte) []byte {
	b = restoreAGrave(b)
	s := alteredUTF8RE.ReplaceAllStringFunc(latin1String(b), func(m string) string {
		return strings.ReplaceAll(m, " ", "\u00a0")
	})
	return latin1Bytes(s)
}

var aGraveExceptions = [][]byte{[]byte(" "), []byte("quele"), []byte("quela"), []byte("quilo"), []byte("s ")}

func restoreAGrave(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); i++ {
		out = append(out, b[i])
		if b[i] == 0xc3 && i+1 < len(b) && b[i+1] == ' ' && !hasAnyPrefix(b[i+2:], aGraveExceptions) {
			out = append(out, 0xa0, ' ')
			i++
		}
	}
	return out
}

func hasAnyPrefix(b []byte, prefixes [][]byte) bool {
	return slices.ContainsFunc(prefixes, func(p []byte) bool { return bytes.HasPrefix(b, p) })
}

// replaceLossySequences is ftfy.fixes.replace_lossy_sequences: each lossy
// sequence becomes the UTF-8 encoding of U+FFFD.
func replaceLossySequences(b []byte) []byte {
	s := lossyUTF8RE.ReplaceAllLiteralString(latin1String(b), "\u00ef\u00bf\u00bd")
	return latin1Bytes(s)
}

// decodeInconsistentUTF8 is ftfy.fixes.decode_inconsistent_utf8: each run
// that UTF8_DETECTOR_RE finds, if shorter than the text and bad, is fixed
// on its own with fixEncoding.
func decodeInconsistentUTF8(s string) string {
	rs := []rune(s)
	var out strings.Builder
	last := 0
	for p := 0; ; {
		start, end := utf8DetectorFind(rs, p)
		if start < 0 {
			break
		}
		out.WriteString(string(rs[last:start]))
		run := string(rs[start:end])
		if end-start < len(rs) && isBad(run) {
			run = fixEncoding(run)
		}
		out.WriteString(run)
		last, p = end, end
	}
	out.WriteString(string(rs[last:]))
	return out.String()
}

// utf8DetectorFind is UTF8_DETECTOR_RE.search(text, from) over the text's
// runes: the first run, at or after from, of characters that look like
// UTF-8 lead bytes each followed by as many continuation bytes as the lead
// asks for, read in a single-byte encoding; the run must not follow a
// "strict" continuation character (the pattern's negative lookbehind,
// which Go's regexp lacks, so the match is written by hand). It returns
// the run's bounds, or -1, -1.
func utf8DetectorFind(rs []rune, from int) (int, int) {
	for p := from; p < len(rs); p++ {
		if p > 0 && utf8ContinuationStrict[rs[p-1]] {
			continue
		}
		if end := utf8DetectorRun(rs, p); end > p {
			return p, end
		}
	}
	return -1, -1
}

// utf8DetectorRun is the length of the pattern's (...)+ group at p: as a
// backtracking engine does, each round takes the first alternative that
// fits (2-, then 3-, then 4-character sequences), and the group ends at the
// first round where none does; nothing follows the group, so no choice is
// ever undone.
func utf8DetectorRun(rs []rune, p int) int {
	for {
		n := utf8SequenceAt(rs, p)
		if n == 0 {
			return p
		}
		p += n
	}
}

func utf8SequenceAt(rs []rune, p int) int {
	if p >= len(rs) {
		return 0
	}
	for n, lead := range utf8Leads {
		if lead[rs[p]] && continuationsAt(rs, p+1, n+1) {
			return n + 2
		}
	}
	return 0
}

func continuationsAt(rs []rune, p, n int) bool {
	if p+n > len(rs) {
		return false
	}
	for _, r := range rs[p : p+n] {
		if !utf8Continuation[r] {
			return false
		}
	}
	return true
}

// The character classes UTF8_DETECTOR_RE is built from (ftfy's
// chardata.UTF8_CLUES): what UTF-8 lead bytes C2..DF, E0..EF and F0/F3
// decode to in the codecs ftfy knows, and what continuation bytes 80..BF
// decode to, plus a space for an A0 turned into one. The strict set leaves
// out the space and the punctuation that often stands for itself.
var (
	utf8FirstOf2 = runeSet("ĂÂÄĀÅÃÆĆČÇĎĐÉĚÊËĖÈĒĘÐĞĢÍÎÏİÌĪĶĹĻŁŃŇŅÑÓÔÖŐÒŌØÕŘŚŠŞŢÞÚÛÜŰÙŪŲŮÝŹŽŻß×" +
		"ΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩΪΫάέήίВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ")
	utf8FirstOf3 = runeSet("áăâäàāąåãæćčçďéěêëėèēęģíîïìīįķĺļŕźΰαβγδεζηθικλμνξοабвгдежзийклмноп")
	utf8FirstOf4 = runeSet("đðğóšπσру")
	// utf8Leads are the lead sets of 2-, 3- and 4-byte sequences, in the
	// order the pattern's alternatives try them.
	utf8Leads = [...]map[rune]bool{utf8FirstOf2, utf8FirstOf3, utf8FirstOf4}

	continuationLetters = "ĄÆĽŁØŖŚŠŞŤŸŹŽŻŒąæƒľłøŗśšşťźžżœˆˇ˘˛˜˝΄΅ΆΈΉΊΌΎΏЁЂЃЄЅІЇЈЉЊЋЌЎЏёђѓєѕіїјљњћќўџҐґ"

	utf8Continuation       = runeSet(latin1Range(0x80, 0xbf) + " " + continuationLetters + "–—―‘’‚“”„†‡•…‰‹›€№™")
	utf8ContinuationStrict = runeSet(latin1Range(0x80, 0xbf) + continuationLetters + "†‡‰‹›€№™")
)

func runeSet(chars string) map[rune]bool {
	set := make(map[rune]bool, len(chars))
	for _, r := range chars {
		set[r] = true
	}
	return set
}

func latin1Range(lo, hi rune) string {
	var b strings.Builder
	for r := lo; r <= hi; r++ {
		b.WriteRune(r)
	}
	return b.String()
}
