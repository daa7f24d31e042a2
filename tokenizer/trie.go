package tokenizer

import (
	"slices"
)

// pieceTrie is a byte trie over piece strings, stored as flat arrays: the
// children of a node are contiguous and sorted by label, so a lookup is a
// short scan and the whole trie is a handful of allocations even for a
// 256k-piece vocabulary. The root's children are also indexed by byte.
type pieceTrie struct {
	first  []int32 // index of the node's first child
	count  []int32 // number of children
	label  []byte  // label of the edge into the node
	value  []int32 // piece id ending at the node, or -1
	root   [256]int32
	maxLen int // longest key in bytes

	duplicate string // a key given more than once, if any
}

type trieKey struct {
	key string
	id  int32
}

// buildTrie builds a trie over keys. When a key repeats, the entry with the
// highest id wins (callers reject duplicates where the format forbids them;
// the first repeated key found is kept in duplicate for them).
//
// Keys are distributed by their byte at each depth (an MSD radix sort fused
// with the construction), which is several times faster than sorting a
// 256k-piece vocabulary with string comparisons.
func buildTrie(keys []trieKey) *pieceTrie {
	n := len(keys)
	b := trieBuilder{keys: keys, idx: make([]int32, n), tmp: make([]int32, n), bk: make([]uint16, n), bkt: make([]uint16, n)}
	for i := range b.idx {
		b.idx[i] = int32(i)
	}
	t := newTrieArrays(nodeEstimate(keys))
	b.t = t
	t.addNode(0)
	stack := []trieSpan{{0, 0, len(keys), 0}}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		stack = b.expand(s, stack)
	}
	t.indexRoot()
	return t
}

// trieSpan is a trie node and the keys idx[lo:hi] below it, which share
// their first depth bytes.
type trieSpan struct{ node, lo, hi, depth int }

type trieBuilder struct {
	keys     []trieKey
	idx, tmp []int32  // key indices in trie order, scratch
	bk, bkt  []uint16 // bucket of idx[i] at the current depth, scratch
	t        *pieceTrie
}

// expand sets the node's value, creates its children (contiguous, in byte
// order) and pushes their spans.
func (b *trieBuilder) expand(s trieSpan, stack []trieSpan) []trieSpan {
	idx, bk := b.idx[s.lo:s.hi], b.bk[s.lo:s.hi]
	b.partition(s, idx, bk)
	t := b.t
	i := 0
	for ; i < len(idx) && bk[i] == 0; i++ { // keys ending here
		k := b.keys[idx[i]]
		id := k.id
		if v := t.value[s.node]; v >= 0 {
			if t.duplicate == "" {
				t.duplicate = k.key
			}
			id = max(id, v)
		}
		t.value[s.node] = id
		t.maxLen = max(t.maxLen, s.depth)
	}
	t.first[s.node] = int32(len(t.label))
	for i < len(idx) {
		j := i + 1
		for j < len(idx) && bk[j] == bk[i] {
			j++
		}
		child := t.addNode(byte(bk[i] - 1))
		stack = append(stack, trieSpan{child, s.lo + i, s.lo + j, s.depth + 1})
		t.count[s.node]++
		i = j
	}
	return stack
}

// partition orders idx (and bk, their buckets) by the byte at s.depth, keys
// that end at s.depth first (bucket 0; byte c is bucket c+1).
func (b *trieBuilder) partition(s trieSpan, idx []int32, bk []uint16) {
	for i, k := range idx {
		bk[i] = 0
		if key := b.keys[k].key; len(key) > s.depth {
			bk[i] = uint16(key[s.depth]) + 1
		}
	}
	if len(idx) <= 32 {
		for i := 1; i < len(idx); i++ { // insertion sort, stable
			for j := i; j > 0 && bk[j-1] > bk[j]; j-- {
				idx[j-1], idx[j] = idx[j], idx[j-1]
				bk[j-1], bk[j] = bk[j], bk[j-1]
			}
		}
		return
	}
	var count [258]int
	for _, c := range bk {
		count[c+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	tmp, bkt := b.tmp[:len(idx)], b.bkt[:len(idx)]
	for i, c := range bk {
		tmp[count[c]], bkt[count[c]] = idx[i], c
		count[c]++
	}
	copy(idx, tmp)
	copy(bk, bkt)
}

// nodeEstimate sizes the node arrays: vocabularies share prefixes, so about
// three nodes a key, never more than the key bytes.
func nodeEstimate(keys []trieKey) int {
	total := 1
	for _, k := range keys {
		total += len(k.key)
	}
	return min(total, 3*len(keys)+1)
}

func newTrieArrays(nodes int) *pieceTrie {
	return &pieceTrie{
		first: make([]int32, 0, nodes),
		count: make([]int32, 0, nodes),
		label: make([]byte, 0, nodes),
		value: make([]int32, 0, nodes),
	}
}

func (t *pieceTrie) addNode(label byte) int {
	t.first = append(t.first, 0)
	t.count = append(t.count, 0)
	t.label = append(t.label, label)
	t.value = append(t.value, -1)
	return len(t.label) - 1
}

func (t *pieceTrie) indexRoot() {
	for i := range t.root {
		t.root[i] = -1
	}
	first, n := t.first[0], t.count[0]
	for c := first; c < first+n; c++ {
		t.root[t.label[c]] = c
	}
}

// child returns the child of node along byte c, or -1.
func (t *pieceTrie) child(node int32, c byte) int32 {
	if node == 0 {
		return t.root[c]
	}
	first, n := t.first[node], t.count[node]
	labels := t.label[first : first+n]
	if n > 8 {
		i, ok := slices.BinarySearch(labels, c)
		if !ok {
			return -1
		}
		return first + int32(i)
	}
	for i, l := range labels {
		if l == c {
			return first + int32(i)
		}
		if l > c {
			break
		}
	}
	return -1
}

// prefixes calls visit(id, length) for every key that is a prefix of s, in
// order of increasing length, as darts-clone's commonPrefixSearch reports them.
func (t *pieceTrie) prefixes(s string, visit func(id int32, length int)) {
	node := int32(0)
	for i := 0; i < len(s); i++ {
		node = t.child(node, s[i])
		if node < 0 {
			return
		}
		if id := t.value[node]; id >= 0 {
			visit(id, i+1)
		}
	}
}

// longest returns the id and length of the longest key that is a prefix of
// s; length is 0 when there is none.
func (t *pieceTrie) longest(s string) (id int32, length int) {
	t.prefixes(s, func(i int32, n int) { id, length = i, n })
	return id, length
}

// lookup returns the id of key, or -1.
func (t *pieceTrie) lookup(key string) int32 {
	node := int32(0)
	for i := 0; i < len(key); i++ {
		node = t.child(node, key[i])
		if node < 0 {
			return -1
		}
	}
	return t.value[node]
}
