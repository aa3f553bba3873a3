//go:build e2e

package replay_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/internal/testutil/synthrun"
	"github.com/evolm/evolm/model/modeltest"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	_ "github.com/evolm/evolm/serving/torchbe"
	"github.com/evolm/evolm/stages/replay"
)

// TestE2EReplayTinyJudge replays the synthetic run's pairs (test data) with a
// tiny random checkpoint as the judge (yes/no mode, so every answer gets a
// score) into a new run, and checks the source stays byte-identical. The
// demo run replaces the synthetic one once the demo loop exists.
func TestE2EReplayTinyJudge(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "tiny-judge")
	modeltest.InitTiny(t, ckpt, 2)
	src := filepath.Join(dir, "synthetic-run")
	counts, err := synthrun.Write(context.Background(), memory.NewGoAllocator(), src, synthrun.Options{Seed: 6, Steps: 4, Phase: 2, Pairs: 2, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.TreeHash(t, src, "_locks")
	target := filepath.Join(dir, "replayed")
	env := []string{"EVOLM_STAGES_REPLAY_SOURCE=" + src, "EVOLM_ROLES_JUDGE_MODEL=" + ckpt, "EVOLM_ROLES_JUDGE_MODE=yesno"}
	if err := runReplay(t, target, env...); err != nil {
		t.Fatal(err)
	}
	if testutil.TreeHash(t, src, "_locks") != before {
		t.Fatal("the source run changed")
	}
	// 2 rubric steps × 2 pairs × 2 candidate rubrics, each judged on a+ and a−.
	var rubricRows int64 = 2 * 2 * 2
	var judged, missing int64
	for rec, err := range pipeline.ReadShard(context.Background(), filepath.Join(target, replay.ResultsTable, "part-00000.parquet"), pipeline.ReadOptions{Schema: replay.ResultsSchema}) {
		if err != nil {
			t.Fatal(err)
		}
		rows, err := schemas.ReplayResults.Read(rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Group == "overall" {
				judged, missing = r.Judged, r.Missing
			}
		}
	}
	if judged+missing != rubricRows || judged == 0 {
		t.Errorf("overall: %d judged + %d missing, want %d with scores (yes/no mode)", judged, missing, rubricRows)
	}
	paths, _ := filepath.Glob(filepath.Join(target, schemas.Judgments.Name, "*", "*", "*.parquet"))
	n, err := pipeline.CountRows(paths...)
	if err != nil || n != 2*rubricRows {
		t.Errorf("target judgments %d (%v), want %d", n, err, 2*rubricRows)
	}
	t.Logf("source tables %v; replayed %d (pair, rubric), %d judged", counts, rubricRows, judged)
	// A rerun resumes from the committed judgments and still leaves the source alone.
	if err := runReplay(t, target, env...); err != nil {
		t.Fatal(err)
	}
	if testutil.TreeHash(t, src, "_locks") != before {
		t.Fatal("the source run changed on rerun")
	}
}
