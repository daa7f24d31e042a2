package tokenizer

import (
	"math"
	"sync"
)

// unkPenalty is subtracted from the lowest piece score to score an unknown
// character (kUnkPenalty in sentencepiece and tokenizers).
const unkPenalty = 10

// flavor says whose arithmetic and vocabulary rules the segmenter follows.
type flavor int

const (
	// sentencepieceFlavor: float32 path scores compared against float64
	// candidates (unigram_model.cc, EncodeOptimized), USER_DEFINED bonus,
	// UNUSED pieces skipped, CONTROL/UNKNOWN/BYTE pieces not matchable.
	sentencepieceFlavor flavor = iota
	// huggingFaceFlavor: float64 throughout, every vocabulary entry matchable
	// (tokenizers' Unigram::encode_optimized).
	huggingFaceFlavor
)

// unigram segments normalized text into the pieces of a unigram model with
// the highest total score (Viterbi over the lattice of matching pieces).
type unigram struct {
	flavor       flavor
	trie         *pieceTrie
	scores       []float64
	types        []PieceType
	unkID        int32
	unkScore     float64
	maxScore     float32 // sentencepiece: base of the USER_DEFINED bonus
	byteFallback bool
	byteIDs      [256]int32 // -1 where the vocabulary has no such byte piece
}

// newSentencePieceUnigram builds the segmenter the way sentencepiece's
// unigram::Model does.
func newSentencePieceUnigram(m *Model) *unigram {
	u := &unigram{flavor: sentencepieceFlavor, byteFallback: m.Trainer.ByteFallback}
	u.init(m.Pieces)
	minScore, maxScore := float32(math.MaxFloat32), float32(minNormalFloat32)
	keys := make([]trieKey, 0, len(m.Pieces))
	for id, p := range m.Pieces {
		switch p.Type {
		case Normal:
			minScore = min(minScore, p.Score)
			maxScore = max(maxScore, p.Score)
			keys = append(keys, trieKey{p.Text, int32(id)})
		case UserDefined, Unused:
			keys = append(keys, trieKey{p.Text, int32(id)})
		}
	}
	u.trie = buildTrie(keys)
	u.maxScore = maxScore
	u.unkScore = float64(minScore - unkPenalty) // float arithmetic, as in C++
	return u
}

// minNormalFloat32 is C's FLT_MIN, sentencepiece's initial max_score_.
const minNormalFloat32 = 0x1p-126

// newHFUnigram builds the segmenter the way tokenizers' Unigram::from does:
// every vocabulary entry goes into the trie, the unknown score derives from
// the lowest score of all entries.
func newHFUnigram(pieces []Piece, scores []float64, unkID int32, byteFallback bool) *unigram {
	u := &unigram{flavor: huggingFaceFlavor, byteFallback: byteFallback}
	u.init(pieces)
	u.scores = scores
	minScore := math.Inf(1)
	keys := make([]trieKey, len(pieces))
	for id, p := range pieces {
		keys[id] = trieKey{p.Text, int32(id)}
		minScore = min(minScore, scores[id])
	}
	u.trie = buildTrie(keys)
	u.unkID = unkID
	u.unkScore = minScore - unkPenalty
	return u
}

func (u *unigram) init(pieces []Piece) {
	u.scores = make([]float64, len(pieces))
	u.types = make([]PieceType, len(pieces))
	u.unkID = -1
	for i := range u.byteIDs {
		u.byteIDs[i] = -1
	}
	for id, p := range pieces {
		u.scores[id] = float64(p.Score)
		u.types[id] = p.Type
		if p.Type == Unknown {
			u.unkID = int32(id)
		}
		if b, ok := pieceToByte(p.Text); ok && (p.Type == Byte || u.flavor == huggingFaceFlavor) {
			u.byteIDs[b] = int32(id)
		}
	}
}

// bestPath is the best path ending at one byte position of the text.
type bestPath struct {
	score float64 // total score; float32-valued in sentencepiece flavor
	start int32   // where its last piece starts; -1 while unreached
	id    int32   // its last piece
}

var bestPathPool = sync.Pool{New: func() any { return new([]bestPath) }}

// span is one piece of a segmentation: text[start:end] is piece id.
type span struct {
	start, end int32
	id         int32
}

// segment appends the best segmentation of text to spans, left to right.
func (u *unigram) segment(text string, spans []span) []span {
	if text == "" {
		return spans
	}
	bufp := bestPathPool.Get().(*[]bestPath)
	defer bestPathPool.Put(bufp)
	best := u.lattice(text, (*bufp)[:0])
	*bufp = best

	first := len(spans)
	for end := int32(len(text)); end > 0; {
		b := best[end]
		spans = append(spans, span{b.start, end, b.id})
		end = b.start
	}
	for i, j := first, len(spans)-1; i < j; i, j = i+1, j-1 {
		spans[i], spans[j] = spans[j], spans[i]
	}
	return spans
}

// lattice fills best[i] with the best path ending at byte i. Ties keep the
// candidate found first, i.e. the one whose last piece starts earliest.
func (u *unigram) lattice(text string, best []bestPath) []bestPath {
	size := len(text)
	best = append(best, make([]bestPath, size+1)...)
	for i := range best {
		best[i] = bestPath{start: -1}
	}
	best[0].start = 0
	for start := 0; start < size; {
		charLen := min(oneCharLen(text[start]), size-start)
		single := u.extend(text, start, charLen, best)
		if !single {
			u.relaxUnknown(best, start, charLen)
		}
		start += charLen
	}
	return best
}

// extend relaxes every piece that starts at byte start and reports whether
// one of them covers exactly the first character.
func (u *unigram) extend(text string, start, charLen int, best []bestPath) (single bool) {
	till := best[start].score
	node := int32(0)
	t := u.trie
	for pos := start; pos < len(text); pos++ {
		node = t.child(node, text[pos])
		if node < 0 {
			break
		}
		id := t.value[node]
		if id < 0 || (u.flavor == sentencepieceFlavor && u.types[id] == Unused) {
			continue
		}
		length := pos + 1 - start
		u.relax(&best[pos+1], u.pieceScore(id, length)+till, start, id)
		if length == charLen {
			single = true
		}
	}
	return single
}

// pieceScore is the score a piece contributes. sentencepiece scores a
// USER_DEFINED piece as length*max_score - 0.1 so it always wins.
func (u *unigram) pieceScore(id int32, length int) float64 {
	if u.flavor == sentencepieceFlavor && u.types[id] == UserDefined {
		return float64(float32(length)*u.maxScore) - 0.1
	}
	return u.scores[id]
}

// relax offers a candidate path to target. In sentencepiece flavor the
// candidate is compared in double precision and stored as float, as the C++
// code does.
func (u *unigram) relax(target *bestPath, candidate float64, start int, id int32) {
	if target.start >= 0 && !(candidate > target.score) {
		return
	}
	if u.flavor == sentencepieceFlavor {
		candidate = float64(float32(candidate))
	}
	*target = bestPath{score: candidate, start: int32(start), id: id}
}

// relaxUnknown offers the unknown piece for the character at start.
func (u *unigram) relaxUnknown(best []bestPath, start, charLen int) {
	candidate := u.unkScore + best[start].score
	if u.flavor == sentencepieceFlavor {
		candidate = float64(float32(u.unkScore) + float32(best[start].score))
	}
	u.relax(&best[start+charLen], candidate, start, u.unkID)
}

// appendIDs appends the ids of spans. Consecutive unknown pieces fuse into
// one <unk>, or, with byte fallback, into the <0xNN> pieces of their bytes.
func (u *unigram) appendIDs(ids []int32, text string, spans []span) []int32 {
	for i := 0; i < len(spans); {
		s := spans[i]
		if s.id != u.unkID {
			ids = append(ids, s.id)
			i++
			continue
		}
		j := u.unknownRun(spans, i)
		unk := text[s.start:spans[j-1].end]
		if u.bytesKnown(unk) {
			for k := 0; k < len(unk); k++ {
				ids = append(ids, u.byteIDs[unk[k]])
			}
		} else {
			ids = append(ids, u.unkID)
		}
		i = j
	}
	return ids
}

// appendPieces is appendIDs for piece strings: a fused unknown run is one
// piece holding its text, as sentencepiece reports it.
func (u *unigram) appendPieces(pieces []string, text string, spans []span) []string {
	for i := 0; i < len(spans); {
		s := spans[i]
		if s.id != u.unkID {
			pieces = append(pieces, text[s.start:s.end])
			i++
			continue
		}
		j := u.unknownRun(spans, i)
		unk := text[s.start:spans[j-1].end]
		if u.bytesKnown(unk) {
			for k := 0; k < len(unk); k++ {
				pieces = append(pieces, bytePiece(unk[k]))
			}
		} else {
			pieces = append(pieces, unk)
		}
		i = j
	}
	return pieces
}

// unknownRun returns the end of the run of unknown spans starting at i.
func (u *unigram) unknownRun(spans []span, i int) int {
	j := i + 1
	for j < len(spans) && spans[j].id == u.unkID {
		j++
	}
	return j
}

// bytesKnown reports whether byte fallback applies to s: it is on and every
// byte of s has a piece.
func (u *unigram) bytesKnown(s string) bool {
	if !u.byteFallback {
		return false
	}
	for i := 0; i < len(s); i++ {
		if u.byteIDs[s[i]] < 0 {
			return false
		}
	}
	return true
}
