package tokenizer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
	qwenPath string
)

// qwen3 loads the real Qwen3 tokenizer.json once per test binary.
func qwen3(t testing.TB) (*Tokenizer, string) {
	t.Helper()
	qwenOnce.Do(func() {
		qwenPath, qwenErr = Qwen3Path(testutil.Root(t))
		if qwenErr == nil {
			qwenTok, qwenErr = LoadFile(qwenPath)
		}
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok, qwenPath
}

type refRecord struct {
	IDs         []int    `json:"ids"`
	IDsSplit    []int    `json:"ids_split"`
	NFC         string   `json:"nfc"`
	Pieces      []string `json:"pieces"`
	Decoded     string   `json:"decoded"`
	DecodedSkip string   `json:"decoded_skip"`
}

// reference runs HF tokenizers (scripts/tokenizer_reference.py) on texts.
func reference(t *testing.T, path string, texts []string) []refRecord {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, s := range texts {
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.RunPython(t, "tokenizer_reference.py", path, in, out)
	g, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var recs []refRecord
	sc := bufio.NewScanner(g)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var r refRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("reference output line %d: %v", len(recs)+1, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(texts) {
		t.Fatalf("reference returned %d records for %d texts", len(recs), len(texts))
	}
	return recs
}

// firstDiff is the index of the first differing element.
func firstDiff[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func window[T any](s []T, i int) []T {
	return s[max(0, i-3):min(len(s), i+5)]
}

// checkParity compares every output with the reference and reports the
// first mismatch of each kind in full, plus a count.
func checkParity(t *testing.T, name string, texts []string) {
	t.Helper()
	tok, path := qwen3(t)
	refs := reference(t, path, texts)
	batch := tok.EncodeBatch(texts)
	bad := map[string]int{}
	report := func(kind string, i int, format string, args ...any) {
		bad[kind]++
		if bad[kind] == 1 {
			t.Errorf("%s: first %s mismatch, text %d %+q:\n%s", name, kind, i, texts[i], fmt.Sprintf(format, args...))
		}
	}
	for i, s := range texts {
		ref := refs[i]
		got := tok.Encode(s)
		if !slices.Equal(got, ref.IDs) {
			p := firstDiff(got, ref.IDs)
			report("ids", i, "  position %d of %d/%d ids\n  ours   %v\n  theirs %v\n  ours as tokens   %q\n  theirs as tokens %q",
				p, len(got), len(ref.IDs), window(got, p), window(ref.IDs, p), tokens(tok, window(got, p)), tokens(tok, window(ref.IDs, p)))
		}
		if !slices.Equal(batch[i], got) {
			report("EncodeBatch", i, "  batch %v\n  single %v", batch[i], got)
		}
		if split := tok.EncodeWithOptions(s, EncodeOptions{SplitSpecialTokens: true}); !slices.Equal(split, ref.IDsSplit) {
			p := firstDiff(split, ref.IDsSplit)
			report("ids (split special tokens)", i, "  position %d\n  ours   %v\n  theirs %v", p, window(split, p), window(ref.IDsSplit, p))
		}
		if n := NFC(s); n != ref.NFC {
			rn, rr := []rune(n), []rune(ref.NFC)
			p := firstDiff(rn, rr)
			report("NFC", i, "  rune %d\n  ours   %+q\n  theirs %+q", p, string(window(rn, p)), string(window(rr, p)))
		}
		var pieces []string
		preTokenize(NFC(s), func(p string) {
			var b strings.Builder
			for i := 0; i < len(p); i++ {
				b.WriteString(byteStr[p[i]])
			}
			pieces = append(pieces, b.String())
		})
		if len(ref.Pieces) == 0 {
			ref.Pieces = nil
		}
		if !slices.Equal(pieces, ref.Pieces) {
			p := firstDiff(pieces, ref.Pieces)
			report("pre-tokenizer pieces", i, "  piece %d\n  ours   %q\n  theirs %q", p, window(pieces, p), window(ref.Pieces, p))
		}
		for _, skip := range []bool{false, true} {
			want := ref.Decoded
			if skip {
				want = ref.DecodedSkip
			}
			dec, err := tok.Decode(ref.IDs, skip)
			if err != nil {
				report("decode", i, "  %v", err)
			} else if dec != want {
				report(fmt.Sprintf("decode(skip_special=%v)", skip), i, "  ours   %+q\n  theirs %+q", dec, want)
			}
		}
		if dec, err := tok.Decode(got, false); err != nil || dec != NFC(s) {
			report("round trip", i, "  decode(encode(s)) %+q (err %v)\n  NFC(s)            %+q", dec, err, NFC(s))
		}
	}
	for kind, n := range bad {
		t.Errorf("%s: %d of %d texts differ in %s", name, n, len(texts), kind)
	}
	t.Logf("%s: %d texts compared with HF tokenizers", name, len(texts))
}

func tokens(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = tok.IDToToken(id)
	}
	return out
}

func TestParityCorpus(t *testing.T) { checkParity(t, "corpus", corpus) }

func TestParityFuzz(t *testing.T) {
	texts := fuzzStrings(20260101, 12000)
	checkParity(t, "fuzz", texts)
}

func TestParityCompositions(t *testing.T) {
	checkParity(t, "compositions", compositionStrings())
}
