package tokenizer

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// bigVocabSize is UMT5's vocabulary size.
const bigVocabSize = 256384

var (
	bigModelOnce sync.Once
	bigModelVal  *Model
)

// bigModel synthesizes a UMT5-sized model: every 1-3 letter string with and
// without "▁", then random longer ones, with Zipf-like scores, plus the
// golden model's nmt_nfkc charsmap.
func bigModel(b *testing.B) *Model {
	bigModelOnce.Do(func() {
		charsmap := loadGolden(b, "umt5style").Model().Normalizer.PrecompiledCharsmap
		rng := rand.New(rand.NewPCG(1, 2))
		seen := make(map[string]bool)
		var pieces []Piece
		add := func(s string) {
			if !seen[s] {
				seen[s] = true
				rank := float64(len(pieces) + 1)
				pieces = append(pieces, Piece{Text: s, Score: float32(-math.Log(rank) - 1), Type: Normal})
			}
		}
		add(spaceSymbol)
		const letters = "abcdefghijklmnopqrstuvwxyz"
		for _, prefix := range []string{spaceSymbol, ""} {
			for n := 1; n <= 3; n++ {
				for i := 0; i < pow(26, n); i++ {
					add(prefix + word(i, n, letters))
				}
			}
		}
		for len(pieces) < bigVocabSize-3-256 {
			n := 4 + rng.IntN(6)
			prefix := ""
			if rng.IntN(2) == 0 {
				prefix = spaceSymbol
			}
			add(prefix + word(rng.IntN(pow(26, min(n, 6))), n, letters))
		}
		m, err := NewUMT5StyleModel(pieces, charsmap)
		if err != nil {
			b.Fatal(err)
		}
		bigModelVal = m
	})
	return bigModelVal
}

func pow(a, n int) int {
	r := 1
	for range n {
		r *= a
	}
	return r
}

// word spells i in base len(letters) with n digits.
func word(i, n int, letters string) string {
	buf := make([]byte, n)
	for k := n - 1; k >= 0; k-- {
		buf[k] = letters[i%len(letters)]
		i /= len(letters)
	}
	return string(buf)
}

// prompt512 is a long video prompt of about 512 UMT5 tokens.
var prompt512 = strings.Repeat("A golden retriever runs across a sunlit meadow at dusk, "+
	"cinematic lighting, shallow depth of field, 4k, slow motion, gentle wind in the grass. "+
	"Überraschung: 猫が歩く — “quoted” text… ", 7)

func BenchmarkLoadSentencePiece256k(b *testing.B) {
	data := bigModel(b).Marshal()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := ParseModel(data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := NewTokenizer(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadHF256k(b *testing.B) {
	data := hfJSON(b, bigModel(b))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseHF(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	big, err := NewTokenizer(bigModel(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tok  *Tokenizer
	}{{"vocab256k", big}, {"golden600", loadGolden(b, "umt5style")}} {
		b.Run(c.name, func(b *testing.B) {
			n := len(c.tok.Encode(prompt512))
			b.SetBytes(int64(len(prompt512)))
			b.ReportAllocs()
			for b.Loop() {
				c.tok.Encode(prompt512)
			}
			b.ReportMetric(float64(n), "tokens/op")
		})
	}
}

func BenchmarkEncodeForModelWan(b *testing.B) {
	tok := loadGolden(b, "umt5style")
	b.ReportAllocs()
	for b.Loop() {
		tok.EncodeForModel("A cat walks on the grass, realistic", 512)
	}
}
