package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// folderConfig is what tokenizer_config.json and special_tokens_map.json
// say about special tokens. Nil names were not given.
type folderConfig struct {
	eos, pad, unk *string
	added         []addedToken // added_tokens_decoder
	additional    []string     // additional_special_tokens
	extraIDs      int
}

// tokenValue decodes a special token given as "</s>", as
// {"content": "</s>", ...}, or as null.
type tokenValue struct {
	set     bool
	content string
}

func (v *tokenValue) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if err := json.Unmarshal(b, &v.content); err == nil {
		v.set = true
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("special token is neither a string nor an object: %s", truncate(b, 40))
	}
	v.set, v.content = true, obj.Content
	return nil
}

type addedTokenJSON struct {
	ID      *int32 `json:"id"` // tokenizer.json only; the config keys by id
	Content string `json:"content"`
	LStrip  bool   `json:"lstrip"`
	RStrip  bool   `json:"rstrip"`
	Special bool   `json:"special"`
}

type tokenizerConfigJSON struct {
	EOS        tokenValue                `json:"eos_token"`
	Pad        tokenValue                `json:"pad_token"`
	Unk        tokenValue                `json:"unk_token"`
	Additional []tokenValue              `json:"additional_special_tokens"`
	ExtraIDs   int                       `json:"extra_ids"`
	Decoder    map[string]addedTokenJSON `json:"added_tokens_decoder"`
}

// readFolderConfig reads the optional config files of a tokenizer folder;
// values in special_tokens_map.json win, as in transformers.
func readFolderConfig(dir string) (folderConfig, error) {
	var cfg folderConfig
	var tc, sm tokenizerConfigJSON
	if err := readOptionalJSON(filepath.Join(dir, "tokenizer_config.json"), &tc); err != nil {
		return cfg, err
	}
	if err := readOptionalJSON(filepath.Join(dir, "special_tokens_map.json"), &sm); err != nil {
		return cfg, err
	}
	for _, c := range []tokenizerConfigJSON{tc, sm} {
		setName(&cfg.eos, c.EOS)
		setName(&cfg.pad, c.Pad)
		setName(&cfg.unk, c.Unk)
		if c.Additional != nil {
			cfg.additional = cfg.additional[:0]
			for _, a := range c.Additional {
				cfg.additional = append(cfg.additional, a.content)
			}
		}
	}
	cfg.extraIDs = tc.ExtraIDs
	added, err := decoderTokens(tc.Decoder)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
	}
	cfg.added = added
	return cfg, nil
}

func setName(dst **string, v tokenValue) {
	if v.set {
		s := v.content
		*dst = &s
	}
}

// decoderTokens turns added_tokens_decoder ({"1": {"content": "</s>"}})
// into tokens ordered by id.
func decoderTokens(m map[string]addedTokenJSON) ([]addedToken, error) {
	var out []addedToken
	for key, v := range m {
		id, err := strconv.ParseInt(key, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("added_tokens_decoder key %q is not a token id", key)
		}
		out = append(out, addedToken{content: v.Content, id: int32(id), lstrip: v.LStrip, rstrip: v.RStrip, special: v.Special})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

func readOptionalJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// applyConfig overrides the tokenizer's special tokens with a folder's config.
func (t *Tokenizer) applyConfig(cfg folderConfig) error {
	s := t.defaultSpecials()
	if cfg.eos != nil {
		s.eos = *cfg.eos
	}
	if cfg.pad != nil {
		s.pad = *cfg.pad
	}
	if cfg.unk != nil {
		s.unk = *cfg.unk
	}
	s.added, s.additional, s.extraIDs = cfg.added, cfg.additional, cfg.extraIDs
	if s.eos != "" {
		if _, ok := t.lookupOrAdded(s.eos, s.added); !ok {
			return fmt.Errorf("eos_token %q is not in the vocabulary", s.eos)
		}
	}
	t.applySpecials(s)
	return nil
}

func (t *Tokenizer) defaultSpecials() specials {
	if t.flavor == sentencepieceFlavor {
		return defaultSpecials(t.model)
	}
	return t.hf.specials
}

func (t *Tokenizer) lookupOrAdded(name string, added []addedToken) (int32, bool) {
	if id, ok := t.lookupPiece(name); ok {
		return id, true
	}
	for _, a := range added {
		if a.content == name {
			return a.id, true
		}
	}
	return t.PieceToID(name)
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
