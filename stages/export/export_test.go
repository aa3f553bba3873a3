package export_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/export"
)

// runExport runs the registered export stage over runDir, as `evolm export`
// does, with a checked allocator.
func runExport(t *testing.T, runDir string, values map[string]string) error {
	t.Helper()
	return pipelinetest.RunStage(t, export.Name, runDir, values)
}

// synthetic writes the synthetic test run (test data, package synthrun).
func synthetic(t *testing.T, o synthrun.Options) (string, synthrun.Counts) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "synthetic-run")
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	counts, err := synthrun.Write(context.Background(), mem, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return dir, counts
}

// countRows reads every committed shard of table and counts rows matching keep.
func countRows[T any](t *testing.T, dir string, tab *schemas.Table[T], keep func(*T) bool) int64 {
	t.Helper()
	run, err := pipeline.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := run.TableShards(tab.Name)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sh := range shards {
		for rec, err := range pipeline.ReadShard(context.Background(), sh.Path, pipeline.ReadOptions{Schema: tab.Schema()}) {
			if err != nil {
				t.Fatal(err)
			}
			rows, err := tab.Read(rec)
			if err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				if keep(&rows[i]) {
					n++
				}
			}
		}
	}
	return n
}

func exportRows(t *testing.T, dir, table string) int64 {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, table, "*.parquet"))
	rows, err := pipeline.CountRows(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestExportMatchesSource(t *testing.T) {
	dir, counts := synthetic(t, synthrun.Options{Seed: 1})
	if err := runExport(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	// Every policy rollout has exactly one judgment in the synthetic run, and
	// every pair N candidate rubrics, each judged on a+ and a−.
	policyJudgments := countRows(t, dir, schemas.Judgments, func(j *schemas.Judgment) bool { return j.Phase == schemas.PhasePolicy })
	policyRollouts := countRows(t, dir, schemas.Rollouts, func(r *schemas.Rollout) bool { return r.Phase == schemas.PhasePolicy })
	rubricPhaseRubrics := countRows(t, dir, schemas.Rubrics, func(r *schemas.Rubric) bool { return r.Phase == schemas.PhaseRubric })
	rubricJudgments := countRows(t, dir, schemas.Judgments, func(j *schemas.Judgment) bool { return j.Phase == schemas.PhaseRubric })
	if policyJudgments != policyRollouts || rubricJudgments != 2*rubricPhaseRubrics {
		t.Fatalf("synthetic run: %d policy judgments for %d rollouts; %d rubric judgments for %d rubrics", policyJudgments, policyRollouts, rubricJudgments, rubricPhaseRubrics)
	}
	want := map[string]int64{
		export.ResponsesTable: policyRollouts,
		export.PairsTable:     rubricPhaseRubrics,
		export.StepsTable:     counts[schemas.Steps.Name],
	}
	got := map[string]int64{}
	for table := range want {
		got[table] = exportRows(t, dir, table)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("export rows (-want +got):\n%s", d)
	}
	js, _ := json.Marshal(want)
	out := testutil.RunPython(t, "export_check.py", dir, string(js))
	t.Logf("export_check.py: %s", out)

	// A rerun resumes: nothing is rewritten.
	before, _ := os.Stat(filepath.Join(dir, export.StepsTable, "part-00000.parquet"))
	if err := runExport(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(filepath.Join(dir, export.StepsTable, "part-00000.parquet"))
	if !before.ModTime().Equal(after.ModTime()) {
		t.Error("rerun rewrote export_steps")
	}
}

func TestExportFilters(t *testing.T) {
	o := synthrun.Options{Seed: 2, Steps: 8, Phase: 2}
	dir, _ := synthetic(t, o)
	// Steps 1-4 and 6: policy steps 1, 4; rubric steps 2, 3, 6.
	if err := runExport(t, dir, map[string]string{"steps": "1-4, 6", "phase": "rubric"}); err != nil {
		t.Fatal(err)
	}
	if n := exportRows(t, dir, export.ResponsesTable); n != 0 {
		t.Errorf("phase=rubric wrote %d response rows", n)
	}
	var wantPairs int64
	for _, s := range []int64{2, 3, 6} {
		wantPairs += countRows(t, dir, schemas.Rubrics, func(r *schemas.Rubric) bool { return r.Phase == schemas.PhaseRubric && r.Step == s })
	}
	if n := exportRows(t, dir, export.PairsTable); n != wantPairs {
		t.Errorf("pairs rows %d, want %d", n, wantPairs)
	}
	if n := exportRows(t, dir, export.StepsTable); n != 3 {
		t.Errorf("steps rows %d, want 3 (rubric steps 2, 3, 6)", n)
	}
	for _, p := range []string{"part-00000.parquet", "part-00007.parquet"} {
		if _, err := os.Stat(filepath.Join(dir, export.PairsTable, p)); err == nil {
			t.Errorf("filtered-out step %s written", p)
		}
	}
}

func TestParseSteps(t *testing.T) {
	s, err := export.ParseSteps("10-20, 25")
	if err != nil {
		t.Fatal(err)
	}
	for step, want := range map[int64]bool{9: false, 10: true, 15: true, 20: true, 21: false, 25: true, 26: false} {
		if s.Has(step) != want {
			t.Errorf("Has(%d) = %v, want %v", step, !want, want)
		}
	}
	all, _ := export.ParseSteps("")
	if !all.Has(123456) {
		t.Error("empty set should hold every step")
	}
	for _, bad := range []string{"x", "5-3", "-1", "1-", "1,,2"} {
		if _, err := export.ParseSteps(bad); err == nil {
			t.Errorf("ParseSteps(%q): want an error", bad)
		}
	}
}

func TestExportMissingTable(t *testing.T) {
	dir, _ := synthetic(t, synthrun.Options{Seed: 3, Skip: []string{schemas.Judgments.Name}})
	err := runExport(t, dir, nil)
	if err == nil || !errors.Is(err, pipeline.ErrMissingTable) || !strings.Contains(err.Error(), `table "judgments"`) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("want a missing-table error naming judgments and the run, got %v", err)
	}
}
