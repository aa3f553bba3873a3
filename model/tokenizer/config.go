package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// fileJSON is the part of HF tokenizer.json this package reads.
type fileJSON struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// component is the {"type": ...} head shared by normalizers, pre-tokenizers,
// post-processors and decoders.
type component struct {
	Type string `json:"type"`
	// Sequence members.
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Split.
	Pattern  *struct{ Regex, String *string } `json:"pattern"`
	Behavior string                           `json:"behavior"`
	Invert   bool                             `json:"invert"`
	// ByteLevel.
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || bytes.Equal(m, []byte("null"))
}

func parseComponent(field string, m json.RawMessage) (component, error) {
	var c component
	if err := json.Unmarshal(m, &c); err != nil {
		return c, fmt.Errorf("%s: %w", field, err)
	}
	return c, nil
}

// checkNormalizer accepts no normalizer, NFC, or a Sequence of exactly NFC.
func checkNormalizer(m json.RawMessage) (nfc bool, err error) {
	if isNull(m) {
		return false, nil
	}
	c, err := parseComponent("normalizer", m)
	if err != nil {
		return false, err
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for i, n := range c.Normalizers {
			field := fmt.Sprintf("normalizer.normalizers[%d]", i)
			sub, err := parseComponent(field, n)
			if err != nil {
				return false, err
			}
			if sub.Type != "NFC" {
				return false, fmt.Errorf("%s.type: unsupported normalizer %q (only NFC is implemented)", field, sub.Type)
			}
			nfc = true
		}
		return nfc, nil
	}
	return false, fmt.Errorf("normalizer.type: unsupported normalizer %q (only NFC is implemented)", c.Type)
}

// checkPreTokenizer accepts exactly Qwen's: Sequence[Split(QwenSplitPattern,
// Isolated), ByteLevel(add_prefix_space=false, use_regex=false)].
func checkPreTokenizer(m json.RawMessage) error {
	if isNull(m) {
		return fmt.Errorf("pre_tokenizer: missing (a byte-level Split+ByteLevel sequence is required)")
	}
	c, err := parseComponent("pre_tokenizer", m)
	if err != nil {
		return err
	}
	if c.Type != "Sequence" {
		return fmt.Errorf("pre_tokenizer.type: unsupported pre-tokenizer %q (only Sequence[Split, ByteLevel] as in Qwen is implemented)", c.Type)
	}
	if len(c.PreTokenizers) != 2 {
		return fmt.Errorf("pre_tokenizer.pretokenizers: %d entries, want 2 (Split, ByteLevel)", len(c.PreTokenizers))
	}
	split, err := parseComponent("pre_tokenizer.pretokenizers[0]", c.PreTokenizers[0])
	if err != nil {
		return err
	}
	switch {
	case split.Type != "Split":
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].type: unsupported pre-tokenizer %q, want Split", split.Type)
	case split.Pattern == nil || split.Pattern.Regex == nil:
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].pattern: want a Regex pattern")
	case *split.Pattern.Regex != QwenSplitPattern:
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].pattern.Regex: unsupported split regex %q (only Qwen's %q is implemented)", *split.Pattern.Regex, QwenSplitPattern)
	case split.Behavior != "Isolated":
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].behavior: unsupported %q, want Isolated", split.Behavior)
	case split.Invert:
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].invert: true is unsupported")
	}
	bl, err := parseComponent("pre_tokenizer.pretokenizers[1]", c.PreTokenizers[1])
	if err != nil {
		return err
	}
	switch {
	case bl.Type != "ByteLevel":
		return fmt.Errorf("pre_tokenizer.pretokenizers[1].type: unsupported pre-tokenizer %q, want ByteLevel", bl.Type)
	case bl.AddPrefixSpace:
		return fmt.Errorf("pre_tokenizer.pretokenizers[1].add_prefix_space: true is unsupported")
	case bl.UseRegex == nil || *bl.UseRegex:
		return fmt.Errorf("pre_tokenizer.pretokenizers[1].use_regex: must be false (the Split before it does the splitting)")
	}
	return nil
}

// checkPostProcessor accepts none or ByteLevel: neither adds tokens.
func checkPostProcessor(m json.RawMessage) error {
	if isNull(m) {
		return nil
	}
	c, err := parseComponent("post_processor", m)
	if err != nil {
		return err
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("post_processor.type: unsupported post-processor %q (only ByteLevel is implemented)", c.Type)
	}
	return nil
}

func checkDecoder(m json.RawMessage) error {
	if isNull(m) {
		return fmt.Errorf("decoder: missing, want ByteLevel")
	}
	c, err := parseComponent("decoder", m)
	if err != nil {
		return err
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("decoder.type: unsupported decoder %q (only ByteLevel is implemented)", c.Type)
	}
	return nil
}

func checkModel(m *modelJSON) error {
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model.type: unsupported model %q (only BPE is implemented)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model.dropout: %v is unsupported (encoding must be deterministic)", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model.continuing_subword_prefix: %q is unsupported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model.end_of_word_suffix: %q is unsupported", *m.EndOfWordSuffix)
	case m.ByteFallback:
		return fmt.Errorf("model.byte_fallback: true is unsupported")
	case len(m.Vocab) == 0:
		return fmt.Errorf("model.vocab: empty")
	}
	return nil
}

// parseMerges reads merges in either format tokenizers writes: a list of
// "a b" strings (before 0.20) or a list of ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err != nil {
		return nil, fmt.Errorf("model.merges: want a list of pairs or of \"a b\" strings: %w", err)
	}
	pairs = make([][2]string, len(strs))
	for i, s := range strs {
		a, b, ok := bytes.Cut([]byte(s), []byte(" "))
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: %q has no space", i, s)
		}
		pairs[i] = [2]string{string(a), string(b)}
	}
	return pairs, nil
}
