package replay_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/stages/replay"
)

func f(x float64) *float64 { return &x }

func TestDiscriminate(t *testing.T) {
	pairs := []schemas.Pair{
		{PairID: "p1", Step: 5, Strategy: "temporal"},
		{PairID: "p2", Step: 5, Strategy: "backtranslate"},
		{PairID: "p3", Step: 6, Strategy: "temporal"},
	}
	j := func(resp, rub string, s *float64) schemas.Judgment {
		return schemas.Judgment{ResponseID: resp, RubricID: rub, Score: s}
	}
	judgments := []schemas.Judgment{
		j("p1/chosen", "r1", f(0.75)), j("p1/rejected", "r1", f(0.25)), // right, margin .5
		j("p1/chosen", "r2", f(0.5)), j("p1/rejected", "r2", f(0.5)), // tie: wrong, margin 0
		j("p2/chosen", "r3", f(0.25)), j("p2/rejected", "r3", f(0.5)), // wrong, margin −.25
		j("p3/chosen", "r4", f(1)), j("p3/rejected", "r4", nil), // missing
		j("p3/chosen", "r5", f(1)), j("p3/rejected", "r5", f(0)), // right, margin 1
		j("other", "r6", f(1)), // not a pair answer: ignored
	}
	got := replay.Discriminate(pairs, judgments)
	want := []replay.Accuracy{
		{Step: -1, Judged: 4, Missing: 1, Correct: 2, Margin: 1.25},
		{Step: -1, Strategy: "backtranslate", Judged: 1, Correct: 0, Margin: -0.25},
		{Step: -1, Strategy: "temporal", Judged: 3, Missing: 1, Correct: 2, Margin: 1.5},
		{Step: 5, Judged: 3, Correct: 1, Margin: 0.25},
		{Step: 6, Judged: 1, Missing: 1, Correct: 1, Margin: 1},
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("accuracy (-want +got):\n%s", d)
	}
	if got[0].Value() != 0.5 || math.Abs(got[0].MeanMargin()-1.25/4) > 1e-12 {
		t.Errorf("overall %v, margin %v", got[0].Value(), got[0].MeanMargin())
	}
}

// replay_results, read back through schemas.ReplayResults, holds each
// group's counts and ratios; a ratio over no (pair, rubric) is null.
func TestBuildResults(t *testing.T) {
	acc := []replay.Accuracy{
		{Step: -1, Judged: 4, Missing: 1, Correct: 2, Margin: 1.25},
		{Step: -1, Strategy: "temporal", Judged: 3, Missing: 1, Correct: 2, Margin: 1.5},
		{Step: 7, Missing: 2},
		{Step: 8},
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := replay.BuildResults(mem, acc)
	defer rec.Release()
	got, err := schemas.ReplayResults.Read(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := []schemas.ReplayResult{
		{Group: "overall", Step: -1, Judged: 4, Missing: 1, Correct: 2, Accuracy: f(0.5), MeanMargin: f(1.25 / 4), Coverage: f(0.8)},
		{Group: "strategy", Step: -1, Strategy: "temporal", Judged: 3, Missing: 1, Correct: 2, Accuracy: f(2.0 / 3), MeanMargin: f(0.5), Coverage: f(0.75)},
		{Group: "step", Step: 7, Missing: 2, Coverage: f(0)},
		{Group: "step", Step: 8},
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("replay_results (-want +got):\n%s", d)
	}
}

func runReplay(t *testing.T, target string, env ...string) error {
	t.Helper()
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: append([]string{"EVOLM_RUN_DIR=" + target, "EVOLM_PIPELINE_PROGRESS=off"}, env...)})
	if err != nil {
		return err
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	return pipeline.RunStage(context.Background(), replay.Name, cfg, pipeline.RunOptions{Mem: mem, Stderr: &strings.Builder{}})
}

func TestReplayBadSource(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "synthetic-run")
	if _, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), src, synthrun.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	before := testutil.TreeHash(t, src, "_locks")
	err := runReplay(t, src, "EVOLM_STAGES_REPLAY_SOURCE="+src)
	if !errors.Is(err, replay.ErrSameRun) {
		t.Errorf("replay into its source: %v", err)
	}
	err = runReplay(t, filepath.Join(dir, "new"), "EVOLM_STAGES_REPLAY_SOURCE="+filepath.Join(dir, "nothing"))
	if err == nil || !strings.Contains(err.Error(), "not a run directory") {
		t.Errorf("missing source: %v", err)
	}
	noPairs := filepath.Join(dir, "no-pairs")
	if _, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), noPairs, synthrun.Options{Seed: 5, Skip: []string{schemas.Pairs.Name}}); err != nil {
		t.Fatal(err)
	}
	err = runReplay(t, filepath.Join(dir, "new2"), "EVOLM_STAGES_REPLAY_SOURCE="+noPairs)
	if !errors.Is(err, pipeline.ErrMissingTable) || !strings.Contains(err.Error(), `"pairs"`) {
		t.Errorf("source without pairs: %v", err)
	}
	if testutil.TreeHash(t, src, "_locks") != before {
		t.Error("the source run changed")
	}
}
