package dedup

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/bench/dedup/corpus"
)

func BenchmarkNormalize(b *testing.B) {
	texts := []string{corpus.Default.Row(1).Prompt, "Ｗｈａｔ  is the ﬁnal  ANSWER, café?"}
	var n int64
	for _, s := range texts {
		n += int64(len(s))
	}
	b.SetBytes(n)
	for b.Loop() {
		for _, s := range texts {
			Normalize(s)
		}
	}
}

// BenchmarkSignature: words → shingles → 112-permutation MinHash → band keys
// for one corpus prompt.
func BenchmarkSignature(b *testing.B) {
	p := DefaultParams()
	mh := NewMinHasher(p.Bands, p.BandRows, p.Seed)
	text := Normalize(corpus.Default.Row(3).Prompt)
	sig := make([]uint64, p.Bands*p.BandRows)
	keys := make([]uint64, p.Bands)
	var words []string
	var wh, sh []uint64
	for b.Loop() {
		words = p.Shingle.Words(text, words[:0])
		sh, wh = Shingles(words, p.Shingle.NGram, wh, sh)
		mh.Signature(sh, sig)
		mh.BandKeys(sig, keys)
	}
}

// BenchmarkAnalyze: passes 1 and 2 over 20,000 corpus prompts (3% exact and
// 7% near duplicates), reported as rows/s.
func BenchmarkAnalyze(b *testing.B) {
	dir := b.TempDir()
	const n = 20_000
	path, _ := writeCorpus(b, dir, n)
	for _, verify := range []bool{false, true} {
		name := "lsh-only"
		if verify {
			name = "verified"
		}
		b.Run(name, func(b *testing.B) {
			p := DefaultParams()
			p.Verify = verify
			for b.Loop() {
				if _, err := Analyze(context.Background(), []string{path}, filepath.Join(dir, "work"), p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
