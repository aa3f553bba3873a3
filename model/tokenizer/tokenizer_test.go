package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/text/unicode/norm"
)

// TestUnicodeTablesMatchReference asks the reference for its \p{L}, \p{N},
// \s and combining classes, code point by code point, and checks ours agree
// everywhere (so the generated override tables are complete and current).
func TestUnicodeTablesMatchReference(t *testing.T) {
	var d struct {
		L, N, S   [][2]rune
		CCC       map[string]uint8 `json:"ccc"`
		NoCompose []rune           `json:"nocompose"`
	}
	if err := json.Unmarshal(testutil.RunPython(t, "tokenizer_unicode.py"), &d); err != nil {
		t.Fatal(err)
	}
	in := func(rs [][2]rune, r rune) bool {
		i := sort.Search(len(rs), func(i int) bool { return rs[i][1] >= r })
		return i < len(rs) && rs[i][0] <= r
	}
	ccc := map[rune]uint8{}
	for k, v := range d.CCC {
		n, err := strconv.Atoi(k)
		if err != nil {
			t.Fatal(err)
		}
		ccc[rune(n)] = v
	}
	classes := []struct {
		name string
		ref  [][2]rune
		ours func(rune) bool
	}{{`\p{L}`, d.L, isLetter}, {`\p{N}`, d.N, isNumber}, {`\s`, d.S, isSpace}}
	for _, c := range classes {
		n := 0
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if r >= 0xD800 && r < 0xE000 {
				continue
			}
			if want, got := in(c.ref, r), c.ours(r); want != got {
				if n++; n <= 5 {
					t.Errorf("%s U+%04X: reference %v, ours %v", c.name, r, want, got)
				}
			}
		}
		if n > 0 {
			t.Errorf("%s: %d code points differ; run `go generate ./model/tokenizer`", c.name, n)
		}
	}
	n := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r < 0xE000 || norm.NFD.PropertiesString(string(r)).Decomposition() != nil {
			continue
		}
		if got := combiningClass(r); got != ccc[r] {
			if n++; n <= 5 {
				t.Errorf("ccc U+%04X: reference %d, ours %d", r, ccc[r], got)
			}
		}
	}
	// The NFC fast path (trusting x/text/norm's "already normal") is sound
	// only if every override turns a Go non-starter into a starter.
	for _, o := range cccOverride {
		if o.ccc != 0 || norm.NFD.PropertiesString(string(o.r)).CCC() == 0 {
			t.Errorf("cccOverride U+%04X -> %d: the NFC fast path assumes Go ccc > 0 and reference ccc 0", o.r, o.ccc)
		}
	}
	if diff := cmp.Diff(d.NoCompose, noCompose); diff != "" {
		t.Errorf("noCompose (-reference +ours):\n%s", diff)
	}
}

func TestSplitPieces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's I'M 'll", []string{"it", "'s", " I", "'M", " '", "ll"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   \n\n  b", []string{"a", "   \n\n", " ", " b"}},
		{"end   ", []string{"end", "   "}},
		{"x\t\ty", []string{"x", "\t", "\ty"}},
		{"12345", []string{"1", "2", "3", "4", "5"}},
		{" ...!!\n\nx", []string{" ...!!\n\n", "x"}},
		{"中文 text", []string{"中文", " text"}},
		{"\r\nfoo", []string{"\r\n", "foo"}},
		{"a\u00a0b", []string{"a", "\u00a0b"}},
	}
	for _, tc := range tests {
		var got []string
		preTokenize(tc.in, func(p string) { got = append(got, p) })
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("split %q (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestLossyString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"a\xffb", "a\ufffdb"},
		{"\xff\xff", "\ufffd\ufffd"},
		{"\xe4\xb8", "\ufffd"},
		{"\xe4\xb8a", "\ufffda"},
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, // surrogate: E D then A0 is out of range
		{"\xf0\x9f\x98", "\ufffd"},
		{"\xc0\xaf", "\ufffd\ufffd"},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, lossyString([]byte(tc.in))); diff != "" {
			t.Errorf("lossyString(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestQwen3Specials(t *testing.T) {
	tok, _ := qwen3(t)
	want := Specials{
		EndOfText: 151643, IMStart: 151644, IMEnd: 151645, Think: 151667, EndThink: 151668,
		EOS: 151645, Pad: 151643, ToolCall: 151657, EndToolCall: 151658,
	}
	if diff := cmp.Diff(want, tok.Specials()); diff != "" {
		t.Errorf("Specials (-want +got):\n%s", diff)
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	for _, c := range []struct {
		tok     string
		special bool
	}{{"<|im_end|>", true}, {"<think>", false}, {"Ġthe", false}} {
		id, ok := tok.TokenToID(c.tok)
		if !ok {
			t.Fatalf("TokenToID(%q): missing", c.tok)
		}
		if back, _ := tok.IDToToken(id); back != c.tok {
			t.Errorf("IDToToken(TokenToID(%q)) = %q", c.tok, back)
		}
		if tok.IsSpecial(id) != c.special {
			t.Errorf("IsSpecial(%q) = %v, want %v", c.tok, !c.special, c.special)
		}
	}
	// HF tokenizers skips ids past the vocabulary (Qwen pads its embedding to
	// 151936): decode([9707, 151671, 11]) == "Hello,".
	if got, err := tok.Decode([]int{9707, 151671, 11, 151935}, false); err != nil || got != "Hello," {
		t.Errorf("Decode with ids outside the vocabulary = %q, %v; want \"Hello,\" as HF", got, err)
	}
}

func TestWriteFileCopiesThrough(t *testing.T) {
	tok, path := qwen3(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := tok.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(orig, got) {
		t.Fatalf("written tokenizer.json differs from %s (%d vs %d bytes)", path, len(got), len(orig))
	}
	if _, err := LoadFile(out); err != nil {
		t.Fatal(err)
	}
}

// tinyJSON returns a minimal valid byte-level BPE tokenizer.json (a test
// double for load-error cases; the 11 MB Qwen file is too big to mutate per
// case), with edit applied to its decoded form.
func tinyJSON(t *testing.T, edit func(m map[string]any)) []byte {
	t.Helper()
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[byteStr[b]] = b
	}
	vocab["ab"] = 256
	m := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": []any{map[string]any{"id": 257, "content": "<|end|>", "special": true}},
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": QwenSplitPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{[]any{"a", "b"}}},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadTiny(t *testing.T) {
	for _, merges := range []any{[]any{[]any{"a", "b"}}, []any{"a b"}} {
		tok, err := Load(bytes.NewReader(tinyJSON(t, func(m map[string]any) { m["model"].(map[string]any)["merges"] = merges })))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int{256, 'c', 257, ' ', 256}, tok.Encode("abc<|end|> ab")); diff != "" {
			t.Errorf("Encode, merges %v (-want +got):\n%s", merges, diff)
		}
	}
}

func TestLoadRejectsUnsupported(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(m map[string]any) {
			keys := strings.Split(path, ".")
			var cur any = m
			for _, k := range keys[:len(keys)-1] {
				if i, err := strconv.Atoi(k); err == nil {
					cur = cur.([]any)[i]
				} else {
					cur = cur.(map[string]any)[k]
				}
			}
			cur.(map[string]any)[keys[len(keys)-1]] = v
		}
	}
	tests := []struct {
		name, want string
		edit       func(map[string]any)
	}{
		{"wordpiece", `model.type: unsupported model "WordPiece"`, set("model.type", "WordPiece")},
		{"unigram", `model.type: unsupported model "Unigram"`, set("model.type", "Unigram")},
		{"dropout", "model.dropout", set("model.dropout", 0.1)},
		{"byte fallback", "model.byte_fallback", set("model.byte_fallback", true)},
		{"subword prefix", "model.continuing_subword_prefix", set("model.continuing_subword_prefix", "##")},
		{"nfkc", `normalizer.type: unsupported normalizer "NFKC"`, set("normalizer.type", "NFKC")},
		{"no pre-tokenizer", "pre_tokenizer: missing", set("pre_tokenizer", nil)},
		{"gpt2 byte level", `pre_tokenizer.type: unsupported pre-tokenizer "ByteLevel"`, set("pre_tokenizer", map[string]any{"type": "ByteLevel", "use_regex": true})},
		{"other regex", "pre_tokenizer.pretokenizers.0.pattern.Regex", nil},
		{"behavior", "pre_tokenizer.pretokenizers[0].behavior", set("pre_tokenizer.pretokenizers.0.behavior", "Removed")},
		{"use_regex", "pre_tokenizer.pretokenizers[1].use_regex", set("pre_tokenizer.pretokenizers.1.use_regex", true)},
		{"decoder", `decoder.type: unsupported decoder "WordPiece"`, set("decoder.type", "WordPiece")},
		{"post processor", `post_processor.type: unsupported post-processor "TemplateProcessing"`, set("post_processor.type", "TemplateProcessing")},
		{"truncation", "truncation: must be null", set("truncation", map[string]any{"max_length": 8})},
		{"bad merge", "model.merges[0]", set("model.merges", []any{[]any{"a", "zz"}})},
		{"missing byte", "byte 0x20 is missing", func(m map[string]any) { delete(m["model"].(map[string]any)["vocab"].(map[string]any), byteStr[' ']) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edit := tc.edit
			if tc.name == "other regex" {
				edit = set("pre_tokenizer.pretokenizers.0.pattern.Regex", `\w+|\s+`)
				tc.want = "pre_tokenizer.pretokenizers[0].pattern.Regex: unsupported split regex"
			}
			_, err := Load(bytes.NewReader(tinyJSON(t, edit)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load: err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(p, tinyJSON(t, set("model.type", "WordPiece")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("LoadFile: err = %v, want it to name %s", err, p)
	}
}

func TestCacheBoundedAndConcurrent(t *testing.T) {
	tok, _ := qwen3(t)
	texts := fuzzStrings(7, 2000)
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	small := *tok
	m := *tok.model
	m.cache = newWordCache(64) // forces constant eviction
	small.model = &m
	got := small.EncodeBatch(texts)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EncodeBatch with a tiny cache (-want +got):\n%s", diff)
	}
	if n := m.cache.len(); n > 64+cacheShards {
		t.Errorf("cache holds %d pieces, bound is %d", n, 64)
	}
}

// FuzzEncodeDecode checks decode(encode(s)) == NFC(s) on arbitrary input.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range corpus {
		f.Add(s)
	}
	f.Add("\xff\xfe invalid \xe4\xb8")
	tok, _ := qwen3(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		got, err := tok.Decode(ids, false)
		if err != nil {
			t.Fatal(err)
		}
		want := NFC(s)
		if !utf8.ValidString(s) {
			want = NFC(lossyString([]byte(s)))
		}
		if got != want {
			t.Fatalf("decode(encode(%+q)) = %+q, want %+q (ids %v)", s, got, want, ids)
		}
	})
}

// TestMergeShortEqualsLong checks the two merge strategies agree on every
// piece of the fuzz set, whatever its length.
func TestMergeShortEqualsLong(t *testing.T) {
	tok, _ := qwen3(t)
	bad := 0
	for _, s := range fuzzStrings(11, 3000) {
		preTokenize(NFC(s), func(p string) {
			short, long := tok.model.mergeShort(p), tok.model.mergeLong(p)
			if diff := cmp.Diff(short, long); diff != "" {
				if bad++; bad <= 5 {
					t.Errorf("piece %+q: mergeShort vs mergeLong (-short +long):\n%s", p, diff)
				}
			}
		})
	}
	if bad > 0 {
		t.Errorf("%d pieces differ", bad)
	}
	for _, p := range []string{strings.Repeat("a", 500), strings.Repeat(" ", 300), strings.Repeat("中文", 100)} {
		if diff := cmp.Diff(tok.model.mergeShort(p), tok.model.mergeLong(p)); diff != "" {
			t.Errorf("piece of %d bytes: mergeShort vs mergeLong (-short +long):\n%s", len(p), diff)
		}
	}
}

// TestEncodePrefixed checks EncodePrefixed against Encode of each whole
// prompt on the real Qwen3 tokenizer: prefixes cut from the corpus and the
// fuzz set at every line start and elsewhere, each with suffixes that begin
// with what could act across the cut (combining marks, whitespace,
// newlines, special tokens, a continued UTF-8 sequence). It also checks that
// most prefixes were cut, so that the comparison covers the cut, and that a
// tokenizer whose added tokens forbid cuts encodes whole prompts.
func TestEncodePrefixed(t *testing.T) {
	tok, _ := qwen3(t)
	suffixes := []string{"", "Criterion: the answer is 391.\nAnswer:", "\u0301 accent", " space", "\n\nnext", "\r\n", "<|im_end|>\n<|im_start|>assistant\n", "'ll do", "\xad tail", "\u00a0nbsp", "123"}
	texts := append(slices.Clone(corpus), fuzzStrings(7, 600)...)
	var prefixes []string
	for i, s := range texts {
		prefixes = append(prefixes, s, s+"\n"+texts[(i+1)%len(texts)], "<question>\n"+s+"\n</question>\n\n<response>\n"+s+"\n</response>\n\n")
		for j := range min(len(s), 400) {
			if s[j] == '\n' || j%37 == 0 {
				prefixes = append(prefixes, s[:j])
			}
		}
	}
	prefixes = append(prefixes, "x\n\xe4\xb8", "line\n\xff\xfe", "a\n<|im_start|>user\nb")
	cut := 0
	for _, p := range prefixes {
		if tok.lineCut(p) > 0 {
			cut++
		}
		gotP, got := tok.EncodePrefixed(p, suffixes)
		if diff := cmp.Diff(tok.Encode(p), gotP); diff != "" {
			t.Fatalf("prefix %+q (-Encode +EncodePrefixed):\n%s", p, diff)
		}
		for k, s := range suffixes {
			if diff := cmp.Diff(tok.Encode(p+s), got[k]); diff != "" {
				t.Fatalf("prefix %+q, suffix %+q (-Encode +EncodePrefixed):\n%s", p, s, diff)
			}
		}
	}
	t.Logf("%d prefixes × %d suffixes, %d of the prefixes cut", len(prefixes), len(suffixes), cut)
	if cut < len(prefixes)/5 {
		t.Errorf("only %d of %d prefixes were cut: the test does not cover the cut", cut, len(prefixes))
	}
	if got := tok.lineCut("a\nb"); got != 2 {
		t.Errorf(`lineCut("a\nb") = %d, want 2`, got)
	}

	stripped, err := Load(bytes.NewReader(tinyJSON(t, func(m map[string]any) {
		m["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true
	})))
	if err != nil {
		t.Fatal(err)
	}
	if c := stripped.lineCut("ab\n<|end|>"); c != 0 {
		t.Errorf("with an lstrip added token, lineCut = %d, want 0 (no cut)", c)
	}
	_, got := stripped.EncodePrefixed("ab\n", []string{"<|end|>c"})
	if want := stripped.Encode("ab\n<|end|>c"); !slices.Equal(got[0], want) {
		t.Errorf("lstrip: EncodePrefixed = %v, Encode = %v", got[0], want)
	}
}
