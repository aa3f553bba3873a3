package schemas

// The summary tables of the evaluating stages: the replay's discriminative
// accuracy (replay_results) and the benchmark evaluation's scores
// (eval_results) and items (eval_items).

// ReplayResult is a row of replay_results: the judge's discriminative
// accuracy over one group of (pair, rubric) judgments. The ratios are null
// where their denominator is 0.
type ReplayResult struct {
	Group      string // overall | strategy | step
	Step       int64  // -1: all steps
	Strategy   string // "": all strategies
	Judged     int64  // (pair, rubric) with both scores
	Missing    int64  // (pair, rubric) with a score missing
	Correct    int64  // s(a+) > s(a−) strictly
	Accuracy   *float64
	MeanMargin *float64
	Coverage   *float64 // judged / (judged + missing)
}

// ReplayResults is the replay_results table. Version 2 added coverage.
var ReplayResults = newTable("replay_results", 2,
	strCol("group", func(r *ReplayResult) *string { return &r.Group }),
	numCol("step", func(r *ReplayResult) *int64 { return &r.Step }),
	strCol("strategy", func(r *ReplayResult) *string { return &r.Strategy }),
	numCol("judged", func(r *ReplayResult) *int64 { return &r.Judged }),
	numCol("missing", func(r *ReplayResult) *int64 { return &r.Missing }),
	numCol("correct", func(r *ReplayResult) *int64 { return &r.Correct }),
	optF64Col("accuracy", func(r *ReplayResult) **float64 { return &r.Accuracy }),
	optF64Col("mean_margin", func(r *ReplayResult) **float64 { return &r.MeanMargin }),
	added(2, optF64Col("coverage", func(r *ReplayResult) **float64 { return &r.Coverage })),
)

// EvalResult is a row of eval_results: the score of one (benchmark, subset)
// or of a benchmark overall. Scores are fractions in [0, 1] (Ties can be
// slightly outside: its margin term is in (−1, 1)); null where undefined.
type EvalResult struct {
	Benchmark        string
	Subset           string
	Metric           string
	N                int64 // items scored (rows for Ties, pairs for JudgeBench)
	Score            *float64
	CILow            *float64
	CIHigh           *float64
	CILevel          float64 // the bootstrap interval's coverage
	BootstrapSamples int64
	BootstrapSeed    int64    // the PCG seed's bits
	Coverage         *float64 // the share of the subset's items with every score
}

// EvalResults is the eval_results table. Version 2 added coverage.
var EvalResults = newTable("eval_results", 2,
	strCol("benchmark", func(r *EvalResult) *string { return &r.Benchmark }),
	strCol("subset", func(r *EvalResult) *string { return &r.Subset }),
	strCol("metric", func(r *EvalResult) *string { return &r.Metric }),
	numCol("n", func(r *EvalResult) *int64 { return &r.N }),
	optF64Col("score", func(r *EvalResult) **float64 { return &r.Score }),
	optF64Col("ci_low", func(r *EvalResult) **float64 { return &r.CILow }),
	optF64Col("ci_high", func(r *EvalResult) **float64 { return &r.CIHigh }),
	numCol("ci_level", func(r *EvalResult) *float64 { return &r.CILevel }),
	numCol("bootstrap_samples", func(r *EvalResult) *int64 { return &r.BootstrapSamples }),
	numCol("bootstrap_seed", func(r *EvalResult) *int64 { return &r.BootstrapSeed }),
	added(2, optF64Col("coverage", func(r *EvalResult) **float64 { return &r.Coverage })),
)

// EvalItem is a row of eval_items: one scored item of a benchmark.
type EvalItem struct {
	Benchmark        string
	ItemID           string
	Subset           string
	NumCorrect       int32     // leading entries of Scores that are correct answers
	Scores           []float64 // NaN where missing; JudgeBench: A, B (original order), B, A (swapped)
	DecisionOriginal *string   // JudgeBench only: the verdict in the original order
	DecisionSwapped  *string   // JudgeBench only: the verdict with the answers swapped
	Result           *float64  // the item's score; null for Ties rows (scored as a set)
}

// EvalItems is the eval_items table.
var EvalItems = newTable("eval_items", 1,
	strCol("benchmark", func(r *EvalItem) *string { return &r.Benchmark }),
	strCol("item_id", func(r *EvalItem) *string { return &r.ItemID }),
	strCol("subset", func(r *EvalItem) *string { return &r.Subset }),
	numCol("num_correct", func(r *EvalItem) *int32 { return &r.NumCorrect }),
	numListCol("scores", func(r *EvalItem) *[]float64 { return &r.Scores }),
	optStrCol("decision_original", func(r *EvalItem) **string { return &r.DecisionOriginal }),
	optStrCol("decision_swapped", func(r *EvalItem) **string { return &r.DecisionSwapped }),
	optF64Col("result", func(r *EvalItem) **float64 { return &r.Result }),
)
