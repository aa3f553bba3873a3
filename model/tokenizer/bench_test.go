package tokenizer

import (
	"strings"
	"testing"
)

// benchText is ~1 MB of mixed text: the parity corpus and fuzz strings.
func benchText() []string {
	var docs []string
	var b strings.Builder
	src := append(append([]string(nil), corpus...), fuzzStrings(99, 3000)...)
	total := 0
	for total < 1<<20 {
		for _, s := range src {
			b.WriteString(s)
			b.WriteString("\n")
			if b.Len() > 4096 {
				total += b.Len()
				docs = append(docs, b.String())
				b.Reset()
			}
		}
	}
	return docs
}

func benchEncode(b *testing.B, batch bool) {
	tok, _ := qwen3(b)
	docs := benchText()
	n := 0
	for _, d := range docs {
		n += len(d)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	tokens := 0
	for range b.N {
		if batch {
			for _, ids := range tok.EncodeBatch(docs) {
				tokens += len(ids)
			}
			continue
		}
		for _, d := range docs {
			tokens += len(tok.Encode(d))
		}
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncode: one goroutine, warm cache after the first iteration.
func BenchmarkEncode(b *testing.B) { benchEncode(b, false) }

// BenchmarkEncodeBatch: GOMAXPROCS workers.
func BenchmarkEncodeBatch(b *testing.B) { benchEncode(b, true) }

func BenchmarkNFC(b *testing.B) {
	docs := benchText()
	n := 0
	for _, d := range docs {
		n += len(d)
	}
	b.SetBytes(int64(n))
	for range b.N {
		for _, d := range docs {
			NFC(d)
		}
	}
}
