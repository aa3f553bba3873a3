//go:build e2e

package analyze_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	_ "github.com/evolm/evolm/serving/torchbe"
	"github.com/evolm/evolm/stages/analyze"
)

// TestE2ETrendTinyCheckpoints runs `evolm analyze trend` on two tiny random
// checkpoints (as `evolm model init --preset tiny` makes them) and three
// prompts: one rubric per (checkpoint, prompt) from the real torch engine,
// one trend row per checkpoint, and a rerun that skips both checkpoints.
// The rubrics are noise; the wiring is what is checked.
func TestE2ETrendTinyCheckpoints(t *testing.T) {
	dir := t.TempDir()
	var ckpts []string
	for i, seed := range []int64{3, 4} {
		ckpt := filepath.Join(dir, "checkpoints", []string{"step-000000", "step-000025"}[i], "policy")
		modeltest.InitTiny(t, ckpt, seed)
		ckpts = append(ckpts, ckpt)
	}
	prompts := filepath.Join(dir, "eval_prompts.jsonl")
	if err := os.WriteFile(prompts, []byte(`{"question": "What is 2+2?"}
{"question": "Name a primary colour."}
{"id": 7, "question": "Why is the sky blue?"}
{"question": "Write a haiku about rain."}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{
		"EVOLM_RUN_DIR=" + run, "EVOLM_PIPELINE_PROGRESS=off",
		"EVOLM_STAGES_ANALYZE_TREND_CHECKPOINTS=" + strings.Join(ckpts, ","),
		"EVOLM_STAGES_ANALYZE_TREND_PROMPTS=" + prompts, "EVOLM_STAGES_ANALYZE_TREND_LIMIT=3",
		"EVOLM_ROLES_RUBRIC_GENERATOR_MAX_TOKENS=16",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 2; pass++ {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		var stderr strings.Builder
		if err := pipeline.RunStage(context.Background(), analyze.TrendName, cfg, pipeline.RunOptions{Mem: mem, Stderr: &stderr}); err != nil {
			t.Fatal(err)
		}
		mem.AssertSize(t, 0)
	}
	shards, err := filepath.Glob(filepath.Join(run, analyze.TrendRubricsTable, "ckpt_index=*", "*.parquet"))
	if err != nil || len(shards) != 2 {
		t.Fatalf("trend_rubrics shards %v %v", shards, err)
	}
	if n, err := pipeline.CountRows(shards...); err != nil || n != 6 {
		t.Errorf("%d trend_rubrics rows (%v), want 6", n, err)
	}
	rows, err := analyze.ReadTrend(context.Background(), memory.NewGoAllocator(), shards)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Step != 0 || rows[1].Step != 25 || rows[1].Checkpoint != ckpts[1] {
		t.Fatalf("trend rows %+v", rows)
	}
	for _, r := range rows {
		if r.Rubrics != 3 || r.Prompts != 3 || r.Failed != 0 {
			t.Errorf("checkpoint %s: %d rubrics, %d prompts, %d failed; want 3, 3, 0", r.Checkpoint, r.Rubrics, r.Prompts, r.Failed)
		}
	}
	var want []schemas.RubricTrendRow
	for i := range rows {
		want = append(want, rows[i].Row())
	}
	got := readTable(t, schemas.RubricTrend, filepath.Join(run, analyze.TrendTable, "part-00000.parquet"))
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rubric_trend (-ReadTrend +table):\n%s", d)
	}
}
