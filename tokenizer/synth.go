package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// NewUMT5StyleModel builds a unigram model laid out like UMT5's spiece.model:
// <pad> (0), </s> (1), <unk> (2), the 256 byte pieces <0x00>..<0xFF> (ids
// 3..258, byte fallback on), then pieces in order (a zero Type means
// NORMAL). The normalizer is nmt_nfkc with add_dummy_prefix: pass a
// precompiled_charsmap copied from a real model to match sentencepiece
// exactly, or nil to normalize with golang.org/x/text's NFKC plus
// sentencepiece's NMT rules.
func NewUMT5StyleModel(pieces []Piece, charsmap []byte) (*Model, error) {
	all := make([]Piece, 0, 3+256+len(pieces))
	all = append(all,
		Piece{Text: "<pad>", Type: Control},
		Piece{Text: "</s>", Type: Control},
		Piece{Text: "<unk>", Type: Unknown},
	)
	for b := 0; b < 256; b++ {
		all = append(all, Piece{Text: bytePiece(byte(b)), Type: Byte})
	}
	all = append(all, pieces...)
	trainer := DefaultTrainerSpec()
	trainer.PadID, trainer.EosID, trainer.UnkID, trainer.BosID = 0, 1, 2, -1
	trainer.ByteFallback = true
	normalizer := DefaultNormalizerSpec()
	normalizer.Name = "nmt_nfkc"
	normalizer.PrecompiledCharsmap = charsmap
	if len(charsmap) > 0 {
		if _, err := parseCharsmap(charsmap); err != nil {
			return nil, fmt.Errorf("new UMT5-style model: %w", err)
		}
	}
	return NewModel(all, trainer, normalizer)
}

// WriteFolder writes m as a transformers T5Tokenizer folder (spiece.model,
// tokenizer_config.json with legacy=True, special_tokens_map.json), the
// layout of a Wan 2.1 checkpoint's tokenizer/ directory. Load reads it back.
func (m *Model) WriteFolder(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var model bytes.Buffer
	if err := m.WriteSentencePiece(&model); err != nil {
		return err
	}
	config, tokens, err := m.folderConfigs()
	if err != nil {
		return err
	}
	files := map[string][]byte{"spiece.model": model.Bytes(), "tokenizer_config.json": config, "special_tokens_map.json": tokens}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// folderConfigs renders tokenizer_config.json and special_tokens_map.json.
func (m *Model) folderConfigs() (config, tokens []byte, err error) {
	name := func(id int32) string {
		if id < 0 || int(id) >= len(m.Pieces) {
			return ""
		}
		return m.Pieces[id].Text
	}
	token := func(content string) map[string]any {
		return map[string]any{"content": content, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false}
	}
	decoder := map[string]any{}
	special := map[string]any{}
	for id, p := range m.Pieces {
		if p.Type == Control || p.Type == Unknown {
			t := token(p.Text)
			t["special"] = true
			decoder[strconv.Itoa(id)] = t
		}
	}
	cfg := map[string]any{
		"tokenizer_class": "T5Tokenizer", "legacy": true, "extra_ids": 0,
		"additional_special_tokens": []string{}, "added_tokens_decoder": decoder,
		"clean_up_tokenization_spaces": false, "sp_model_kwargs": map[string]any{},
	}
	for key, id := range map[string]int32{"eos_token": m.Trainer.EosID, "pad_token": m.Trainer.PadID, "unk_token": m.Trainer.UnkID} {
		if n := name(id); n != "" {
			cfg[key] = n
			special[key] = token(n)
		}
	}
	if config, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return nil, nil, err
	}
	tokens, err = json.MarshalIndent(special, "", "  ")
	return config, tokens, err
}
