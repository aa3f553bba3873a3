// Package corpus generates the synthetic prompt corpus of the dedup
// benchmarks: n prompts in the Tulu 3 layout with planted exact and near
// duplicates, deterministic for a seed and generated row by row with no
// state (row i depends only on seed and i), so any size streams in constant
// memory.
//
// Prompts are 20–60 words drawn from a Zipf-distributed vocabulary of
// 20,000 pseudo-words plus common English words, so unrelated prompts share
// words (and a few 5-grams) the way real prompts do. About 3% of rows are
// exact duplicates of an earlier row (some with case or whitespace changes)
// and 7% near duplicates: an earlier row with one or two words appended, one
// of its last two words replaced or one of its first two deleted.
package corpus

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/evolm/evolm/datasets"
)

// Kind says how a row was made.
type Kind int

const (
	Fresh Kind = iota
	Exact      // an earlier row, possibly with case/whitespace changes
	Near       // an earlier row with a small edit
)

// Row is one generated row and how it was made.
type Row struct {
	datasets.TuluRow
	Kind Kind
	Of   int // the earlier row it duplicates (Exact, Near), else -1
}

var common = strings.Fields(`the a of to and in is for that on with as how what
why can you please write explain describe give make list find show tell me my
your this it be are was from by an or about into using between which when`)

const vocab = 20000

var syll = strings.Fields(`ka lo mi ne ra tu sa vi do pe li mo na ru te ba zo fi
ga ho ju ke ma ni po qu re si ta vu we xa yo ze ar el in on ur`)

func word(k int) string {
	var b strings.Builder
	k++
	for k > 0 {
		b.WriteString(syll[k%len(syll)])
		k /= len(syll)
	}
	return b.String()
}

// zipf draws a vocabulary index with P(k) ∝ 1/(k+20)^1.1 (a Zipf law with a
// flattened head), by inverse transform on the continuous approximation.
func zipf(r *rand.Rand) int {
	const s, a, b = 1.1, 20.0, vocab + 20.0
	lo, hi := math.Pow(a, 1-s), math.Pow(b, 1-s)
	x := math.Pow(lo+r.Float64()*(hi-lo), 1/(1-s))
	return min(max(int(x-a), 0), vocab-1)
}

func rng(seed uint64, i int, salt uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15*uint64(i+1), salt))
}

// fresh is the text of a fresh prompt i.
func fresh(seed uint64, i int) []string {
	r := rng(seed, i, 1)
	n := 20 + r.IntN(41)
	w := make([]string, n)
	for j := range w {
		if r.IntN(3) == 0 {
			w[j] = common[r.IntN(len(common))]
		} else {
			w[j] = word(zipf(r))
		}
	}
	return w
}

// kindOf says whether row i is fresh or duplicates an earlier row (within
// the previous 50,000).
func (g Gen) kindOf(i int) (Kind, int) {
	if i == 0 {
		return Fresh, -1
	}
	r := rng(g.Seed, i, 2)
	u := r.Float64()
	back := func() int { return max(0, i-1-r.IntN(min(i, 50_000))) }
	switch {
	case u < g.ExactRate:
		return Exact, back()
	case u < g.ExactRate+g.NearRate:
		return Near, back()
	}
	return Fresh, -1
}

// Gen generates the corpus.
type Gen struct {
	Seed      uint64
	ExactRate float64 // share of exact duplicates
	NearRate  float64 // share of near duplicates
}

// Default is the benchmark corpus: 3% exact and 7% near duplicates.
var Default = Gen{Seed: 2605, ExactRate: 0.03, NearRate: 0.07}

func (g Gen) words(i int, depth int) []string {
	k, of := g.kindOf(i)
	if k == Fresh || depth > 64 {
		return fresh(g.Seed, i)
	}
	w := g.words(of, depth+1)
	if k == Exact {
		return w
	}
	r := rng(g.Seed, i, 3)
	out := append([]string(nil), w...)
	switch r.IntN(3) {
	case 0: // append one or two words
		for range 1 + r.IntN(2) {
			out = append(out, common[r.IntN(len(common))])
		}
	case 1: // replace one of the last two words
		j := len(out) - 1 - r.IntN(2)
		out[j] = word(zipf(r))
	default: // delete one of the first two words
		j := r.IntN(2)
		out = append(out[:j], out[j+1:]...)
	}
	return out
}

// Row returns row i.
func (g Gen) Row(i int) Row {
	k, of := g.kindOf(i)
	w := g.words(i, 0)
	text := strings.Join(w, " ")
	text = strings.ToUpper(text[:1]) + text[1:] + "."
	if k == Exact {
		switch rng(g.Seed, i, 4).IntN(3) {
		case 1:
			text = strings.ToLower(text)
		case 2:
			text = "  " + strings.Replace(text, " ", "\n", 1)
		}
	}
	return Row{
		TuluRow: datasets.TuluRow{
			ID:       fmt.Sprintf("bench-%08d", i),
			Prompt:   text,
			Chosen:   []datasets.Message{{Role: "user", Content: text}, {Role: "assistant", Content: "ok"}},
			Rejected: []datasets.Message{{Role: "user", Content: text}, {Role: "assistant", Content: "no"}},
			Source:   "bench/synthetic",
		},
		Kind: k,
		Of:   of,
	}
}
