package schemas

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// The analysis tables that stages derive from a run: the export's joined
// views (export_responses, export_pairs) and the rubric-evolution
// statistics (rubric_stats). Each is a typed table like the run's own, so
// its writer goes through Table.Build, never positional builders.

// ExportResponse is a row of export_responses: one policy response joined
// with one of its judgments, that judgment's rubric and the step's metrics.
// Pointer fields are null where the response has no judgment (or the
// judgment no rubric, or the step no metrics).
type ExportResponse struct {
	Step               int64
	Phase              string
	PromptID           string
	Prompt             *string // the prompt text; null without a prompts table that holds it
	RolloutID          string
	SampleIdx          int32
	Response           string
	CompletionTokens   int32
	FinishReason       string
	Model              string
	Checkpoint         string
	RubricID           *string
	RubricFormatOK     *bool
	NCriteria          *int32
	Criteria           *[]Criterion
	JudgmentID         *string
	JudgeModel         *string
	Score              *float64
	CriterionScores    *[]float64
	ScoreMissingReason *string
	StepRewardMean     *float64
	StepKL             *float64
}

// ExportResponses is the export_responses table.
var ExportResponses = newTable("export_responses", 1,
	numCol("step", func(r *ExportResponse) *int64 { return &r.Step }),
	strCol("phase", func(r *ExportResponse) *string { return &r.Phase }),
	strCol("prompt_id", func(r *ExportResponse) *string { return &r.PromptID }),
	optStrCol("prompt", func(r *ExportResponse) **string { return &r.Prompt }),
	strCol("rollout_id", func(r *ExportResponse) *string { return &r.RolloutID }),
	numCol("sample_idx", func(r *ExportResponse) *int32 { return &r.SampleIdx }),
	strCol("response", func(r *ExportResponse) *string { return &r.Response }),
	numCol("completion_tokens", func(r *ExportResponse) *int32 { return &r.CompletionTokens }),
	strCol("finish_reason", func(r *ExportResponse) *string { return &r.FinishReason }),
	strCol("model", func(r *ExportResponse) *string { return &r.Model }),
	strCol("checkpoint", func(r *ExportResponse) *string { return &r.Checkpoint }),
	optStrCol("rubric_id", func(r *ExportResponse) **string { return &r.RubricID }),
	optCol("rubric_format_ok", boolScalar, func(r *ExportResponse) **bool { return &r.RubricFormatOK }),
	optCol("n_criteria", numScalar[int32](), func(r *ExportResponse) **int32 { return &r.NCriteria }),
	optOf(criteriaCol("criteria", holderValue[[]Criterion]), func(r *ExportResponse) **[]Criterion { return &r.Criteria }),
	optStrCol("judgment_id", func(r *ExportResponse) **string { return &r.JudgmentID }),
	optStrCol("judge_model", func(r *ExportResponse) **string { return &r.JudgeModel }),
	optF64Col("score", func(r *ExportResponse) **float64 { return &r.Score }),
	optOf(numListCol("criterion_scores", holderValue[[]float64]), func(r *ExportResponse) **[]float64 { return &r.CriterionScores }),
	optStrCol("score_missing_reason", func(r *ExportResponse) **string { return &r.ScoreMissingReason }),
	optF64Col("step_reward_mean", func(r *ExportResponse) **float64 { return &r.StepRewardMean }),
	optF64Col("step_kl", func(r *ExportResponse) **float64 { return &r.StepKL }),
)

// ExportPair is a row of export_pairs: one preference pair joined with one
// of its candidate rubrics and the judge's scores of a+ and a− under it.
// The rubric and score fields are null for a pair without rubrics.
type ExportPair struct {
	Step             int64
	Phase            string
	PairID           string
	PromptID         string
	Strategy         string
	Question         string
	Chosen           string
	Rejected         string
	ChosenStep       int64
	RejectedStep     int64
	InferredQuestion *string
	RubricID         *string
	RubricSampleIdx  *int32
	RubricFormatOK   *bool
	NCriteria        *int32
	JudgeModel       *string
	ScoreChosen      *float64
	ScoreRejected    *float64
	Margin           *float64 // score_chosen − score_rejected, when both exist
	StepRewardMean   *float64
	StepKL           *float64
}

// ExportPairs is the export_pairs table.
var ExportPairs = newTable("export_pairs", 1,
	numCol("step", func(r *ExportPair) *int64 { return &r.Step }),
	strCol("phase", func(r *ExportPair) *string { return &r.Phase }),
	strCol("pair_id", func(r *ExportPair) *string { return &r.PairID }),
	strCol("prompt_id", func(r *ExportPair) *string { return &r.PromptID }),
	strCol("strategy", func(r *ExportPair) *string { return &r.Strategy }),
	strCol("question", func(r *ExportPair) *string { return &r.Question }),
	strCol("chosen", func(r *ExportPair) *string { return &r.Chosen }),
	strCol("rejected", func(r *ExportPair) *string { return &r.Rejected }),
	numCol("chosen_step", func(r *ExportPair) *int64 { return &r.ChosenStep }),
	numCol("rejected_step", func(r *ExportPair) *int64 { return &r.RejectedStep }),
	optStrCol("inferred_question", func(r *ExportPair) **string { return &r.InferredQuestion }),
	optStrCol("rubric_id", func(r *ExportPair) **string { return &r.RubricID }),
	optCol("rubric_sample_idx", numScalar[int32](), func(r *ExportPair) **int32 { return &r.RubricSampleIdx }),
	optCol("rubric_format_ok", boolScalar, func(r *ExportPair) **bool { return &r.RubricFormatOK }),
	optCol("n_criteria", numScalar[int32](), func(r *ExportPair) **int32 { return &r.NCriteria }),
	optStrCol("judge_model", func(r *ExportPair) **string { return &r.JudgeModel }),
	optF64Col("score_chosen", func(r *ExportPair) **float64 { return &r.ScoreChosen }),
	optF64Col("score_rejected", func(r *ExportPair) **float64 { return &r.ScoreRejected }),
	optF64Col("margin", func(r *ExportPair) **float64 { return &r.Margin }),
	optF64Col("step_reward_mean", func(r *ExportPair) **float64 { return &r.StepRewardMean }),
	optF64Col("step_kl", func(r *ExportPair) **float64 { return &r.StepKL }),
)

// RubricStatsRow is a row of rubric_stats: the rubric-evolution statistics
// of one (phase, step). The shares are null when their denominator is 0.
type RubricStatsRow struct {
	Phase               string
	Step                int64
	Rubrics             int64
	FormatOK            int64
	WithCriteria        int64
	Criteria            int64
	Abstract            int64
	Concrete            int64
	Constraint          int64
	FormatRate          *float64
	AbstractShare       *float64
	ConcreteShare       *float64
	ConstraintShare     *float64
	CriteriaPerRubric   *float64
	MeanCriterionChars  *float64
	WeightConcentration *float64
}

// RubricStats is the rubric_stats table.
var RubricStats = newTable("rubric_stats", 1,
	strCol("phase", func(r *RubricStatsRow) *string { return &r.Phase }),
	numCol("step", func(r *RubricStatsRow) *int64 { return &r.Step }),
	numCol("rubrics", func(r *RubricStatsRow) *int64 { return &r.Rubrics }),
	numCol("format_ok", func(r *RubricStatsRow) *int64 { return &r.FormatOK }),
	numCol("with_criteria", func(r *RubricStatsRow) *int64 { return &r.WithCriteria }),
	numCol("criteria", func(r *RubricStatsRow) *int64 { return &r.Criteria }),
	numCol("abstract", func(r *RubricStatsRow) *int64 { return &r.Abstract }),
	numCol("concrete", func(r *RubricStatsRow) *int64 { return &r.Concrete }),
	numCol("constraint", func(r *RubricStatsRow) *int64 { return &r.Constraint }),
	optF64Col("format_rate", func(r *RubricStatsRow) **float64 { return &r.FormatRate }),
	optF64Col("abstract_share", func(r *RubricStatsRow) **float64 { return &r.AbstractShare }),
	optF64Col("concrete_share", func(r *RubricStatsRow) **float64 { return &r.ConcreteShare }),
	optF64Col("constraint_share", func(r *RubricStatsRow) **float64 { return &r.ConstraintShare }),
	optF64Col("criteria_per_rubric", func(r *RubricStatsRow) **float64 { return &r.CriteriaPerRubric }),
	optF64Col("mean_criterion_chars", func(r *RubricStatsRow) **float64 { return &r.MeanCriterionChars }),
	optF64Col("weight_concentration", func(r *RubricStatsRow) **float64 { return &r.WeightConcentration }),
)

// holder carries one value, so that a column kind written for a row's field
// (criteriaCol, numListCol) can serve a nullable field through optOf.
type holder[V any] struct{ v V }

func holderValue[V any](h *holder[V]) *V { return &h.v }

// optOf makes column c, over a holder of V, a nullable column over rows T
// whose field is a *V: a nil pointer is a null.
func optOf[T, V any](c column[holder[V]], f func(*T) **V) column[T] {
	field := c.field
	field.Nullable = true
	return column[T]{
		field: field,
		put: func(b array.Builder, r *T) {
			p := *f(r)
			if p == nil {
				b.AppendNull()
				return
			}
			h := holder[V]{*p}
			c.put(b, &h)
		},
		get: func(a arrow.Array, i int, r *T) error {
			if a.IsNull(i) {
				*f(r) = nil
				return nil
			}
			var h holder[V]
			if err := c.get(a, i, &h); err != nil {
				return err
			}
			*f(r) = &h.v
			return nil
		},
	}
}
