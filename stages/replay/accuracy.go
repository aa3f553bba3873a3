package replay

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/schemas"
)

// Accuracy is the discriminative accuracy of one group of (pair, rubric)
// judgments: the share of those with both scores in which s(a+) > s(a−).
type Accuracy struct {
	Step     int64  // -1: all steps
	Strategy string // "": all strategies
	Judged   int64  // (pair, rubric) with both scores
	Missing  int64  // (pair, rubric) with a score missing (not in Judged)
	Correct  int64  // s(a+) > s(a−) strictly; a tie is not correct
	Margin   float64
}

// Value is Correct/Judged; NaN when nothing was judged.
func (a Accuracy) Value() float64 {
	if a.Judged == 0 {
		return math.NaN()
	}
	return float64(a.Correct) / float64(a.Judged)
}

// Coverage is the share of (pair, rubric) with both scores,
// Judged/(Judged+Missing): the accuracy is over that share only. NaN when
// there are none.
func (a Accuracy) Coverage() float64 {
	if a.Judged+a.Missing == 0 {
		return math.NaN()
	}
	return float64(a.Judged) / float64(a.Judged+a.Missing)
}

// MeanMargin is the mean s(a+) − s(a−) over judged rows; NaN when none.
func (a Accuracy) MeanMargin() float64 {
	if a.Judged == 0 {
		return math.NaN()
	}
	return a.Margin / float64(a.Judged)
}

// Discriminate computes the accuracy overall, per strategy and per step from
// pairs and the judgments of their a+ ("<pair_id>/chosen") and a−
// ("<pair_id>/rejected") under each rubric. Rows: overall first, then per
// strategy (sorted), then per step (ascending).
func Discriminate(pairs []schemas.Pair, judgments []schemas.Judgment) []Accuracy {
	type key struct{ pair, rubric string }
	type both struct{ c, r *float64 }
	sc := map[key]*both{}
	var order []key
	for i := range judgments {
		j := &judgments[i]
		pid, side, ok := cutLast(j.ResponseID)
		if !ok || (side != "chosen" && side != "rejected") {
			continue
		}
		k := key{pid, j.RubricID}
		b := sc[k]
		if b == nil {
			b = &both{}
			sc[k] = b
			order = append(order, k)
		}
		if side == "chosen" {
			b.c = j.Score
		} else {
			b.r = j.Score
		}
	}
	byPair := map[string]*schemas.Pair{}
	for i := range pairs {
		byPair[pairs[i].PairID] = &pairs[i]
	}
	overall := &Accuracy{Step: -1}
	byStrat, byStep := map[string]*Accuracy{}, map[int64]*Accuracy{}
	for _, k := range order {
		p := byPair[k.pair]
		if p == nil {
			continue
		}
		if byStrat[p.Strategy] == nil {
			byStrat[p.Strategy] = &Accuracy{Step: -1, Strategy: p.Strategy}
		}
		if byStep[p.Step] == nil {
			byStep[p.Step] = &Accuracy{Step: p.Step}
		}
		b := sc[k]
		for _, a := range []*Accuracy{overall, byStrat[p.Strategy], byStep[p.Step]} {
			if b.c == nil || b.r == nil {
				a.Missing++
				continue
			}
			a.Judged++
			a.Margin += *b.c - *b.r
			if *b.c > *b.r {
				a.Correct++
			}
		}
	}
	out := []Accuracy{*overall}
	for _, s := range slices.Sorted(maps.Keys(byStrat)) {
		out = append(out, *byStrat[s])
	}
	for _, s := range slices.SortedFunc(maps.Keys(byStep), cmp.Compare[int64]) {
		out = append(out, *byStep[s])
	}
	return out
}

func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// ResultsTable is the replay's summary table.
var ResultsTable = schemas.ReplayResults.Name

// ResultsSchema is the schema of replay_results (schemas.ReplayResults):
// one row per group; step -1 and strategy "" mean all.
var ResultsSchema = schemas.ReplayResults.Schema()

func group(a Accuracy) string {
	switch {
	case a.Strategy != "":
		return "strategy"
	case a.Step >= 0:
		return "step"
	}
	return "overall"
}

// Row is a as a replay_results row; a ratio that is NaN is null.
func (a Accuracy) Row() schemas.ReplayResult {
	opt := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	return schemas.ReplayResult{Group: group(a), Step: a.Step, Strategy: a.Strategy, Judged: a.Judged, Missing: a.Missing,
		Correct: a.Correct, Accuracy: opt(a.Value()), MeanMargin: opt(a.MeanMargin()), Coverage: opt(a.Coverage())}
}

// BuildResults turns accuracies into a batch (the caller releases it).
func BuildResults(mem memory.Allocator, acc []Accuracy) arrow.RecordBatch {
	rows := make([]schemas.ReplayResult, len(acc))
	for i, a := range acc {
		rows[i] = a.Row()
	}
	return schemas.ReplayResults.Build(mem, rows)
}

// WriteTable prints accuracies as an aligned table.
func WriteTable(w io.Writer, acc []Accuracy) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "group\tstep\tstrategy\tjudged\tmissing\tcoverage\taccuracy\tmean_margin")
	for _, a := range acc {
		step := "all"
		if a.Step >= 0 {
			step = fmt.Sprint(a.Step)
		}
		strat := a.Strategy
		if strat == "" {
			strat = "all"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.3f\t%.3f\t%.3f\n", group(a), step, strat, a.Judged, a.Missing, a.Coverage(), a.Value(), a.MeanMargin())
	}
	return tw.Flush()
}

// CheckCoverage returns an error when the overall coverage (acc[0]) is
// below min: an accuracy over a small share of the pairs is not the
// judge's accuracy (missing scores are rarely missing at random).
func CheckCoverage(acc []Accuracy, min float64) error {
	if len(acc) == 0 {
		return nil
	}
	a := acc[0]
	if c := a.Coverage(); a.Judged+a.Missing > 0 && c < min {
		return fmt.Errorf("coverage %.3f: %d of %d (pair, rubric) have both scores, below %s %.3f: the accuracy %.3f covers too few pairs (see the judgments' score_missing_reason; lower the bound to accept it)",
			c, a.Judged, a.Judged+a.Missing, KeyMinCoverage, min, a.Value())
	}
	return nil
}
