package pytext

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "ftfy", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// TestFixTextMatchesFtfy: FixText against ftfy 6.3.1's fix_text on the
// inputs of testdata/ftfy/cases.json (see its README).
func TestFixTextMatchesFtfy(t *testing.T) {
	var cases []struct{ In, Want string }
	readJSON(t, "cases.json", &cases)
	if len(cases) < 300 {
		t.Fatalf("only %d cases", len(cases))
	}
	failed := 0
	for _, c := range cases {
		if got := FixText(c.In); got != c.Want {
			failed++
			if failed <= 20 {
				t.Errorf("FixText(%+q) = %+q, want %+q", c.In, got, c.Want)
			}
		}
	}
	t.Logf("%d cases, %d failed", len(cases), failed)
}

// TestIsBadMatchesFtfy: isBad against ftfy.badness.is_bad.
func TestIsBadMatchesFtfy(t *testing.T) {
	var cases []struct {
		In  string
		Bad bool
	}
	readJSON(t, "isbad.json", &cases)
	for _, c := range cases {
		if got := isBad(c.In); got != c.Bad {
			t.Errorf("isBad(%+q) = %v, want %v", c.In, got, c.Bad)
		}
	}
}

// TestCharmapPossible: possible_encoding for each of ftfy's codecs, in
// CHARMAP_ENCODINGS order; want values are Python's (1 = encodable).
func TestCharmapPossible(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "1111111111"},
		{"é", "1101011111"},
		{"\x1a", "1000000111"}, // the sloppy codecs spend 0x1A on U+FFFD
		{"\ufffd", "0111111000"},
		{"€", "0111111010"},
		{"Ж", "0010000000"},
		{"\u0081", "1101111100"},
		{"\u008d", "1100110100"},
		{"ő", "0001000100"},
		{"√", "0000000011"},
		{"╬", "0000000001"},
		{"Ÿ", "0100010010"},
		{"ÿ", "1100110011"},
		{"ğ", "0000010000"},
		{"ą", "0001001100"},
		{"\uf8ff", "0000000010"},
		{"é€", "0101011010"},
	}
	if len(charmaps) != 10 {
		t.Fatalf("%d charmaps", len(charmaps))
	}
	for _, tt := range tests {
		got := ""
		for _, cm := range charmaps {
			if cm.possible(tt.in) {
				got += "1"
			} else {
				got += "0"
			}
		}
		if got != tt.want {
			t.Errorf("possible(%+q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestSloppyTables: undefined bytes decode to the code point of the same
// number, 0x1A to U+FFFD, and encoding inverts decoding.
func TestSloppyTables(t *testing.T) {
	byName := map[string]*charmap{}
	for _, cm := range charmaps {
		byName[cm.name] = cm
		for b, r := range cm.decode {
			if got := cm.encodeString(string(r)); len(got) != 1 || got[0] != byte(b) {
				t.Errorf("%s: encode(%+q) = %x, want %02x", cm.name, r, got, b)
			}
		}
	}
	tests := []struct {
		codec string
		b     byte
		want  rune
	}{
		{"sloppy-windows-1252", 0x80, '€'},
		{"sloppy-windows-1252", 0x81, 0x81},
		{"sloppy-windows-1252", 0x9d, 0x9d},
		{"sloppy-windows-1252", 0x1a, 0xfffd},
		{"sloppy-windows-1253", 0xaa, 0xaa},
		{"sloppy-windows-1253", 0xd2, 0xd2},
		{"sloppy-windows-1253", 0xff, 0xff},
		{"sloppy-windows-1257", 0xa1, 0xa1},
		{"sloppy-windows-1251", 0x98, 0x98},
		{"sloppy-windows-1251", 0xc6, 'Ж'},
		{"latin-1", 0x1a, 0x1a},
		{"macroman", 0xf0, 0xf8ff},
		{"cp437", 0xce, '╬'},
	}
	for _, tt := range tests {
		if got := byName[tt.codec].decode[tt.b]; got != tt.want {
			t.Errorf("%s: %02x decodes to %U, want %U", tt.codec, tt.b, got, tt.want)
		}
	}
}

// TestDecodeUTF8Variants: ftfy's utf-8-variants codec; expectations are
// Python's ("" = UnicodeDecodeError).
func TestDecodeUTF8Variants(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xc0\x80", "\x00"},
		{"a\xc0\x80b", "a\x00b"},
		{"\xc0", ""},
		{"\xc0\n", "\x00"}, // Python's '$' matches before a final '\n'
		{"\xc0a", ""},
		{"\xed\xa0\xbd\xed\xb2\xa9", "💩"},
		{"x\xed\xa0\xbd\xed\xb2\xa9y", "x💩y"},
		{"\xed\xa0\xbd\xed\xb2\n", "💊"},
		{"\xed\xa0\xbd\xed\xb2\nz", ""},
		{"\xed\xa0\xbd", ""},
		{"\xed\xb2\xa9abcdef", ""},
		{"\xed\x95\x9c", "한"},
		{"\xed\n", ""},
		{"\xed", ""},
		{"\xed\x95\x9c\xc0\x80", "한\x00"},
		{"\xff\xc0\x80", ""},
		{"\xe2\x82\xac\xed\xa0\xbd\xed\xb2\xa9", "€💩"},
	}
	for _, tt := range tests {
		got, ok := decodeUTF8Variants([]byte(tt.in))
		if !ok {
			got = ""
		}
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("decodeUTF8Variants(%+q) = %+q, %v; want %+q", tt.in, got, ok, tt.want)
		}
	}
}

// TestIsBad: a few strings of ftfy's badness heuristic.
func TestIsBad(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"Hello, World!", false},
		{"\u0080", true},
		{"Ã¡.", true},
		{"schÃ¶n", true},
		{"AHÅ™, the new sofa from IKEA®", false},
		{"Charlotte Brontë…”", false},
		{"ГўВЂВX ", true},
		{"aÂ ", true},
		{"À°", true},
		{"ā€", true},
		{"ÀÑØÜÝĂĄĆČĎĐĘ", false},
		{"(╯°□°)╯︵ ┻━┻", false},
		{"Ð¿Ñ€Ð¸", true},
	}
	for _, tt := range tests {
		if got := isBad(tt.in); got != tt.want {
			t.Errorf("isBad(%+q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
