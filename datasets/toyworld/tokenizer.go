package toyworld

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NumberTokens is the largest number the judge's tokenizer writes as one
// token (JudgeTokenizer).
const NumberTokens = MaxNumber

// chatWords are texts a chat template adds around the messages (the role
// names), kept in the vocabulary with the data's own texts.
var chatWords = []string{"system", "user", "assistant", "\n"}

// Tokenizer writes to out a tokenizer.json and tokenizer_config.json made
// from Qwen3's in qwenDir, cut down to the texts of toyworld: the 256 byte
// tokens, then, in Qwen3's rank order, only the merges whose token occurs
// in one of corpus's texts (or a chat template's role names), renumbered
// from 256, and Qwen3's added tokens (<|endoftext|>, <|im_start|>,
// <|im_end|>, <think> …) after them. A merge fires on a text only if its
// token is a substring of that text, so every corpus text encodes to the
// same tokens as under Qwen3's full tokenizer; anything else still
// encodes, in shorter pieces. The vocabulary is a few hundred rows instead
// of 151,669, so the tiny models spend their time on their layers rather
// than on the output projection. Both files load in HF
// tokenizers/transformers and in evolm.
func Tokenizer(qwenDir, out string, corpus []string) error {
	return writeTokenizer(qwenDir, out, corpus, false)
}

// JudgeTokenizer is Tokenizer with every number from 10 to NumberTokens
// one (non-special) added token: the judge then compares the answer a
// criterion states with the response's token to token, which a tiny model
// learns, while the policy's tokenizer (Tokenizer) keeps Qwen3's
// digit-by-digit numbers.
func JudgeTokenizer(qwenDir, out string, corpus []string) error {
	return writeTokenizer(qwenDir, out, corpus, true)
}

// byteLevel maps text to the byte-level alphabet of GPT-2-style BPE
// vocabularies (bytes_to_unicode: printable bytes stand for themselves,
// the others for 256+n in byte order, so a space is Ġ and a newline Ċ).
func byteLevel(text string) string {
	var b strings.Builder
	for _, c := range []byte(text) {
		b.WriteRune(byteRune[c])
	}
	return b.String()
}

var byteRune = func() [256]rune {
	var m [256]rune
	n := 0
	for c := 0; c < 256; c++ {
		if (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF) {
			m[c] = rune(c)
		} else {
			m[c] = rune(256 + n)
			n++
		}
	}
	return m
}()

// substrings returns every substring of the texts' words in the
// byte-level alphabet, a word being a space and what follows it up to the
// next space (Qwen3's pre-tokenizer never puts a space after a token's
// first character, runs of spaces aside, which the toyworld texts do not
// have). Words repeat across texts, so each is expanded once.
func substrings(texts []string) map[string]bool {
	words := map[string]bool{}
	for _, t := range texts {
		rs := []rune(byteLevel(t))
		start := 0
		for i := 1; i <= len(rs); i++ {
			if i == len(rs) || rs[i] == byteRune[' '] {
				words[string(rs[start:i])] = true
				start = i
			}
		}
	}
	out := map[string]bool{}
	for w := range words {
		rs := []rune(w)
		for i := range rs {
			for j := i + 1; j <= len(rs); j++ {
				out[string(rs[i:j])] = true
			}
		}
	}
	return out
}

// mergePair reads one merge of a tokenizer.json: ["a", "b"] (tokenizers
// ≥ 0.20) or "a b".
func mergePair(m json.RawMessage) (a, b string, err error) {
	var pair []string
	if json.Unmarshal(m, &pair) == nil && len(pair) == 2 {
		return pair[0], pair[1], nil
	}
	var s string
	if json.Unmarshal(m, &s) == nil {
		if a, b, ok := strings.Cut(s, " "); ok {
			return a, b, nil
		}
	}
	return "", "", fmt.Errorf("merge %s is not two tokens", m)
}

func writeTokenizer(qwenDir, out string, corpus []string, numbers bool) error {
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
	pieces := substrings(append(append([]string{}, corpus...), chatWords...))
	kept := map[string]int{}
	for t, id := range vocab {
		if id < 256 {
			kept[t] = id
		}
	}
	if len(kept) != 256 || len(merges) == 0 {
		return fmt.Errorf("%s: not Qwen3's byte-level BPE (ids 0…255 are not the byte alphabet)", qwenDir)
	}
	var keptMerges []json.RawMessage
	for _, m := range merges {
		a, b, err := mergePair(m)
		if err != nil {
			return fmt.Errorf("%s: %w", qwenDir, err)
		}
		if t := a + b; pieces[t] {
			kept[t] = 256 + len(keptMerges)
			keptMerges = append(keptMerges, m)
		}
	}
	size := len(kept)
	mdl["vocab"], _ = json.Marshal(kept)
	mdl["merges"], _ = json.Marshal(keptMerges)
	tok["model"], _ = json.Marshal(mdl)

	var added []map[string]any
	if err := json.Unmarshal(tok["added_tokens"], &added); err != nil {
		return fmt.Errorf("tokenizer.json added_tokens: %w", err)
	}
	newID := map[string]int{}
	for i, a := range added {
		old := strconv.Itoa(int(a["id"].(float64)))
		a["id"] = size + i
		newID[old] = size + i
	}
	var numDecoder map[string]any
	if numbers {
		numDecoder = map[string]any{}
		for n := 10; n <= NumberTokens; n++ {
			id := size + len(added)
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
