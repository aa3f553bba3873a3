package eval

import (
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/evolm/evolm/datasets"
)

// Benchmarks, as written in the benchmark column.
const (
	BenchRewardBench2 = "rewardbench2"
	BenchJudgeBench   = "judgebench"
	BenchPairwise     = "pairwise"
)

// Metrics, as written in the metric column.
const (
	MetricBestOfN      = "best_of_n"       // RewardBench-2 subsets but Ties
	MetricTies         = "ties_weighted"   // RewardBench-2 Ties
	MetricMeanSubsets  = "mean_of_subsets" // RewardBench-2 leaderboard number
	MetricVoteAccuracy = "vote_accuracy"   // JudgeBench
	MetricAccuracy     = "accuracy"        // pairwise files
)

// Overall is the subset name of an aggregate row.
const Overall = "overall"

// Bootstrap configures the confidence intervals.
type Bootstrap struct {
	Samples int     // resamples; 0: 1000
	Seed    uint64  // PCG seed
	Level   float64 // interval coverage; 0: 0.95
}

func (b Bootstrap) norm() Bootstrap {
	if b.Samples <= 0 {
		b.Samples = 1000
	}
	if b.Level <= 0 || b.Level >= 1 {
		b.Level = 0.95
	}
	return b
}

// Score is one row of a report: a subset's (or the overall) score with its
// bootstrap interval.
type Score struct {
	Benchmark string
	Subset    string
	Metric    string
	N         int // items scored (rows for Ties, pairs for JudgeBench)
	Score     float64
	CILow     float64
	CIHigh    float64
}

// ItemResult is one scored item, for the item-level output.
type ItemResult struct {
	Benchmark  string
	ItemID     string
	Subset     string
	NumCorrect int       // leading entries of Scores that are correct answers
	Scores     []float64 // NaN where missing; JudgeBench: A, B (original order), B, A (swapped)
	Original   Decision  // JudgeBench only
	Swapped    Decision  // JudgeBench only
	Result     float64   // the item's score; NaN for Ties rows (scored as a set)
}

// Report is the evaluation of one benchmark.
type Report struct {
	Benchmark string
	Bootstrap Bootstrap
	Scores    []Score // subsets in order, then the overall row
	Items     []ItemResult
}

// unitStat computes a statistic over a multiset of units (indices into the
// units of a subset).
type unitStat func(idx []int) (float64, error)

// subsetSpec is one subset to score and resample.
type subsetSpec struct {
	name   string
	metric string
	n      int // items reported
	units  int // resampling units
	stat   unitStat
}

// runBootstrap scores each subset on all its units and on b.Samples
// resamples, and (when overall is set) the mean of the subsets per resample.
func runBootstrap(bench string, b Bootstrap, subsets []subsetSpec, overall string) ([]Score, error) {
	b = b.norm()
	rng := rand.New(rand.NewPCG(b.Seed, 0x65766f6c6d))
	out := make([]Score, len(subsets))
	draws := make([][]float64, len(subsets))
	full := make([]float64, len(subsets))
	for i, s := range subsets {
		idx := make([]int, s.units)
		for j := range idx {
			idx[j] = j
		}
		v, err := s.stat(idx)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", bench, s.name, err)
		}
		full[i] = v
		draws[i] = make([]float64, b.Samples)
	}
	idx := []int{}
	for r := 0; r < b.Samples; r++ {
		for i, s := range subsets {
			idx = idx[:0]
			for range s.units {
				idx = append(idx, rng.IntN(s.units))
			}
			v, err := s.stat(idx)
			if err != nil {
				return nil, fmt.Errorf("%s %s: resample %d: %w", bench, s.name, r, err)
			}
			draws[i][r] = v
		}
	}
	lo, hi := (1-b.Level)/2, 1-(1-b.Level)/2
	for i, s := range subsets {
		sorted := sortedFinite(draws[i])
		out[i] = Score{Benchmark: bench, Subset: s.name, Metric: s.metric, N: s.n, Score: full[i],
			CILow: percentile(sorted, lo), CIHigh: percentile(sorted, hi)}
	}
	if overall != "" && len(subsets) > 0 {
		means := make([]float64, b.Samples)
		n := 0
		for r := range means {
			xs := make([]float64, len(subsets))
			for i := range subsets {
				xs[i] = draws[i][r]
			}
			means[r] = mean(xs)
		}
		for _, s := range subsets {
			n += s.n
		}
		sorted := sortedFinite(means)
		out = append(out, Score{Benchmark: bench, Subset: Overall, Metric: overall, N: n, Score: mean(full),
			CILow: percentile(sorted, lo), CIHigh: percentile(sorted, hi)})
	}
	return out, nil
}

// meanOf is the unitStat of per-item results.
func meanOf(results []float64) unitStat {
	return func(idx []int) (float64, error) {
		s := 0.0
		for _, i := range idx {
			s += results[i]
		}
		if len(idx) == 0 {
			return math.NaN(), nil
		}
		return s / float64(len(idx)), nil
	}
}

// RB2Scored is one RewardBench-2 item with its scores, chosen first.
type RB2Scored struct {
	ID         string
	Subset     string
	NumCorrect int
	Scores     []float64 // len = chosen + rejected; NaN where missing
}

// ScoreRewardBench2 applies the official RewardBench-2 rules (see the package
// doc) per subset, in the leaderboard's order (then any unknown subset, sorted),
// and the overall mean of subset scores. An overall row is written only when
// all six subsets are present, as the leaderboard number needs them.
func ScoreRewardBench2(items []RB2Scored, b Bootstrap) (Report, error) {
	rep := Report{Benchmark: BenchRewardBench2, Bootstrap: b.norm()}
	bySubset := map[string][]int{}
	for i, it := range items {
		if it.NumCorrect < 1 || it.NumCorrect >= len(it.Scores) {
			return Report{}, fmt.Errorf("rewardbench2 item %s: %d correct of %d scores", it.ID, it.NumCorrect, len(it.Scores))
		}
		bySubset[it.Subset] = append(bySubset[it.Subset], i)
	}
	names := slices.Collect(func(yield func(string) bool) {
		for _, s := range datasets.RB2Subsets {
			if _, ok := bySubset[s]; ok && !yield(s) {
				return
			}
		}
		var extra []string
		for s := range bySubset {
			if !slices.Contains(datasets.RB2Subsets, s) {
				extra = append(extra, s)
			}
		}
		slices.Sort(extra)
		for _, s := range extra {
			if !yield(s) {
				return
			}
		}
	})
	var specs []subsetSpec
	for _, name := range names {
		members := bySubset[name]
		if name == datasets.RB2Ties {
			spec, err := tiesSpec(items, members, &rep)
			if err != nil {
				return Report{}, err
			}
			specs = append(specs, spec)
			continue
		}
		results := make([]float64, len(members))
		for k, i := range members {
			it := items[i]
			// The official rule compares scores[0] (the first chosen) with all.
			results[k] = BestOfN(it.Scores)
			rep.Items = append(rep.Items, ItemResult{Benchmark: BenchRewardBench2, ItemID: it.ID, Subset: it.Subset,
				NumCorrect: it.NumCorrect, Scores: it.Scores, Result: results[k]})
		}
		specs = append(specs, subsetSpec{name: name, metric: MetricBestOfN, n: len(members), units: len(members), stat: meanOf(results)})
	}
	overall := ""
	if len(specs) == len(datasets.RB2Subsets) && slices.Equal(names, datasets.RB2Subsets) {
		overall = MetricMeanSubsets
	}
	return withScores(rep, b, specs, overall)
}

// withScores is rep with the bootstrapped scores of specs (overall as for
// runBootstrap).
func withScores(rep Report, b Bootstrap, specs []subsetSpec, overall string) (Report, error) {
	scores, err := runBootstrap(rep.Benchmark, b, specs, overall)
	if err != nil {
		return Report{}, err
	}
	rep.Scores = scores
	return rep, nil
}

// pooledSpecs are the specs of metric over each group of per-item results,
// in name order, and over all of them pooled (Overall), each item its own
// resampling unit.
func pooledSpecs(metric string, groups map[string][]float64, all []float64) []subsetSpec {
	names := slices.Sorted(maps.Keys(groups))
	specs := make([]subsetSpec, 0, len(names)+1)
	for _, n := range names {
		specs = append(specs, subsetSpec{name: n, metric: metric, n: len(groups[n]), units: len(groups[n]), stat: meanOf(groups[n])})
	}
	return append(specs, subsetSpec{name: Overall, metric: metric, n: len(all), units: len(all), stat: meanOf(all)})
}

// tiesSpec builds the Ties subset's spec: resampling units are prompt numbers.
func tiesSpec(items []RB2Scored, members []int, rep *Report) (subsetSpec, error) {
	byPrompt := map[int64][]TiesRow{}
	var prompts []int64
	for _, i := range members {
		it := items[i]
		_, p, err := datasets.ParseTiesID(it.ID)
		if err != nil {
			return subsetSpec{}, fmt.Errorf("rewardbench2: %w", err)
		}
		if _, ok := byPrompt[p]; !ok {
			prompts = append(prompts, p)
		}
		byPrompt[p] = append(byPrompt[p], TiesRow{ID: it.ID, NumCorrect: it.NumCorrect, Scores: it.Scores})
		rep.Items = append(rep.Items, ItemResult{Benchmark: BenchRewardBench2, ItemID: it.ID, Subset: it.Subset,
			NumCorrect: it.NumCorrect, Scores: it.Scores, Result: math.NaN()})
	}
	stat := func(idx []int) (float64, error) {
		var rows []TiesRow
		for draw, u := range idx {
			for _, r := range byPrompt[prompts[u]] {
				kind, _, _ := datasets.ParseTiesID(r.ID)
				// A prompt drawn twice stays two prompts: number by draw.
				r.ID = fmt.Sprintf("%s:%d", kind, draw)
				rows = append(rows, r)
			}
		}
		b, err := TiesScore(rows)
		return b.Score, err
	}
	return subsetSpec{name: datasets.RB2Ties, metric: MetricTies, n: len(members), units: len(prompts), stat: stat}, nil
}

// JBScored is one JudgeBench pair with the judge's decision in each order.
type JBScored struct {
	PairID   string
	Source   string
	Label    string
	Original Decision // order (A, B)
	Swapped  Decision // order (B, A), relative to the positions shown
	Scores   []float64
}

// ScoreJudgeBench applies the official two-order vote (see the package doc)
// and reports accuracy per source category (sorted) and overall.
func ScoreJudgeBench(items []JBScored, b Bootstrap) (Report, error) {
	rep := Report{Benchmark: BenchJudgeBench, Bootstrap: b.norm()}
	byCat := map[string][]float64{}
	all := make([]float64, len(items))
	for i, it := range items {
		if it.Label != datasets.LabelAB && it.Label != datasets.LabelBA {
			return Report{}, fmt.Errorf("judgebench pair %s: label %q", it.PairID, it.Label)
		}
		v := JudgeBenchVote(it.Label, it.Original, it.Swapped)
		all[i] = b2f(v.Correct)
		cat := datasets.JudgeBenchCategory(it.Source)
		byCat[cat] = append(byCat[cat], all[i])
		rep.Items = append(rep.Items, ItemResult{Benchmark: BenchJudgeBench, ItemID: it.PairID, Subset: cat,
			Scores: it.Scores, Original: it.Original, Swapped: it.Swapped, Result: all[i]})
	}
	// JudgeBench's overall number pools the pairs (not a mean of categories).
	return withScores(rep, b, pooledSpecs(MetricVoteAccuracy, byCat, all), "")
}

// PairScored is one pairwise item with its two scores.
type PairScored struct {
	ID, Subset       string
	Chosen, Rejected float64
}

// ScorePairwise reports the accuracy of chosen > rejected per subset (sorted)
// and overall (pooled).
func ScorePairwise(items []PairScored, b Bootstrap) (Report, error) {
	rep := Report{Benchmark: BenchPairwise, Bootstrap: b.norm()}
	bySub := map[string][]float64{}
	all := make([]float64, len(items))
	for i, it := range items {
		all[i] = b2f(PairwiseCorrect(it.Chosen, it.Rejected))
		bySub[it.Subset] = append(bySub[it.Subset], all[i])
		rep.Items = append(rep.Items, ItemResult{Benchmark: BenchPairwise, ItemID: it.ID, Subset: it.Subset, NumCorrect: 1,
			Scores: []float64{it.Chosen, it.Rejected}, Result: all[i]})
	}
	return withScores(rep, b, pooledSpecs(MetricAccuracy, bySub, all), "")
}

// Coverage is the share of a subset's items (every item for Overall) whose
// every score is present: a missing score counts against the item (a tie
// or a loss), so a score over few covered items says little about the
// judge. NaN when the subset has no items.
func (r Report) Coverage(subset string) float64 {
	var n, full int
	for _, it := range r.Items {
		if subset != Overall && it.Subset != subset {
			continue
		}
		n++
		if !slices.ContainsFunc(it.Scores, math.IsNaN) {
			full++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(full) / float64(n)
}

// CheckCoverage returns an error when a report's coverage over all its
// items is below min (stages.eval.min_coverage).
func CheckCoverage(r Report, min float64) error {
	if c := r.Coverage(Overall); !math.IsNaN(c) && c < min {
		return fmt.Errorf("%s: coverage %.3f: only that share of the items has every score, below min_coverage %.3f: the scores say little about the judge (see eval_judgments' score_missing_reason; lower the bound to accept it)",
			r.Benchmark, c, min)
	}
	return nil
}

// WriteTable prints reports as an aligned table: benchmark, subset, metric,
// n, the coverage (Report.Coverage), score and the bootstrap interval,
// scores in percent.
func WriteTable(w io.Writer, reports ...Report) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tsubset\tmetric\tn\tcoverage\tscore\tci")
	for _, r := range reports {
		for _, s := range r.Scores {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t[%s, %s] (%.0f%%, B=%d)\n", s.Benchmark, s.Subset, s.Metric, s.N,
				pct(r.Coverage(s.Subset)), pct(s.Score), pct(s.CILow), pct(s.CIHigh), 100*r.Bootstrap.Level, r.Bootstrap.Samples)
		}
	}
	return tw.Flush()
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strings.TrimSpace(fmt.Sprintf("%6.2f", 100*x))
}
