package schemas

import "slices"

// The tables of the official rubric statistics (the official script's
// definitions, computed by stages/analyze): per (phase, step) of a run
// (rubric_stats_official), and per checkpoint of a trend.

// OfficialSummary is the official aggregate of a set of rubrics: each
// statistic averaged per item (prompt, or pair in the rubric phase), then
// over items; percentages are in percent. Its fields are the columns of
// officialCols, named as the official script's keys.
type OfficialSummary struct {
	Rubrics, Prompts int64
	CriteriaCount    float64 // criteria per rubric
	AvgCriterionLen  float64
	LabelOnlyPct     float64
	SpecificPct      float64
	ConstraintPct    float64
}

// officialCols are the columns of the OfficialSummary at f(row), in the
// order every official table stores them.
func officialCols[T any](f func(*T) *OfficialSummary) []column[T] {
	return []column[T]{
		numCol("rubrics", func(r *T) *int64 { return &f(r).Rubrics }),
		numCol("prompts", func(r *T) *int64 { return &f(r).Prompts }),
		numCol("criteria_count", func(r *T) *float64 { return &f(r).CriteriaCount }),
		numCol("avg_criterion_len", func(r *T) *float64 { return &f(r).AvgCriterionLen }),
		numCol("label_only_pct", func(r *T) *float64 { return &f(r).LabelOnlyPct }),
		numCol("specific_pct", func(r *T) *float64 { return &f(r).SpecificPct }),
		numCol("constraint_pct", func(r *T) *float64 { return &f(r).ConstraintPct }),
	}
}

// OfficialStatsRow is a row of rubric_stats_official: the official
// statistics of one (phase, step); Prompts counts its items.
type OfficialStatsRow struct {
	Phase string
	Step  int64
	OfficialSummary
}

// RubricStatsOfficial is the rubric_stats_official table.
var RubricStatsOfficial = newTable("rubric_stats_official", 1, slices.Concat(
	[]column[OfficialStatsRow]{
		strCol("phase", func(r *OfficialStatsRow) *string { return &r.Phase }),
		numCol("step", func(r *OfficialStatsRow) *int64 { return &r.Step }),
	},
	officialCols(func(r *OfficialStatsRow) *OfficialSummary { return &r.OfficialSummary }),
)...)

// TrendRubric is a row of trend_rubrics: the rubric one checkpoint wrote
// for one prompt of a trend's fixed set, with its official statistics.
type TrendRubric struct {
	CkptIndex        int64 // the checkpoint's position in the trend; the shard's partition
	Checkpoint       string
	Step             int64 // the training step the checkpoint's path names; -1 when none
	PromptIndex      int64 // the prompt's position in the set
	PromptID         string
	Question         string
	RawText          string
	FinishReason     string
	CompletionTokens int64
	Error            *string // why the backend failed the request; null when it answered
	CriteriaCount    int64
	AvgCriterionLen  float64
	LabelOnlyPct     float64
	SpecificPct      float64
	ConstraintPct    float64
}

// TrendRubrics is the trend_rubrics table, partitioned by ckpt_index.
var TrendRubrics = newTable("trend_rubrics", 1,
	numCol("ckpt_index", func(r *TrendRubric) *int64 { return &r.CkptIndex }),
	strCol("checkpoint", func(r *TrendRubric) *string { return &r.Checkpoint }),
	numCol("step", func(r *TrendRubric) *int64 { return &r.Step }),
	numCol("prompt_index", func(r *TrendRubric) *int64 { return &r.PromptIndex }),
	strCol("prompt_id", func(r *TrendRubric) *string { return &r.PromptID }),
	strCol("question", func(r *TrendRubric) *string { return &r.Question }),
	strCol("raw_text", func(r *TrendRubric) *string { return &r.RawText }),
	strCol("finish_reason", func(r *TrendRubric) *string { return &r.FinishReason }),
	numCol("completion_tokens", func(r *TrendRubric) *int64 { return &r.CompletionTokens }),
	optStrCol("error", func(r *TrendRubric) **string { return &r.Error }),
	numCol("criteria_count", func(r *TrendRubric) *int64 { return &r.CriteriaCount }),
	numCol("avg_criterion_len", func(r *TrendRubric) *float64 { return &r.AvgCriterionLen }),
	numCol("label_only_pct", func(r *TrendRubric) *float64 { return &r.LabelOnlyPct }),
	numCol("specific_pct", func(r *TrendRubric) *float64 { return &r.SpecificPct }),
	numCol("constraint_pct", func(r *TrendRubric) *float64 { return &r.ConstraintPct }),
)

// RubricTrendRow is a row of rubric_trend: one checkpoint's official
// statistics over the trend's prompt set.
type RubricTrendRow struct {
	CkptIndex  int64
	Checkpoint string
	Step       int64 // -1 when the checkpoint's path names none
	OfficialSummary
	Failed    int64 // rubrics whose generation failed on the backend
	Truncated int64 // rubrics cut at max_tokens (finish_reason "length")
}

// RubricTrend is the rubric_trend table.
var RubricTrend = newTable("rubric_trend", 1, slices.Concat(
	[]column[RubricTrendRow]{
		numCol("ckpt_index", func(r *RubricTrendRow) *int64 { return &r.CkptIndex }),
		strCol("checkpoint", func(r *RubricTrendRow) *string { return &r.Checkpoint }),
		numCol("step", func(r *RubricTrendRow) *int64 { return &r.Step }),
	},
	officialCols(func(r *RubricTrendRow) *OfficialSummary { return &r.OfficialSummary }),
	[]column[RubricTrendRow]{
		numCol("failed", func(r *RubricTrendRow) *int64 { return &r.Failed }),
		numCol("truncated", func(r *RubricTrendRow) *int64 { return &r.Truncated }),
	},
)...)
