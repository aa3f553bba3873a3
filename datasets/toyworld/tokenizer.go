package toyworld

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// TokenizerSize is the number of Qwen3 BPE tokens the toyworld tokenizer
// keeps: ids 0…255 are the byte alphabet and id 256+i is merge i, so the
// first TokenizerSize ids and TokenizerSize−256 merges are a complete
// byte-level BPE. 10,240 keeps every answer token of the yes/no judge
// (" yes" is 9834).
const TokenizerSize = 10240

// NumberTokens is the largest number the judge's tokenizer writes as one
// token (JudgeTokenizer).
const NumberTokens = 999

// Tokenizer writes to out a tokenizer.json and tokenizer_config.json made
// from Qwen3's in qwenDir: its first TokenizerSize tokens and merges, and
// its added tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <think> …)
// renumbered from TokenizerSize on, so a model's vocabulary is about 10k
// rows instead of 152k. Both files load in HF tokenizers/transformers and
// in evolm.
func Tokenizer(qwenDir, out string) error { return writeTokenizer(qwenDir, out, false) }

// JudgeTokenizer is Tokenizer with every number from 10 to NumberTokens
// one (non-special) added token, as GPT-4's tokenizer chunks digits in
// threes: the judge then compares the answer a criterion states with the
// response's token to token, which a tiny model learns in minutes, while
// the policy's tokenizer (Tokenizer) keeps Qwen3's digit-by-digit
// arithmetic.
func JudgeTokenizer(qwenDir, out string) error { return writeTokenizer(qwenDir, out, true) }

func writeTokenizer(qwenDir, out string, numbers bool) error {
	var tok map[string]json.RawMessage
	if err := readJSON(filepath.Join(qwenDir, "tokenizer.json"), &tok); err != nil {
		return err
	}
	var mdl map[string]json.RawMessage
	if err := json.Unmarshal(tok["model"], &mdl); err != nil {
		return fmt.Errorf("tokenizer.json model: %w", err)
	}
	var vocab map[string]int
	var merges []json.RawMessage
	if err := json.Unmarshal(mdl["vocab"], &vocab); err != nil {
		return fmt.Errorf("tokenizer.json model.vocab: %w", err)
	}
	if err := json.Unmarshal(mdl["merges"], &merges); err != nil {
		return fmt.Errorf("tokenizer.json model.merges: %w", err)
	}
	kept := map[string]int{}
	for t, id := range vocab {
		if id < TokenizerSize {
			kept[t] = id
		}
	}
	if len(kept) != TokenizerSize || len(merges) < TokenizerSize-256 {
		return fmt.Errorf("%s: not Qwen3's byte-level BPE (ids 0…%d not all present)", qwenDir, TokenizerSize-1)
	}
	mdl["vocab"], _ = json.Marshal(kept)
	mdl["merges"], _ = json.Marshal(merges[:TokenizerSize-256])
	tok["model"], _ = json.Marshal(mdl)

	var added []map[string]any
	if err := json.Unmarshal(tok["added_tokens"], &added); err != nil {
		return fmt.Errorf("tokenizer.json added_tokens: %w", err)
	}
	newID := map[string]int{}
	for i, a := range added {
		old := strconv.Itoa(int(a["id"].(float64)))
		a["id"] = TokenizerSize + i
		newID[old] = TokenizerSize + i
	}
	var numDecoder map[string]any
	if numbers {
		numDecoder = map[string]any{}
		for n := 10; n <= NumberTokens; n++ {
			id := TokenizerSize + len(added)
			added = append(added, map[string]any{"id": id, "content": strconv.Itoa(n), "single_word": false,
				"lstrip": false, "rstrip": false, "normalized": false, "special": false})
			numDecoder[strconv.Itoa(id)] = map[string]any{"content": strconv.Itoa(n), "single_word": false,
				"lstrip": false, "rstrip": false, "normalized": false, "special": false}
		}
	}
	tok["added_tokens"], _ = json.Marshal(added)

	var cfg map[string]json.RawMessage
	if err := readJSON(filepath.Join(qwenDir, "tokenizer_config.json"), &cfg); err != nil {
		return err
	}
	var dec map[string]json.RawMessage
	if err := json.Unmarshal(cfg["added_tokens_decoder"], &dec); err != nil {
		return fmt.Errorf("tokenizer_config.json added_tokens_decoder: %w", err)
	}
	renum := map[string]json.RawMessage{}
	for old, v := range dec {
		id, ok := newID[old]
		if !ok {
			return fmt.Errorf("tokenizer_config.json: added token %s is not in tokenizer.json", old)
		}
		renum[strconv.Itoa(id)] = v
	}
	for id, v := range numDecoder {
		renum[id], _ = json.Marshal(v)
	}
	cfg["added_tokens_decoder"], _ = json.Marshal(renum)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(out, "tokenizer.json"), tok); err != nil {
		return err
	}
	return writeJSON(filepath.Join(out, "tokenizer_config.json"), cfg)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
