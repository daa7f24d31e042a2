package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// goldenCase is one entry of testdata/*/cases.json, produced by
// SentencePieceProcessor(model_file).encode(text) (sentencepiece 0.1.97).
type goldenCase struct {
	Text    string   `json:"text"`
	IDs     []int32  `json:"ids"`
	Pieces  []string `json:"pieces"`
	Decoded string   `json:"decoded"`
}

var goldenModels = []string{"t5style", "umt5style"}

func readCases(t testing.TB, model string) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", model, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatalf("%s: no cases", model)
	}
	return file.Cases
}

func loadGolden(t testing.TB, model string) *Tokenizer {
	t.Helper()
	tok, err := LoadSentencePiece(filepath.Join("testdata", model, "spiece.model"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestGoldenEncode(t *testing.T) {
	for _, model := range goldenModels {
		tok := loadGolden(t, model)
		for _, c := range readCases(t, model) {
			t.Run(fmt.Sprintf("%s/%q", model, c.Text), func(t *testing.T) {
				if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
					t.Errorf("ids\n got %v\nwant %v", got, c.IDs)
				}
				if got := tok.EncodePieces(c.Text); !slices.Equal(got, c.Pieces) && !(len(got) == 0 && len(c.Pieces) == 0) {
					t.Errorf("pieces\n got %q\nwant %q", got, c.Pieces)
				}
				if got := tok.Decode(c.IDs); got != c.Decoded {
					t.Errorf("decode\n got %q\nwant %q", got, c.Decoded)
				}
			})
		}
	}
}

// TestGoldenVocab checks the protobuf decoding against the vocabulary the
// reference dumped (piece, score) for every id.
func TestGoldenVocab(t *testing.T) {
	for _, model := range goldenModels {
		tok := loadGolden(t, model)
		data, err := os.ReadFile(filepath.Join("testdata", model, "vocab.json"))
		if err != nil {
			t.Fatal(err)
		}
		var vocab [][2]any
		if err := json.Unmarshal(data, &vocab); err != nil {
			t.Fatal(err)
		}
		if tok.VocabSize() != len(vocab) {
			t.Fatalf("%s: vocab size %d, want %d", model, tok.VocabSize(), len(vocab))
		}
		for id, entry := range vocab {
			p := tok.Model().Pieces[id]
			if p.Text != entry[0].(string) || float64(p.Score) != entry[1].(float64) {
				t.Errorf("%s: piece %d = (%q, %v), want %v", model, id, p.Text, p.Score, entry)
			}
			if got, ok := tok.PieceToID(p.Text); !ok || int(got) != id {
				t.Errorf("%s: PieceToID(%q) = %d, %v; want %d", model, p.Text, got, ok, id)
			}
		}
	}
}

// TestGoldenEncodeForModel checks that the transformers call appends </s>
// (id 1) to sentencepiece's ids, as manifest.json notes for both models.
func TestGoldenEncodeForModel(t *testing.T) {
	for _, model := range goldenModels {
		tok := loadGolden(t, model)
		for _, c := range readCases(t, model) {
			if c.Text == "<unk> </s> <pad>" {
				continue // special tokens; see TestSpecialTokensInText
			}
			ids, mask := tok.EncodeForModel(c.Text, 0)
			want := append(slices.Clone(c.IDs), 1)
			if !slices.Equal(ids, want) {
				t.Errorf("%s %q: ids %v, want %v", model, c.Text, ids, want)
			}
			if len(mask) != len(ids) || slices.Contains(mask, 0) {
				t.Errorf("%s %q: mask %v for unpadded ids", model, c.Text, mask)
			}
		}
	}
}

// TestWanPipelineIDs checks the exact ids and masks WanPipeline got from
// its tokenizer folder (T5Tokenizer legacy=True, max_sequence_length 32).
func TestWanPipelineIDs(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, filepath.Join("testdata", "umt5style", "spiece.model"), filepath.Join(dir, "spiece.model"))
	for _, name := range []string{"tokenizer_config.json", "special_tokens_map.json"} {
		copyFile(t, filepath.Join("testdata", "wan_pipeline", name), filepath.Join(dir, name))
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tensors := readI64Safetensors(t, filepath.Join("testdata", "wan_pipeline", "inputs.safetensors"))
	for _, c := range []struct{ text, ids, mask string }{
		{"A cat walks on the grass, realistic", "prompt_input_ids", "prompt_attention_mask"},
		{"blurry, low quality", "negative_input_ids", "negative_attention_mask"},
	} {
		ids, mask := tok.EncodeForModel(c.text, 32)
		if want := tensors[c.ids]; !slices.Equal(ids, want) {
			t.Errorf("%q ids\n got %v\nwant %v", c.text, ids, want)
		}
		if want := tensors[c.mask]; !slices.Equal(mask, want) {
			t.Errorf("%q mask\n got %v\nwant %v", c.text, mask, want)
		}
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readI64Safetensors reads the I64 tensors of a safetensors file: an
// 8-byte little-endian header length, a JSON header, then the data.
func readI64Safetensors(t testing.TB, path string) map[string][]int32 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	body := data[8+n:]
	out := make(map[string][]int32)
	for name, raw := range header {
		var info struct {
			Dtype   string   `json:"dtype"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if name == "__metadata__" || json.Unmarshal(raw, &info) != nil || info.Dtype != "I64" {
			continue
		}
		b := body[info.Offsets[0]:info.Offsets[1]]
		vals := make([]int32, len(b)/8)
		for i := range vals {
			vals[i] = int32(int64(binary.LittleEndian.Uint64(b[8*i:])))
		}
		out[name] = vals
	}
	return out
}
