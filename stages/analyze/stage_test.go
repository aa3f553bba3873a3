package analyze_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/analyze"
)

func TestStepStats(t *testing.T) {
	var acc analyze.Accumulator
	bad := "not JSON"
	rows := []schemas.Rubric{
		{Phase: "policy", Step: 3, FormatOK: true, Criteria: []schemas.Criterion{
			{Criterion: "Accuracy", Weight: 0.6},                  // abstract, 8 chars
			{Criterion: "The answer is 12", Weight: 0.3},          // concrete, 16 chars
			{Criterion: "Lists at least 3 examples", Weight: 0.1}, // constraint, 25 chars
		}},
		{Phase: "policy", Step: 3, FormatOK: true, Criteria: []schemas.Criterion{
			{Criterion: "Clarity", Weight: 0.4},                      // abstract, 7 chars
			{Criterion: "Explains why the sky is blue", Weight: 0.4}, // none, 28 chars
			{Criterion: "Must not exceed 50 words", Weight: 0.2},     // constraint, 24 chars
		}},
		{Phase: "policy", Step: 3, FormatOK: false, ParseError: &bad},
		{Phase: "rubric", Step: 1, FormatOK: true, Criteria: []schemas.Criterion{{Criterion: "Naïve", Weight: 1}}}, // 5 runes
	}
	for i := range rows {
		acc.Add(&rows[i])
	}
	got := acc.Stats()
	want := []analyze.StepStats{
		{Phase: "rubric", Step: 1, Rubrics: 1, FormatOK: 1, WithCriteria: 1, Criteria: 1, Abstract: 1, Chars: 5, Concentrated: 1},
		{Phase: "policy", Step: 3, Rubrics: 3, FormatOK: 2, WithCriteria: 2, Criteria: 6, Abstract: 2, Concrete: 1, Constraint: 2,
			Chars: 8 + 16 + 25 + 7 + 28 + 24, Concentrated: 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("stats (-want +got):\n%s", d)
	}
	s := got[1]
	derived := []float64{s.FormatRate(), s.AbstractShare(), s.ConcreteShare(), s.ConstraintShare(), s.CriteriaPerRubric(), s.MeanCriterionChars(), s.WeightConcentration()}
	if d := cmp.Diff([]float64{2.0 / 3, 2.0 / 6, 1.0 / 6, 2.0 / 6, 3, 108.0 / 6, 0.5}, derived); d != "" {
		t.Errorf("derived (-want +got):\n%s", d)
	}
	var buf bytes.Buffer
	if err := analyze.WriteTable(&buf, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "33.3") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func runStage(t *testing.T, runDir string) error {
	t.Helper()
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: []string{"EVOLM_RUN_DIR=" + runDir, "EVOLM_PIPELINE_PROGRESS=off"}})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var stderr bytes.Buffer
	err = pipeline.RunStage(context.Background(), analyze.Name, cfg, pipeline.RunOptions{Mem: mem, Stderr: &stderr})
	t.Logf("stderr:\n%s", stderr.String())
	return err
}

func TestAnalyzeSyntheticRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "synthetic-run")
	o := synthrun.Options{Seed: 4, Steps: 8}
	counts, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := runStage(t, dir); err != nil {
		t.Fatal(err)
	}
	var total, steps int64
	var abstract []float64
	for rec, err := range pipeline.ReadShard(context.Background(), filepath.Join(dir, analyze.StatsTable, "part-00000.parquet"), pipeline.ReadOptions{Schema: analyze.StatsSchema}) {
		if err != nil {
			t.Fatal(err)
		}
		rub := rec.Column(2).(*array.Int64)
		step := rec.Column(1).(*array.Int64)
		abs := rec.Column(10).(*array.Float64)
		for i := 0; i < int(rec.NumRows()); i++ {
			if step.Value(i) != steps {
				t.Errorf("row %d: step %d, want %d (sorted, one row per step)", i, step.Value(i), steps)
			}
			total += rub.Value(i)
			steps++
			abstract = append(abstract, abs.Value(i))
		}
	}
	if total != counts[schemas.Rubrics.Name] || steps != int64(o.Steps) {
		t.Errorf("stats cover %d rubrics in %d steps, want %d in %d", total, steps, counts[schemas.Rubrics.Name], o.Steps)
	}
	// The synthetic rubrics drift from labels to concrete criteria.
	if !(abstract[0] > abstract[len(abstract)-1]) {
		t.Errorf("abstract share did not fall: %v", abstract)
	}
	// The official statistics, one row per step, over the same rubrics.
	var offRubrics int64
	var label []float64
	for rec, err := range pipeline.ReadShard(context.Background(), filepath.Join(dir, analyze.OfficialStatsTable, "part-00000.parquet"), pipeline.ReadOptions{Schema: analyze.OfficialStatsSchema}) {
		if err != nil {
			t.Fatal(err)
		}
		rows, err := schemas.RubricStatsOfficial.Read(rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			offRubrics += r.Rubrics
			label = append(label, r.LabelOnlyPct)
		}
	}
	if offRubrics != counts[schemas.Rubrics.Name] || len(label) != o.Steps {
		t.Errorf("official stats cover %d rubrics in %d steps, want %d in %d", offRubrics, len(label), counts[schemas.Rubrics.Name], o.Steps)
	}
	if !(label[0] > label[len(label)-1]) {
		t.Errorf("label-only share did not fall: %v", label)
	}
}

func TestAnalyzeMissingRubrics(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "synthetic-run")
	if _, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), dir, synthrun.Options{Skip: []string{schemas.Rubrics.Name}}); err != nil {
		t.Fatal(err)
	}
	err := runStage(t, dir)
	if !errors.Is(err, pipeline.ErrMissingTable) || !strings.Contains(err.Error(), `"rubrics"`) {
		t.Fatalf("want a missing rubrics table error, got %v", err)
	}
}
