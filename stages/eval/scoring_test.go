package eval

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/datasets"
)

var nan = math.NaN()

func TestBestOfN(t *testing.T) {
	tests := []struct {
		name   string
		scores []float64
		want   float64
	}{
		{"chosen strictly highest", []float64{0.9, 0.1, 0.2, 0.3}, 1},
		{"chosen below one rejected", []float64{0.4, 0.5, 0.1, 0.1}, 0},
		{"tie of two at the top", []float64{0.5, 0.5, 0.1, 0.2}, 1.0 / 2},
		{"tie of three at the top", []float64{0.5, 0.2, 0.5, 0.5}, 1.0 / 3},
		{"all four tie", []float64{0.5, 0.5, 0.5, 0.5}, 1.0 / 4},
		{"rejected tie below chosen", []float64{0.6, 0.5, 0.5, 0.5}, 1},
		{"rejected tie above chosen", []float64{0.4, 0.5, 0.5, 0.1}, 0},
		{"chosen missing", []float64{nan, 0.1, 0.2, 0.3}, 0},
		{"rejected missing", []float64{0.1, nan, nan, nan}, 1},
		{"all missing tie", []float64{nan, nan}, 1.0 / 2},
	}
	for _, tc := range tests {
		if got := BestOfN(tc.scores); got != tc.want {
			t.Errorf("%s: BestOfN(%v) = %v, want %v", tc.name, tc.scores, got, tc.want)
		}
	}
	if !math.IsNaN(BestOfN([]float64{1})) {
		t.Error("BestOfN of one score should be NaN")
	}
}

// tiesTable is a hand-made Ties subset. Per prompt (correct | incorrect):
//
//	1 ref  [1 | .5 .25]      margin .5   accurate
//	  tied [.75 .5 | .25]    spread .25, margin .25, accurate; .25 > .25 no; min(.5,.25) > .25 no; tanh(.25/.25−1) = 0
//	2 ref  [.5 | .75]        margin −.25 not accurate
//	  tied [1 .875 | .25 0]  spread .125, margin .625, accurate; yes; min(−.25,.625) > .125 no; tanh(−.25/.125−1) = tanh(−3)
//	3 tied [.5 .5 | .5]      margin 0, not accurate (no ref: not paired)
//	4 ref  [.25 | 0]         accurate (no tied: not paired)
//	5 ref  [1 | 0]           margin 1, accurate
//	  tied [.5 .5 | 0]       spread 0, margin .5, accurate; yes; min(1,.5) > 0 yes; tanh(.5/0−1) = tanh(+Inf) = 1
//	6 ref  [.5 | .5]         margin 0, not accurate
//	  tied [.5 .5 | .25]     spread 0, margin .25, accurate; yes; min(0,.25) > 0 no; tanh(0/0−1) = NaN → 0
var tiesTable = []TiesRow{
	{"ref:1", 1, []float64{1, .5, .25}}, {"tied:1", 2, []float64{.75, .5, .25}},
	{"ref:2", 1, []float64{.5, .75}}, {"tied:2", 2, []float64{1, .875, .25, 0}},
	{"tied:3", 2, []float64{.5, .5, .5}},
	{"ref:4", 1, []float64{.25, 0}},
	{"ref:5", 1, []float64{1, 0}}, {"tied:5", 2, []float64{.5, .5, 0}},
	{"ref:6", 1, []float64{.5, .5}}, {"tied:6", 2, []float64{.5, .5, .25}},
}

func tiesWant() TiesBreakdown {
	b := TiesBreakdown{
		RefAccuracy:              3.0 / 5, // 1, 4, 5
		TiedAccuracy:             4.0 / 5, // 1, 2, 5, 6
		CorrectnessPreferred:     3.0 / 4, // 2, 5, 6 of paired 1, 2, 5, 6
		CorrectnessPreferredHard: 1.0 / 4, // 5
		MarginScore:              (0 + math.Tanh(-3) + 1 + 0) / 4,
		RefRows:                  5, TiedRows: 5, Paired: 4,
	}
	b.Score = 0.30*b.TiedAccuracy + 0.30*b.RefAccuracy + 0.20*b.CorrectnessPreferred + 0.20*b.CorrectnessPreferredHard + 0.01*b.MarginScore
	return b
}

func TestTiesScore(t *testing.T) {
	got, err := TiesScore(tiesTable)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(tiesWant(), got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("ties (-want +got):\n%s", d)
	}
	// 0.3·0.8 + 0.3·0.6 + 0.2·0.75 + 0.2·0.25 + 0.01·(1 − tanh 3)/4
	if math.Abs(got.Score-0.6200123631157825) > 1e-12 {
		t.Errorf("ties score %.16f, want 0.6200123631157825", got.Score)
	}
}

func TestTiesScoreErrors(t *testing.T) {
	for _, rows := range [][]TiesRow{
		{{"tied:1", 1, []float64{1, 0}}},      // a tied row with one correct answer
		{{"ref:1", 2, []float64{1, 0}}},       // no incorrect answer
		{{"other:1", 1, []float64{1, 0}}},     // bad id
		{{"ref:1", 0, []float64{1, 0}}},       // no correct answer
		{{"ref", 1, []float64{1, 0}}},         // no prompt number
		{{"tied:1:2", 2, []float64{1, 1, 0}}}, // two colons
		{{"ref:1.0", 1, []float64{1, 0}}},     // int() rejects a decimal point
		{{"ref:x7", 1, []float64{1, 0}}},      // not a number
		{{"ref:7_", 1, []float64{1, 0}}},      // int() rejects a trailing underscore
	} {
		if _, err := TiesScore(rows); err == nil {
			t.Errorf("TiesScore(%v): want an error", rows)
		}
	}
	// No paired prompt: the official score is NaN (mean of an empty array).
	b, err := TiesScore([]TiesRow{{"ref:1", 1, []float64{1, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(b.Score) || b.RefAccuracy != 1 {
		t.Errorf("unpaired ties: %+v", b)
	}
}

// TestTiesScoreOfficialRules checks the two rules of the official code that
// a hand-made table without them would miss: prompt numbers pair by int()
// value, and a missing score is rated −1.
func TestTiesScoreOfficialRules(t *testing.T) {
	nan := math.NaN()
	// int(): "07", " 7" and "+0_7" are all prompt 7, so these rows pair.
	paired := []TiesRow{{"ref:07", 1, []float64{1, 0}}, {"tied: +0_7", 2, []float64{.75, .5, .25}}}
	b, err := TiesScore(paired)
	if err != nil {
		t.Fatal(err)
	}
	if b.Paired != 1 {
		t.Fatalf("ref:07 and tied: +0_7 did not pair: %+v", b)
	}
	tests := []struct {
		name string
		rows []TiesRow
		want TiesBreakdown
	}{
		{
			// ref: margin min(1) − max(−1) = 2; tied: spread 1 − (−1) = 2,
			// margin −1 − .25 = −1.25, not accurate; min(2, −1.25) = −1.25.
			// With −∞ the spread would be +Inf and tanh(−Inf/Inf − 1) NaN → 0.
			name: "missing correct answer",
			rows: []TiesRow{{"ref:3", 1, []float64{1, nan}}, {"tied:3", 2, []float64{1, nan, .25}}},
			want: TiesBreakdown{RefAccuracy: 1, TiedAccuracy: 0, CorrectnessPreferred: 0, CorrectnessPreferredHard: 0,
				MarginScore: math.Tanh(-1.25/2 - 1), RefRows: 1, TiedRows: 1, Paired: 1},
		},
		{
			// tied: incorrect answers all missing → −1; correct .5 and .5:
			// spread 0, margin 1.5, accurate; 1.5 > 0; min(.5, 1.5) > 0;
			// tanh(.5/0 − 1) = 1.
			name: "incorrect answers all missing",
			rows: []TiesRow{{"ref:4", 1, []float64{.5, 0}}, {"tied:4", 2, []float64{.5, .5, nan, nan}}},
			want: TiesBreakdown{RefAccuracy: 1, TiedAccuracy: 1, CorrectnessPreferred: 1, CorrectnessPreferredHard: 1,
				MarginScore: 1, RefRows: 1, TiedRows: 1, Paired: 1},
		},
		{
			// Everything missing: all −1, margins 0, spread 0: nothing accurate,
			// 0 > 0 fails, tanh(0/0 − 1) is NaN → 0.
			name: "all missing",
			rows: []TiesRow{{"ref:5", 1, []float64{nan, nan}}, {"tied:5", 2, []float64{nan, nan, nan}}},
			want: TiesBreakdown{RefRows: 1, TiedRows: 1, Paired: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TiesScore(tc.rows)
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			w.Score = 0.30*w.TiedAccuracy + 0.30*w.RefAccuracy + 0.20*w.CorrectnessPreferred + 0.20*w.CorrectnessPreferredHard + 0.01*w.MarginScore
			if d := cmp.Diff(w, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestJudgeBenchVote(t *testing.T) {
	ab, ba, tie := Decision(datasets.LabelAB), Decision(datasets.LabelBA), Decision(datasets.LabelTie)
	tests := []struct {
		name              string
		label             string
		original, swapped Decision
		want              Vote
	}{
		{"right in both orders", "A>B", ab, ba, Vote{Correct: true, Consistent: true}},
		{"position bias: always the first", "A>B", ab, ab, Vote{}},
		{"position bias: always the second", "A>B", ba, ba, Vote{}},
		{"wrong in both orders", "A>B", ba, ab, Vote{Incorrect: true, Consistent: true}},
		{"tie in both orders", "A>B", tie, tie, Vote{Consistent: true}},
		{"right then tie (official: right)", "A>B", ab, tie, Vote{Correct: true}},
		{"wrong then tie", "A>B", ba, tie, Vote{Incorrect: true}},
		{"unparsed then right", "A>B", "", ba, Vote{Correct: true}},
		{"both unparsed", "A>B", "", "", Vote{Consistent: true}},
		{"label B>A right in both", "B>A", ba, ab, Vote{Correct: true, Consistent: true}},
	}
	for _, tc := range tests {
		if got := JudgeBenchVote(tc.label, tc.original, tc.swapped); got != tc.want {
			t.Errorf("%s: JudgeBenchVote(%s, %q, %q) = %+v, want %+v", tc.name, tc.label, tc.original, tc.swapped, got, tc.want)
		}
	}
}

// TestOrderSwap scores a pair with a pointwise judge in both orders: the
// swapped order shows B first, so its positional decision must be flipped.
func TestOrderSwap(t *testing.T) {
	scoreA, scoreB := 0.9, 0.2 // the judge's scores of A and B, whatever the position
	orig := DecideByScores(scoreA, scoreB)
	swapped := DecideByScores(scoreB, scoreA)
	if orig != "A>B" || swapped != "B>A" {
		t.Fatalf("decisions %q, %q", orig, swapped)
	}
	if v := JudgeBenchVote("A>B", orig, swapped); !v.Correct || !v.Consistent {
		t.Errorf("label A>B: %+v", v)
	}
	if v := JudgeBenchVote("B>A", orig, swapped); !v.Incorrect {
		t.Errorf("label B>A: %+v", v)
	}
	if d := DecideByScores(0.5, 0.5); d != "A=B" {
		t.Errorf("tie: %q", d)
	}
	if d := DecideByScores(nan, 0.5); d != "" {
		t.Errorf("missing: %q", d)
	}
}

func TestScoreRewardBench2(t *testing.T) {
	var items []RB2Scored
	add := func(subset string, scores ...[]float64) {
		for i, s := range scores {
			items = append(items, RB2Scored{ID: subset + string(rune('0'+i)), Subset: subset, NumCorrect: 1, Scores: s})
		}
	}
	add("Factuality", []float64{1, 0, 0, 0}, []float64{0, 1, 0, 0})                     // 1, 0 → 1/2
	add("Precise IF", []float64{.5, .5, 0, 0})                                          // 1/2
	add("Math", []float64{.5, .5, .5, 0}, []float64{1, 0, 0, 0}, []float64{1, 1, 1, 1}) // 1/3, 1, 1/4 → 19/36
	add("Safety", []float64{1, 0, 0, 0})                                                // 1
	add("Focus", []float64{0, 1, 0, 0})                                                 // 0
	for _, r := range tiesTable {
		items = append(items, RB2Scored{ID: r.ID, Subset: "Ties", NumCorrect: r.NumCorrect, Scores: r.Scores})
	}
	rep, err := ScoreRewardBench2(items, Bootstrap{Samples: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ties := tiesWant().Score
	want := []Score{
		{Benchmark: "rewardbench2", Subset: "Factuality", Metric: MetricBestOfN, N: 2, Score: 0.5},
		{Benchmark: "rewardbench2", Subset: "Precise IF", Metric: MetricBestOfN, N: 1, Score: 0.5},
		{Benchmark: "rewardbench2", Subset: "Math", Metric: MetricBestOfN, N: 3, Score: 19.0 / 36},
		{Benchmark: "rewardbench2", Subset: "Safety", Metric: MetricBestOfN, N: 1, Score: 1},
		{Benchmark: "rewardbench2", Subset: "Focus", Metric: MetricBestOfN, N: 1, Score: 0},
		{Benchmark: "rewardbench2", Subset: "Ties", Metric: MetricTies, N: 10, Score: ties},
		{Benchmark: "rewardbench2", Subset: "overall", Metric: MetricMeanSubsets, N: 18, Score: (0.5 + 0.5 + 19.0/36 + 1 + 0 + ties) / 6},
	}
	if d := cmp.Diff(want, rep.Scores, cmpopts.EquateApprox(0, 1e-12), cmpopts.IgnoreFields(Score{}, "CILow", "CIHigh")); d != "" {
		t.Errorf("scores (-want +got):\n%s", d)
	}
	for _, s := range rep.Scores {
		if !(s.CILow <= s.Score+1e-12 && s.Score <= s.CIHigh+1e-12) && s.Subset != "Ties" {
			t.Errorf("%s: score %v outside its interval [%v, %v]", s.Subset, s.Score, s.CILow, s.CIHigh)
		}
	}
	// A one-item subset cannot vary under resampling.
	if s := rep.Scores[3]; s.CILow != 1 || s.CIHigh != 1 {
		t.Errorf("Safety CI [%v, %v], want [1, 1]", s.CILow, s.CIHigh)
	}
	if len(rep.Items) != 18 {
		t.Errorf("%d item results, want 18", len(rep.Items))
	}
	// Same seed, same intervals; another seed, other intervals.
	again, _ := ScoreRewardBench2(items, Bootstrap{Samples: 200, Seed: 1})
	if d := cmp.Diff(rep.Scores, again.Scores); d != "" {
		t.Errorf("not reproducible (-first +second):\n%s", d)
	}
	other, _ := ScoreRewardBench2(items, Bootstrap{Samples: 200, Seed: 2})
	if cmp.Equal(rep.Scores, other.Scores) {
		t.Error("seed 2 gave the same intervals as seed 1")
	}
	// Without all six subsets there is no leaderboard number.
	part, err := ScoreRewardBench2(items[:3], Bootstrap{Samples: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range part.Scores {
		if s.Subset == Overall {
			t.Errorf("overall row with two subsets: %+v", s)
		}
	}
}

func TestScoreJudgeBench(t *testing.T) {
	items := []JBScored{
		{PairID: "1", Source: "mmlu-pro-law", Label: "A>B", Original: "A>B", Swapped: "B>A"},        // right
		{PairID: "2", Source: "mmlu-pro-biology", Label: "B>A", Original: "A>B", Swapped: "A>B"},    // inconsistent
		{PairID: "3", Source: "livebench-math", Label: "B>A", Original: "B>A", Swapped: "A>B"},      // right
		{PairID: "4", Source: "livebench-math", Label: "A>B", Original: "A=B", Swapped: "A=B"},      // tie
		{PairID: "5", Source: "livecodebench", Label: "A>B", Original: "A>B", Swapped: "A=B"},       // right (one vote)
		{PairID: "6", Source: "livebench-reasoning", Label: "A>B", Original: "B>A", Swapped: "A>B"}, // wrong
	}
	rep, err := ScoreJudgeBench(items, Bootstrap{Samples: 100, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []Score{
		{Benchmark: "judgebench", Subset: "coding", Metric: MetricVoteAccuracy, N: 1, Score: 1},
		{Benchmark: "judgebench", Subset: "knowledge", Metric: MetricVoteAccuracy, N: 2, Score: 0.5},
		{Benchmark: "judgebench", Subset: "math", Metric: MetricVoteAccuracy, N: 2, Score: 0.5},
		{Benchmark: "judgebench", Subset: "reasoning", Metric: MetricVoteAccuracy, N: 1, Score: 0},
		{Benchmark: "judgebench", Subset: "overall", Metric: MetricVoteAccuracy, N: 6, Score: 0.5},
	}
	if d := cmp.Diff(want, rep.Scores, cmpopts.IgnoreFields(Score{}, "CILow", "CIHigh")); d != "" {
		t.Errorf("scores (-want +got):\n%s", d)
	}
}

func TestScorePairwise(t *testing.T) {
	items := []PairScored{
		{"a", "s1", 0.9, 0.1}, {"b", "s1", 0.5, 0.5}, {"c", "s2", 0.1, 0.9}, {"d", "s2", 0.3, nan}, {"e", "s2", nan, 0.3},
	}
	rep, err := ScorePairwise(items, Bootstrap{Samples: 50})
	if err != nil {
		t.Fatal(err)
	}
	want := []Score{
		{Benchmark: "pairwise", Subset: "s1", Metric: MetricAccuracy, N: 2, Score: 0.5}, // a right, b tie is wrong
		{Benchmark: "pairwise", Subset: "s2", Metric: MetricAccuracy, N: 3, Score: 1.0 / 3},
		{Benchmark: "pairwise", Subset: "overall", Metric: MetricAccuracy, N: 5, Score: 2.0 / 5},
	}
	if d := cmp.Diff(want, rep.Scores, cmpopts.EquateApprox(0, 1e-12), cmpopts.IgnoreFields(Score{}, "CILow", "CIHigh")); d != "" {
		t.Errorf("scores (-want +got):\n%s", d)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "overall") || !strings.Contains(buf.String(), "40.00") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	for q, want := range map[float64]float64{0: 1, 0.25: 2, 0.5: 3, 0.1: 1.4, 1: 5} {
		if got := percentile(xs, q); math.Abs(got-want) > 1e-12 {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
}
