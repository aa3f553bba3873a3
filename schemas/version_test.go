package schemas_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// olderVersion rewrites rec as a shard of an older table version would hold
// it: without the columns added after version v, declaring version v.
func olderVersion(t *testing.T, rec arrow.RecordBatch, v string, drop ...string) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		keep := true
		for _, d := range drop {
			keep = keep && f.Name != d
		}
		if keep {
			fields = append(fields, f)
			cols = append(cols, rec.Column(i))
		}
	}
	md := rec.Schema().Metadata()
	keys, vals := append([]string(nil), md.Keys()...), append([]string(nil), md.Values()...)
	for i, k := range keys {
		if k == schemas.MetaVersion {
			vals[i] = v
		}
	}
	nmd := arrow.NewMetadata(keys, vals)
	return array.NewRecordBatch(arrow.NewSchema(fields, &nmd), cols, rec.NumRows())
}

// TestOlderVersionsRead: version-1 pairs and version-2 and -3 steps shards
// (before the temporal fallback, active-sampling and time-breakdown columns) read with the current
// tables, the new fields zero; read directly, a batch that claims the current
// version but lacks a column is an error naming it.
func TestOlderVersionsRead(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()

	steps := schematest.Steps(6)
	rec := schemas.Steps.Build(mem, steps)
	defer rec.Release()
	v1 := olderVersion(t, rec, "2", "refill_prompts", "refill_rounds", "groups_trained")
	defer v1.Release()
	path := filepath.Join(dir, "steps.parquet")
	pipelinetest.WriteShard(t, mem, path, v1.Schema(), v1)
	got := pipelinetest.ReadRows(t, path, schemas.Steps, pipeline.ReadOptions{Mem: mem, Schema: schemas.Steps.Schema()})
	want := append([]schemas.StepMetrics(nil), steps...)
	for i := range want {
		want[i].RefillPrompts, want[i].RefillRounds, want[i].GroupsTrained = 0, 0, 0
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("version-2 steps shard (-want +got):\n%s", diff)
	}
	v3 := olderVersion(t, rec, "3", "resp_len_p50", "resp_len_p95", "truncated_frac", "rubric_len_mean", "rubric_len_p50",
		"rubric_len_p95", "margin_mean", "tokens_per_s", "time_generation_s", "time_rubrics_s", "time_judge_s",
		"time_ref_logprobs_s", "time_learner_s", "time_weight_sync_s", "time_writes_s", "time_checkpoint_s", "time_other_s")
	defer v3.Release()
	path3 := filepath.Join(dir, "steps3.parquet")
	pipelinetest.WriteShard(t, mem, path3, v3.Schema(), v3)
	got = pipelinetest.ReadRows(t, path3, schemas.Steps, pipeline.ReadOptions{Mem: mem, Schema: schemas.Steps.Schema()})
	want = append(want[:0], steps...)
	for i := range want {
		w := &want[i]
		w.RespLenP50, w.RespLenP95, w.TruncatedFrac, w.RubricLenMean, w.RubricLenP50, w.RubricLenP95 = 0, 0, 0, 0, 0, 0
		w.MarginMean, w.TokensPerS = nil, 0
		w.TimeGenerationS, w.TimeRubricsS, w.TimeJudgeS, w.TimeRefLogprobsS, w.TimeLearnerS = 0, 0, 0, 0, 0
		w.TimeWeightSyncS, w.TimeWritesS, w.TimeCheckpointS, w.TimeOtherS = 0, 0, 0, 0
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("version-3 steps shard (-want +got):\n%s", diff)
	}

	pairs := schematest.Pairs(6)
	prec := schemas.Pairs.Build(mem, pairs)
	defer prec.Release()
	p1 := olderVersion(t, prec, "1", "temporal_age", "temporal_fallback")
	defer p1.Release()
	gotPairs, err := schemas.Pairs.Read(p1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pairs {
		pairs[i].TemporalAge, pairs[i].TemporalFallback = nil, nil
	}
	if diff := cmp.Diff(pairs, gotPairs, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("version-1 pairs batch (-want +got):\n%s", diff)
	}

	bad := olderVersion(t, prec, "2", "temporal_fallback")
	defer bad.Release()
	if _, err := schemas.Pairs.Read(bad); err == nil || !strings.Contains(err.Error(), `missing column "temporal_fallback"`) {
		t.Errorf("version-2 batch without temporal_fallback: err = %v, want a missing-column error", err)
	}
}

// TestOlderRubricsRead: a version-1 rubrics Parquet file (before
// scoring_levels) reads with the current table, the levels nil; a current
// file keeps every criterion's levels in order.
func TestOlderRubricsRead(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()

	rubs := schematest.Rubrics(9)
	if len(rubs[0].ScoringLevels) != 2 || len(rubs[0].ScoringLevels[0]) != 2 || rubs[0].ScoringLevels[0][1] != (schemas.Level{Score: "0.0", Text: "Does not"}) {
		t.Fatalf("sample rubric levels = %v", rubs[0].ScoringLevels)
	}
	rec := schemas.Rubrics.Build(mem, rubs)
	defer rec.Release()
	v1 := olderVersion(t, rec, "1", "scoring_levels")
	defer v1.Release()
	read := func(b arrow.RecordBatch, name string) []schemas.Rubric {
		t.Helper()
		path := filepath.Join(dir, name)
		pipelinetest.WriteShard(t, mem, path, b.Schema(), b)
		return pipelinetest.ReadRows(t, path, schemas.Rubrics, pipeline.ReadOptions{Mem: mem, Schema: schemas.Rubrics.Schema()})
	}
	if diff := cmp.Diff(rubs, read(rec, "v2.parquet"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("version-2 rubrics shard (-want +got):\n%s", diff)
	}
	got := read(v1, "v1.parquet")
	want := append([]schemas.Rubric(nil), rubs...)
	for i := range want {
		want[i].ScoringLevels = nil
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("version-1 rubrics shard (-want +got):\n%s", diff)
	}
	for i := range got {
		if got[i].ScoringLevels != nil {
			t.Errorf("row %d of a version-1 shard: levels %v, want nil", i, got[i].ScoringLevels)
		}
	}
}
