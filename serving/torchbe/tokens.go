package torchbe

import "fmt"

// Tokenize encodes text as the engine encodes a prompt (the checkpoint's
// tokenizer adds no special tokens).
func (m *Model) Tokenize(text string) []int { return m.tok.Encode(text) }

// Detokenize decodes ids, special tokens kept; an id outside the
// vocabulary is an error.
func (m *Model) Detokenize(ids []int) (string, error) {
	vocab := m.vocab
	for i, id := range ids {
		if id < 0 || id >= vocab || id >= m.tok.VocabSize() {
			return "", fmt.Errorf("token %d (position %d) is outside the vocabulary [0, %d)", id, i, min(vocab, m.tok.VocabSize()))
		}
	}
	return m.tok.Decode(ids, false)
}

// TokenStrings are the vocabulary's own strings of ids (byte-level BPE
// pieces such as "Ġworld"), as HF's convert_ids_to_tokens gives them.
func (m *Model) TokenStrings(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = m.tok.IDToToken(id)
	}
	return out
}

// MaxModelLen is the most tokens of a sequence, prompt and completion.
func (m *Model) MaxModelLen() int { return m.maxLen }
