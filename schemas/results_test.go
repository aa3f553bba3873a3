package schemas_test

import (
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/schemas"
)

func optF64Field(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64, Nullable: true}
}

func f64p(x float64) *float64 { return &x }

// replay_results keeps the schema stages/replay wrote by hand.
func TestReplayResultsSchema(t *testing.T) {
	want := arrow.NewSchema([]arrow.Field{
		strField("group"), i64Field("step"), strField("strategy"), i64Field("judged"), i64Field("missing"), i64Field("correct"),
		optF64Field("accuracy"), optF64Field("mean_margin"), addedIn(optF64Field("coverage"), 2),
	}, tableMeta("replay_results", "2"))
	sameSchema(t, schemas.ReplayResults.Schema(), want)
	roundTrip(t, schemas.ReplayResults, []schemas.ReplayResult{
		{Group: "overall", Step: -1, Judged: 4, Missing: 1, Correct: 3, Accuracy: f64p(0.75), MeanMargin: f64p(0.2), Coverage: f64p(0.8)},
		{Group: "strategy", Step: -1, Strategy: schemas.StrategyTemporal, Missing: 2, Coverage: f64p(0)},
		{Group: "step", Step: 3},
	})
}

// eval_results keeps the schema stages/eval wrote by hand.
func TestEvalResultsSchema(t *testing.T) {
	want := arrow.NewSchema([]arrow.Field{
		strField("benchmark"), strField("subset"), strField("metric"), i64Field("n"),
		optF64Field("score"), optF64Field("ci_low"), optF64Field("ci_high"), f64Field("ci_level"),
		i64Field("bootstrap_samples"), i64Field("bootstrap_seed"), addedIn(optF64Field("coverage"), 2),
	}, tableMeta("eval_results", "2"))
	sameSchema(t, schemas.EvalResults.Schema(), want)
	roundTrip(t, schemas.EvalResults, []schemas.EvalResult{
		{Benchmark: "rewardbench2", Subset: "Ties", Metric: "ties_weighted", N: 10, Score: f64p(0.62), CILow: f64p(0.43),
			CIHigh: f64p(0.8), CILevel: 0.95, BootstrapSamples: 1000, BootstrapSeed: -3, Coverage: f64p(1)},
		{Benchmark: "pairwise", Subset: "overall", Metric: "accuracy"},
	})
}

// eval_items keeps the schema stages/eval wrote by hand.
func TestEvalItemsSchema(t *testing.T) {
	want := arrow.NewSchema([]arrow.Field{
		strField("benchmark"), strField("item_id"), strField("subset"),
		{Name: "num_correct", Type: arrow.PrimitiveTypes.Int32},
		{Name: "scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)},
		{Name: "decision_original", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "decision_swapped", Type: arrow.BinaryTypes.String, Nullable: true},
		optF64Field("result"),
	}, tableMeta("eval_items", "1"))
	sameSchema(t, schemas.EvalItems.Schema(), want)
	ab, ba := "A>B", "B>A"
	roundTrip(t, schemas.EvalItems, []schemas.EvalItem{
		{Benchmark: "judgebench", ItemID: "p1", Subset: "livecodebench", Scores: []float64{0.9, 0.1, 0.2, 0.8},
			DecisionOriginal: &ab, DecisionSwapped: &ba, Result: f64p(1)},
		{Benchmark: "rewardbench2", ItemID: "t1", Subset: "Ties", NumCorrect: 2, Scores: []float64{0.5, 0.4, 0.1}},
		{Benchmark: "pairwise", ItemID: "x", Subset: "a", Scores: []float64{}},
	})
}

// addedIn is f marked as added in table version v (MetaAddedIn), as the
// tables mark a column a later version added.
func addedIn(f arrow.Field, v int) arrow.Field {
	f.Metadata = arrow.NewMetadata([]string{schemas.MetaAddedIn}, []string{strconv.Itoa(v)})
	return f
}
