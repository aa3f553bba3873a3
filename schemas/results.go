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
	optF64Col("coverage", func(r *ReplayResult) **float64 { return &r.Coverage }),
)
