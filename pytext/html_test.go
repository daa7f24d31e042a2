package pytext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestHTMLUnescape: Python 3.11's html.unescape on each input (checked
// with it when written).
func TestHTMLUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a & b", "a & b"},
		{"&amp;", "&"},
		{"&amp", "&"},
		{"&ampx", "&x"},
		{"&notit;", "¬it;"},
		{"&notin;", "∉"},
		{"&semi;", ";"},
		{"&nLt;", "\u226a\u20d2"}, // not in Go's table
		{"&nGt", "&nGt"},
		{"&CounterClockwiseContourIntegral;", "∳"},
		{"&#65;", "A"},
		{"&#x41", "A"},
		{"&#;", "&#;"},
		{"&#0;", "\uFFFD"},
		{"&#1;", ""}, // Go's html keeps control characters
		{"&#127;", ""},
		{"&#9;&#10;&#12;", "\t\n\x0c"},
		{"&#13;", "\r"},
		{"&#128;", "€"},
		{"&#x81;", "\u0081"},
		{"&#xD800;", "\uFFFD"},
		{"&#x110000;", "\uFFFD"},
		{"&#99999999999999999999;", "\uFFFD"},
		{"&#xFFFE;", ""},
		{"&#xFDD0;", ""},
	}
	for _, tt := range tests {
		if got := HTMLUnescape(tt.in); got != tt.want {
			t.Errorf("HTMLUnescape(%+q) = %+q, want %+q", tt.in, got, tt.want)
		}
	}
}

func TestStripAndCollapse(t *testing.T) {
	tests := []struct{ in, strip, collapse string }{
		{"  a  b\t\n", "a  b", " a b "},
		{"\x1ca\x1c", "a", "\x1ca\x1c"},
		{"a \x1c b", "a \x1c b", "a \x1c b"},
		{"\u00a0a\u3000\u2028b\u0085", "a\u3000\u2028b", " a b "},
		{"\u200ba\u200b", "\u200ba\u200b", "\u200ba\u200b"}, // zero width space is not white space
	}
	for _, tt := range tests {
		if got := Strip(tt.in); got != tt.strip {
			t.Errorf("Strip(%+q) = %+q, want %+q", tt.in, got, tt.strip)
		}
		if got := CollapseSpace(tt.in); got != tt.collapse {
			t.Errorf("CollapseSpace(%+q) = %+q, want %+q", tt.in, got, tt.collapse)
		}
	}
}

// FuzzHTMLUnescape: valid UTF-8 in gives valid UTF-8 out, and text
// without '&' is returned as is.
func FuzzHTMLUnescape(f *testing.F) {
	for _, s := range []string{"&amp;&#x41;&notit;", "&#99999999999;&nLt;", "&#xD800"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		got := HTMLUnescape(s)
		if !utf8.ValidString(got) {
			t.Fatalf("HTMLUnescape(%+q) = %+q, not UTF-8", s, got)
		}
		if !strings.Contains(s, "&") && got != s {
			t.Fatalf("HTMLUnescape(%+q) = %+q, want it unchanged", s, got)
		}
	})
}
