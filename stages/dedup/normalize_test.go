package dedup

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"ascii lower", "Hello World", "hello world"},
		{"whitespace runs", "  a \t b\n\n c  ", "a b c"},
		{"no-break and ideographic spaces", "a\u00a0b\u3000c\u2003d", "a b c d"},
		{"fullwidth letters and digits", "ＡＢＣ １２３", "abc 123"},
		{"ligature", "ﬁle ﬂow", "file flow"},
		{"superscript", "x²", "x2"},
		{"sharp s folds", "STRASSE straße", "strasse strasse"},
		{"final sigma folds", "ΟΔΟΣ οδος", "οδοσ οδοσ"},
		{"composed vs decomposed", "caf\u0065\u0301", "café"},
		{"empty", "   ", ""},
		{"fullwidth punctuation", "a：b？", "a:b?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Normalize(tc.in); got != tc.want {
				t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// The ASCII fast path must agree with the general path.
func TestNormalizeASCIIPathAgrees(t *testing.T) {
	for _, s := range []string{"Hello,  World!\tX", "\n\nA\vB\fC\r", "MiXeD 123 ~!@#"} {
		if fast, slow := Normalize(s), normalizeUnicode(s); fast != slow {
			t.Errorf("Normalize(%q): ascii path %q, unicode path %q", s, fast, slow)
		}
	}
}

func TestPromptIDStable(t *testing.T) {
	// A fixed value: prompt_ids must never change across versions.
	if got, want := PromptID("Hello  WORLD"), HashNormalized("hello world").String(); got != want {
		t.Errorf("PromptID = %s, want %s", got, want)
	}
	// hashlib.sha256(b"what is 2+2?").hexdigest()[:32]
	if got, want := PromptID("  What is 2+2?"), "61a3385003d9b9d390dc511fbe3e1eb6"; got != want {
		t.Errorf("PromptID = %s, want %s", got, want)
	}
	if PromptID("ｗｈａｔ is 2+2?") != PromptID("what IS 2+2?") {
		t.Error("NFKC and case variants have different prompt ids")
	}
	if PromptID("what is 2+2?") == PromptID("what is 2+3?") {
		t.Error("different prompts share a prompt id")
	}
}

func TestWords(t *testing.T) {
	def := DefaultParams().Shingle
	for _, tc := range []struct {
		name string
		opts ShingleOptions
		in   string
		want []string
	}{
		{"punctuation splits", def, "hello, world! it's a-ok", []string{"hello", "world", "it", "s", "a", "ok"}},
		{"symbols split", def, "x+y=z $5 `code`", []string{"x", "y", "z", "5", "code"}},
		{"unicode punctuation", def, "«bonjour» — monde…", []string{"bonjour", "monde"}},
		{"diacritics stripped", def, "café naïve", []string{"cafe", "naive"}},
		{"diacritics kept", ShingleOptions{NGram: 5, StripPunct: true}, "café", []string{"café"}},
		{"punctuation kept", ShingleOptions{NGram: 5}, "a, b", []string{"a,", "b"}},
		{"numbers kept", def, "12 apples 3.5", []string{"12", "apples", "3", "5"}},
		{"numbers normalized", ShingleOptions{NGram: 5, NormNumbers: true}, "12 apples 3.5 x1y22", []string{"0", "apples", "0", "x0y0"}},
		{"cjk", def, "你好 世界", []string{"你好", "世界"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.opts.Words(tc.in, nil)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Words(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestShinglesAndJaccard(t *testing.T) {
	words := func(s string) []string { return DefaultParams().Shingle.Words(s, nil) }
	sh := func(s string) []uint64 { x, _ := Shingles(words(s), 5, nil, nil); return x }
	if got := len(sh("one two three four")); got != 0 {
		t.Errorf("4 words have %d 5-shingles, want 0", got)
	}
	if got := len(sh("a b c d e f g")); got != 3 {
		t.Errorf("7 distinct words have %d 5-shingles, want 3", got)
	}
	if got := len(sh("a b c d e a b c d e a b c d e")); got != 5 {
		t.Errorf("a repeated 5-cycle has %d distinct shingles, want 5", got)
	}
	a := sh("the quick brown fox jumps over the lazy dog")
	b := sh("the quick brown fox jumps over the lazy cat")
	// 5 shingles each, 4 shared: 4 / 6.
	if got := Jaccard(a, b); got != 4.0/6.0 {
		t.Errorf("Jaccard = %g, want %g", got, 4.0/6.0)
	}
	if Jaccard(a, a) != 1 || Jaccard[uint64](nil, nil) != 1 || Jaccard(a, nil) != 0 {
		t.Error("Jaccard identities")
	}
}

// MinHash agreement estimates Jaccard: over 112 permutations, the fraction
// of equal minima stays close to the true similarity.
func TestMinHashEstimatesJaccard(t *testing.T) {
	mh := NewMinHasher(14, 8, 1)
	var a, b []uint64
	for i := range uint64(400) {
		x := mix64(i + 1)
		if i < 300 {
			a = append(a, x)
		}
		if i >= 100 {
			b = append(b, x)
		}
	}
	// |a ∩ b| = 200, |a ∪ b| = 400.
	sa, sb := make([]uint64, 112), make([]uint64, 112)
	mh.Signature(a, sa)
	mh.Signature(b, sb)
	eq := 0
	for i := range sa {
		if sa[i] == sb[i] {
			eq++
		}
	}
	if est := float64(eq) / 112; est < 0.35 || est > 0.65 {
		t.Errorf("MinHash estimate %g for true Jaccard 0.5", est)
	}
	ka, kb := make([]uint64, 14), make([]uint64, 14)
	mh.BandKeys(sa, ka)
	mh.BandKeys(sa, kb)
	if diff := cmp.Diff(ka, kb); diff != "" {
		t.Errorf("band keys not deterministic (-a +b):\n%s", diff)
	}
}
