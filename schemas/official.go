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
