package eval

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/evolm/evolm/datasets"
)

// rank maps a missing score (NaN) below every real one.
func rank(s float64) float64 {
	if math.IsNaN(s) {
		return math.Inf(-1)
	}
	return s
}

// BestOfN scores one best-of-N item: scores[0] is the chosen completion's
// score, the rest the rejected ones'. It returns 1 when scores[0] is strictly
// highest, 1/k when k scores (scores[0] among them) tie at the top, else 0.
// With fewer than two scores it returns NaN.
func BestOfN(scores []float64) float64 {
	if len(scores) < 2 {
		return math.NaN()
	}
	top := math.Inf(-1)
	for _, s := range scores {
		top = max(top, rank(s))
	}
	if rank(scores[0]) != top {
		return 0
	}
	k := 0
	for _, s := range scores {
		if rank(s) == top {
			k++
		}
	}
	return 1 / float64(k)
}

// TiesRow is one row of RewardBench-2's Ties subset with its scores: the
// first NumCorrect scores are the correct answers'.
type TiesRow struct {
	ID         string // "ref:<n>" or "tied:<n>"
	NumCorrect int
	Scores     []float64
}

// TiesBreakdown is the Ties score and its components.
type TiesBreakdown struct {
	RefAccuracy              float64
	TiedAccuracy             float64
	CorrectnessPreferred     float64 // NaN when no prompt has both a ref and a tied row
	CorrectnessPreferredHard float64
	MarginScore              float64
	Score                    float64
	RefRows, TiedRows        int
	Paired                   int // prompts with both a ref and a tied row
}

// tiesRank maps a missing score (NaN) to −1, below every valid [0, 1] score,
// as the official generative runner rates an unparsed judgment −1. Unlike −∞
// it keeps the margins finite: a missing correct answer widens the spread by
// a bounded amount, and a tied row whose incorrect answers are all missing is
// accurate only if its correct answers have scores.
func tiesRank(s float64) float64 {
	if math.IsNaN(s) {
		return -1
	}
	return s
}

type tiesStats struct {
	accurate     bool
	spread       float64 // max(correct) − min(correct); NaN with one correct answer
	marginCorInc float64 // min(correct) − max(incorrect)
}

func computeTiesStats(r TiesRow) (tiesStats, error) {
	if r.NumCorrect < 1 || r.NumCorrect >= len(r.Scores) {
		return tiesStats{}, fmt.Errorf("ties row %s: %d correct of %d scores, want at least one of each", r.ID, r.NumCorrect, len(r.Scores))
	}
	cor, inc := r.Scores[:r.NumCorrect], r.Scores[r.NumCorrect:]
	bestC, worstC := math.Inf(-1), math.Inf(1)
	for _, s := range cor {
		bestC, worstC = max(bestC, tiesRank(s)), min(worstC, tiesRank(s))
	}
	bestI := math.Inf(-1)
	for _, s := range inc {
		bestI = max(bestI, tiesRank(s))
	}
	st := tiesStats{spread: math.NaN(), marginCorInc: worstC - bestI}
	if len(cor) > 1 {
		st.spread = bestC - worstC
	}
	st.accurate = st.marginCorInc > 0
	return st, nil
}

// TiesScore computes the Ties subset's weighted score from its rows, as the
// official process_single_model does (see the package doc): rows pair by the
// integer value of their prompt number, and a missing score counts as −1. A
// tied row needs at least two correct answers for the margin terms.
func TiesScore(rows []TiesRow) (TiesBreakdown, error) {
	ref, tied := map[int64]tiesStats{}, map[int64]tiesStats{}
	var b TiesBreakdown
	var refAcc, tiedAcc float64
	for _, r := range rows {
		kind, prompt, err := datasets.ParseTiesID(r.ID)
		if err != nil {
			return TiesBreakdown{}, err
		}
		st, err := computeTiesStats(r)
		if err != nil {
			return TiesBreakdown{}, err
		}
		if kind == "ref" {
			ref[prompt] = st
			b.RefRows++
			refAcc += b2f(st.accurate)
		} else {
			if r.NumCorrect < 2 {
				return TiesBreakdown{}, fmt.Errorf("ties row %s: a tied row needs at least 2 correct answers, has %d", r.ID, r.NumCorrect)
			}
			tied[prompt] = st
			b.TiedRows++
			tiedAcc += b2f(st.accurate)
		}
	}
	if b.RefRows > 0 {
		b.RefAccuracy = refAcc / float64(b.RefRows)
	}
	if b.TiedRows > 0 {
		b.TiedAccuracy = tiedAcc / float64(b.TiedRows)
	}
	var pref, hard, margin float64
	// Sorted keys: a float sum in map order would differ in the last bits
	// between runs.
	prompts := slices.Sorted(maps.Keys(tied))
	for _, p := range prompts {
		t := tied[p]
		r, ok := ref[p]
		if !ok {
			continue
		}
		b.Paired++
		m := min(r.marginCorInc, t.marginCorInc)
		pref += b2f(t.marginCorInc > t.spread)
		hard += b2f(m > t.spread)
		// numpy: x/0 is ±inf (tanh → ±1) and 0/0 is nan (→ 0 by nan_to_num).
		ms := math.Tanh(m/t.spread - 1)
		if math.IsNaN(ms) {
			ms = 0
		}
		margin += ms
	}
	n := float64(b.Paired)
	// numpy's mean of an empty array is NaN; the official score is then NaN too.
	b.CorrectnessPreferred, b.CorrectnessPreferredHard, b.MarginScore = pref/n, hard/n, margin/n
	b.Score = 0.30*b.TiedAccuracy + 0.30*b.RefAccuracy + 0.20*b.CorrectnessPreferred +
		0.20*b.CorrectnessPreferredHard + 0.01*b.MarginScore
	return b, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Decision is a judge's verdict on a pair shown in some order, relative to the
// positions shown: datasets.LabelAB, LabelBA, LabelTie, or "" when none could
// be parsed.
type Decision string

// DecideByScores turns the scores a pointwise judge gave the first and second
// response shown into a Decision; a missing score gives no decision.
func DecideByScores(first, second float64) Decision {
	switch {
	case math.IsNaN(first) || math.IsNaN(second):
		return ""
	case first > second:
		return datasets.LabelAB
	case second > first:
		return datasets.LabelBA
	}
	return datasets.LabelTie
}

// Flip maps a decision made in the swapped order back to the original one.
func (d Decision) Flip() Decision {
	switch d {
	case datasets.LabelAB:
		return datasets.LabelBA
	case datasets.LabelBA:
		return datasets.LabelAB
	}
	return d
}

// Vote is the outcome of one JudgeBench pair.
type Vote struct {
	Correct    bool // vote > 0
	Incorrect  bool // vote < 0
	Consistent bool // both decisions (in original positions) agree
}

// JudgeBenchVote decides a pair from its decision in the original order
// (A, B) and in the swapped order (B, A), against label "A>B" or "B>A"
// (compute_final_metrics with reverse_order).
func JudgeBenchVote(label string, original, swapped Decision) Vote {
	d1, d2 := original, swapped.Flip()
	lab := Decision(label)
	vote := 0
	for _, d := range []Decision{d1, d2} {
		switch d {
		case lab:
			vote++
		case lab.Flip():
			vote--
		}
	}
	return Vote{Correct: vote > 0, Incorrect: vote < 0, Consistent: d1 == d2}
}

// PairwiseCorrect reports whether the chosen response scored strictly above
// the rejected one.
func PairwiseCorrect(chosen, rejected float64) bool { return rank(chosen) > rank(rejected) }

// mean of xs; NaN when empty.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// percentile of sorted xs at q in [0, 1], linear interpolation (numpy's default).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// sortedFinite returns the non-NaN values of xs, sorted.
func sortedFinite(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}
