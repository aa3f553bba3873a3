package eval

import (
	"context"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Output tables.
var (
	ResultsTable = schemas.EvalResults.Name // one row per (benchmark, subset) and the overall rows
	ItemsTable   = schemas.EvalItems.Name   // one row per scored item
)

// Output tables in the run's own schemas.
const (
	RubricsTable   = "eval_rubrics"   // the rubrics written (schemas.Rubrics), item_id = request id
	JudgmentsTable = "eval_judgments" // the judgments made (schemas.Judgments)
)

// ResultsSchema is the schema of eval_results (schemas.EvalResults).
var ResultsSchema = schemas.EvalResults.Schema()

// ItemsSchema is the schema of eval_items (schemas.EvalItems).
var ItemsSchema = schemas.EvalItems.Schema()

// optFloat is v, or nil when v is NaN (a null).
func optFloat(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// resultRows are a report's scores as eval_results rows.
func resultRows(r Report) []schemas.EvalResult {
	rows := make([]schemas.EvalResult, len(r.Scores))
	for i, s := range r.Scores {
		rows[i] = schemas.EvalResult{Benchmark: s.Benchmark, Subset: s.Subset, Metric: s.Metric, N: int64(s.N),
			Score: optFloat(s.Score), CILow: optFloat(s.CILow), CIHigh: optFloat(s.CIHigh), CILevel: r.Bootstrap.Level,
			BootstrapSamples: int64(r.Bootstrap.Samples), BootstrapSeed: int64(r.Bootstrap.Seed), Coverage: optFloat(r.Coverage(s.Subset))}
	}
	return rows
}

// BuildResults turns a report's scores into a batch (the caller releases it).
func BuildResults(mem memory.Allocator, r Report) arrow.RecordBatch {
	return schemas.EvalResults.Build(mem, resultRows(r))
}

// BuildItems turns a report's items into a batch (the caller releases it).
func BuildItems(mem memory.Allocator, r Report) arrow.RecordBatch {
	rows := make([]schemas.EvalItem, len(r.Items))
	for i, it := range r.Items {
		rows[i] = schemas.EvalItem{Benchmark: it.Benchmark, ItemID: it.ItemID, Subset: it.Subset, NumCorrect: int32(it.NumCorrect),
			Scores: it.Scores, Result: optFloat(it.Result)}
		if it.Benchmark == BenchJudgeBench {
			o, s := string(it.Original), string(it.Swapped)
			rows[i].DecisionOriginal, rows[i].DecisionSwapped = &o, &s
		}
	}
	return schemas.EvalItems.Build(mem, rows)
}

// benchIndex numbers the shards of each benchmark: eval_results/part-0000i.
var benchIndex = map[string]int{BenchRewardBench2: 0, BenchJudgeBench: 1, BenchPairwise: 2}

// WriteReports writes each report as eval_results/part-<b>.parquet and
// eval_items/part-<b>.parquet (b: 0 RewardBench-2, 1 JudgeBench, 2 pairwise)
// through env.MapShards; inputs are the benchmark files, for provenance.
func WriteReports(ctx context.Context, env *pipeline.Env, inputs []string, reports ...Report) error {
	var tasks []pipeline.Task
	for _, r := range reports {
		i := benchIndex[r.Benchmark]
		tasks = append(tasks,
			pipeline.Task{Output: pipeline.ShardPath(ResultsTable, i), Schema: ResultsSchema, Inputs: inputs, Rows: int64(len(r.Scores)),
				Write: pipeline.WriteBatch(func() arrow.RecordBatch { return BuildResults(env.Mem, r) })},
			pipeline.Task{Output: pipeline.ShardPath(ItemsTable, i), Schema: ItemsSchema, Inputs: inputs, Rows: int64(len(r.Items)),
				Write: pipeline.WriteBatch(func() arrow.RecordBatch { return BuildItems(env.Mem, r) })})
	}
	return env.MapShards(ctx, tasks)
}
