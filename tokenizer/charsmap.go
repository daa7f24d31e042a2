package tokenizer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// charsmap is sentencepiece's precompiled normalization rule set: a
// darts-clone double-array trie over source strings whose values are offsets
// into a blob of NUL-terminated replacement strings.
//
// Blob layout (normalizer.cc, EncodePrecompiledCharsMap):
//
//	uint32 little-endian trie size in bytes | trie units | replacement strings
type charsmap struct {
	units       []uint32
	replacement []byte
}

// maxCharsmapResults mirrors sentencepiece's Normalizer::kMaxTrieResultsSize:
// only the first 32 prefix matches are considered.
const maxCharsmapResults = 32

func parseCharsmap(blob []byte) (*charsmap, error) {
	if len(blob) <= 4 {
		return nil, errors.New("precompiled_charsmap is shorter than its header")
	}
	size := binary.LittleEndian.Uint32(blob)
	if uint64(size) >= uint64(len(blob)) {
		return nil, fmt.Errorf("precompiled_charsmap trie size %d exceeds the blob (%d bytes)", size, len(blob))
	}
	if size%4 != 0 || size == 0 {
		return nil, fmt.Errorf("precompiled_charsmap trie size %d is not a positive multiple of 4", size)
	}
	trie := blob[4 : 4+size]
	units := make([]uint32, size/4)
	for i := range units {
		units[i] = binary.LittleEndian.Uint32(trie[4*i:])
	}
	return &charsmap{units: units, replacement: blob[4+size:]}, nil
}

// darts-clone unit accessors (darts.h, DoubleArrayUnit).
func unitHasLeaf(u uint32) bool  { return (u>>8)&1 == 1 }
func unitValue(u uint32) uint32  { return u & (1<<31 - 1) }
func unitLabel(u uint32) uint32  { return u & (1<<31 | 0xFF) }
func unitOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// longestMatch returns the replacement for the longest rule that is a prefix
// of s, and the number of bytes it consumes; n is 0 when no rule matches.
// Like sentencepiece it looks at the first maxCharsmapResults matches only.
// A corrupt trie yields no match rather than a fault.
func (c *charsmap) longestMatch(s string) (repl string, n int) {
	units := c.units
	pos := unitOffset(units[0])
	found := 0
	value := uint32(0)
	for i := 0; i < len(s) && found < maxCharsmapResults; i++ {
		pos ^= uint32(s[i])
		if int(pos) >= len(units) {
			break
		}
		u := units[pos]
		if unitLabel(u) != uint32(s[i]) {
			break
		}
		pos ^= unitOffset(u)
		if unitHasLeaf(u) {
			if int(pos) >= len(units) {
				break
			}
			found++
			n, value = i+1, unitValue(units[pos])
		}
	}
	if n == 0 {
		return "", 0
	}
	return c.replacementAt(value), n
}

// replacementAt returns the NUL-terminated string at off in the replacement blob.
func (c *charsmap) replacementAt(off uint32) string {
	if int(off) >= len(c.replacement) {
		return ""
	}
	rest := c.replacement[off:]
	if end := bytes.IndexByte(rest, 0); end >= 0 {
		rest = rest[:end]
	}
	return string(rest)
}

// apply maps every longest-matching rule through s, copying text no rule
// covers. This is the Hugging Face "Precompiled" normalizer (see the package
// documentation for how it differs from tokenizers' grapheme walk).
func (c *charsmap) apply(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		if repl, n := c.longestMatch(s); n > 0 {
			b.WriteString(repl)
			s = s[n:]
			continue
		}
		_, size := decodeRune(s)
		b.WriteString(s[:size])
		s = s[size:]
	}
	return b.String()
}
