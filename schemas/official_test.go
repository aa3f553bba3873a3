package schemas_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/schemas"
)

// sameSchema fails unless got has want's fields (names, types, nullability,
// field metadata, order) and want's table metadata.
func sameSchema(t *testing.T, got, want *arrow.Schema) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("schema:\n%s\nwant:\n%s", got, want)
	}
	gm, wm := got.Metadata(), want.Metadata()
	if !gm.Equal(wm) {
		t.Errorf("schema metadata %s, want %s", gm, wm)
	}
}

// tableMeta is the schema metadata of version v of table name.
func tableMeta(name, v string) *arrow.Metadata {
	md := arrow.NewMetadata([]string{schemas.MetaTable, schemas.MetaVersion}, []string{name, v})
	return &md
}

var (
	i64Field = func(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64} }
	f64Field = func(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64} }
	strField = func(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.BinaryTypes.String} }
)

// officialFields are the official statistics' columns as stages/analyze
// declared them field by field before the tables were typed.
func officialFields() []arrow.Field {
	return []arrow.Field{i64Field("rubrics"), i64Field("prompts"), f64Field("criteria_count"), f64Field("avg_criterion_len"),
		f64Field("label_only_pct"), f64Field("specific_pct"), f64Field("constraint_pct")}
}

// rubric_stats_official keeps the schema stages/analyze wrote by hand.
func TestRubricStatsOfficialSchema(t *testing.T) {
	want := arrow.NewSchema(append([]arrow.Field{strField("phase"), i64Field("step")}, officialFields()...),
		tableMeta("rubric_stats_official", "1"))
	sameSchema(t, schemas.RubricStatsOfficial.Schema(), want)
	roundTrip(t, schemas.RubricStatsOfficial, []schemas.OfficialStatsRow{
		{Phase: schemas.PhasePolicy, Step: 0, OfficialSummary: schemas.OfficialSummary{Rubrics: 6, Prompts: 3, CriteriaCount: 3.5,
			AvgCriterionLen: 41.25, LabelOnlyPct: 12.5, SpecificPct: 62.5, ConstraintPct: 25}},
		{Phase: schemas.PhaseRubric, Step: 1, OfficialSummary: schemas.OfficialSummary{Rubrics: 1, Prompts: 1}},
	})
}

// trend_rubrics keeps the schema stages/analyze wrote by hand.
func TestTrendRubricsSchema(t *testing.T) {
	want := arrow.NewSchema([]arrow.Field{
		i64Field("ckpt_index"), strField("checkpoint"), i64Field("step"), i64Field("prompt_index"), strField("prompt_id"),
		strField("question"), strField("raw_text"), strField("finish_reason"), i64Field("completion_tokens"),
		{Name: "error", Type: arrow.BinaryTypes.String, Nullable: true},
		i64Field("criteria_count"), f64Field("avg_criterion_len"), f64Field("label_only_pct"), f64Field("specific_pct"), f64Field("constraint_pct"),
	}, tableMeta("trend_rubrics", "1"))
	sameSchema(t, schemas.TrendRubrics.Schema(), want)
	failed := "backend rejected: HTTP 400: prompt too long"
	roundTrip(t, schemas.TrendRubrics, []schemas.TrendRubric{
		{CkptIndex: 0, Checkpoint: "runs/x/checkpoints/step-000025/policy", Step: 25, PromptIndex: 0, PromptID: "p1",
			Question: "Why is the sky blue?", RawText: "1. Mentions Rayleigh scattering", FinishReason: "stop", CompletionTokens: 9,
			CriteriaCount: 1, AvgCriterionLen: 28, SpecificPct: 100},
		{CkptIndex: 1, Checkpoint: "served-model", Step: -1, PromptIndex: 1, PromptID: "p2", Question: "Name a prime.",
			FinishReason: "error", Error: &failed},
	})
}

// rubric_trend keeps the schema stages/analyze wrote by hand.
func TestRubricTrendSchema(t *testing.T) {
	fields := append([]arrow.Field{i64Field("ckpt_index"), strField("checkpoint"), i64Field("step")}, officialFields()...)
	want := arrow.NewSchema(append(fields, i64Field("failed"), i64Field("truncated")), tableMeta("rubric_trend", "1"))
	sameSchema(t, schemas.RubricTrend.Schema(), want)
	roundTrip(t, schemas.RubricTrend, []schemas.RubricTrendRow{
		{CkptIndex: 0, Checkpoint: "ckpt/step-000010", Step: 10, OfficialSummary: schemas.OfficialSummary{Rubrics: 4, Prompts: 4,
			CriteriaCount: 2.75, AvgCriterionLen: 30.5, LabelOnlyPct: 50, SpecificPct: 25, ConstraintPct: 25}, Failed: 1, Truncated: 2},
		{CkptIndex: 1, Checkpoint: "served-model", Step: -1},
	})
}
