package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// parseVocab parses a Unigram vocabulary, [["piece", score], ...]. It is a
// dedicated scanner because encoding/json spends over a second and a million
// allocations on UMT5's 256k entries; encoding/json has already checked that
// raw is valid JSON, and decodes the rare escaped piece.
func parseVocab(raw []byte) ([]hfVocabJSON, error) {
	s := vocabScanner{b: raw}
	if !s.consume('[') {
		return nil, s.fail("want [")
	}
	var out []hfVocabJSON
	var arena []byte
	var lengths []int
	if !s.consume(']') {
		for {
			text, score, err := s.entry()
			if err != nil {
				return nil, fmt.Errorf("entry %d: %w", len(out), err)
			}
			arena = append(arena, text...)
			lengths = append(lengths, len(text))
			out = append(out, hfVocabJSON{score: score})
			if s.consume(']') {
				break
			}
			if !s.consume(',') {
				return nil, s.fail("want , or ]")
			}
		}
	}
	all := string(arena) // one allocation for every piece string
	off := 0
	for i, n := range lengths {
		out[i].piece = all[off : off+n]
		off += n
	}
	return out, nil
}

type vocabScanner struct {
	b   []byte
	pos int
}

// entry parses one ["piece", score] pair.
func (s *vocabScanner) entry() (text []byte, score float64, err error) {
	if !s.consume('[') {
		return nil, 0, s.fail("want [")
	}
	if text, err = s.str(); err != nil {
		return nil, 0, err
	}
	if !s.consume(',') {
		return nil, 0, s.fail("want , after the piece")
	}
	if score, err = s.number(); err != nil {
		return nil, 0, err
	}
	if !s.consume(']') {
		return nil, 0, s.fail("want ] after the score")
	}
	return text, score, nil
}

func (s *vocabScanner) skipSpace() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *vocabScanner) consume(c byte) bool {
	s.skipSpace()
	if s.pos < len(s.b) && s.b[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

func (s *vocabScanner) fail(what string) error {
	return fmt.Errorf("%s at byte %d", what, s.pos)
}

// str parses a JSON string. Strings without escapes and with valid UTF-8
// are taken as they are; others go through encoding/json.
func (s *vocabScanner) str() ([]byte, error) {
	if !s.consume('"') {
		return nil, s.fail("want a string")
	}
	start, plain := s.pos, true
	for ; s.pos < len(s.b) && s.b[s.pos] != '"'; s.pos++ {
		if s.b[s.pos] == '\\' {
			plain = false
			s.pos++
		}
	}
	if s.pos >= len(s.b) {
		return nil, errors.New("unterminated string")
	}
	body := s.b[start:s.pos]
	s.pos++
	if plain && utf8.Valid(body) {
		return body, nil
	}
	var v string
	if err := json.Unmarshal(s.b[start-1:s.pos], &v); err != nil {
		return nil, err
	}
	return []byte(v), nil
}

func (s *vocabScanner) number() (float64, error) {
	s.skipSpace()
	start := s.pos
	for ; s.pos < len(s.b); s.pos++ {
		c := s.b[s.pos]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			break
		}
	}
	v, err := strconv.ParseFloat(string(s.b[start:s.pos]), 64)
	if err != nil {
		return 0, s.fail("want a number")
	}
	return v, nil
}
