package eval

import (
	"context"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// Output tables.
var (
	ResultsTable = schemas.EvalResults.Name // one row per (benchmark, subset) and the overall rows
	ItemsTable   = "eval_items"             // one row per scored item
)

// Output tables in the run's own schemas.
const (
	RubricsTable   = "eval_rubrics"   // the rubrics written (schemas.Rubrics), item_id = request id
	JudgmentsTable = "eval_judgments" // the judgments made (schemas.Judgments)
)

func meta(name string) *arrow.Metadata { return metaVersion(name, "1") }

func metaVersion(name, version string) *arrow.Metadata {
	md := arrow.NewMetadata([]string{schemas.MetaTable, schemas.MetaVersion}, []string{name, version})
	return &md
}

// ResultsSchema is the schema of eval_results (schemas.EvalResults).
var ResultsSchema = schemas.EvalResults.Schema()

// ItemsSchema is the schema of eval_items.
var ItemsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "benchmark", Type: arrow.BinaryTypes.String},
	{Name: "item_id", Type: arrow.BinaryTypes.String},
	{Name: "subset", Type: arrow.BinaryTypes.String},
	{Name: "num_correct", Type: arrow.PrimitiveTypes.Int32},
	{Name: "scores", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)}, // NaN where missing
	{Name: "decision_original", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "decision_swapped", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "result", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, meta(ItemsTable))

func appendOpt(b *array.Float64Builder, v float64) {
	if math.IsNaN(v) {
		b.AppendNull()
	} else {
		b.Append(v)
	}
}

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
	b := array.NewRecordBuilder(mem, ItemsSchema)
	defer b.Release()
	for _, it := range r.Items {
		b.Field(0).(*array.StringBuilder).Append(it.Benchmark)
		b.Field(1).(*array.StringBuilder).Append(it.ItemID)
		b.Field(2).(*array.StringBuilder).Append(it.Subset)
		b.Field(3).(*array.Int32Builder).Append(int32(it.NumCorrect))
		lb := b.Field(4).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float64Builder).AppendValues(it.Scores, nil)
		for k, d := range []Decision{it.Original, it.Swapped} {
			sb := b.Field(5 + k).(*array.StringBuilder)
			if it.Benchmark == BenchJudgeBench {
				sb.Append(string(d))
			} else {
				sb.AppendNull()
			}
		}
		appendOpt(b.Field(7).(*array.Float64Builder), it.Result)
	}
	return b.NewRecordBatch()
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
