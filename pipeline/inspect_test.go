package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// A committed shard moved to another step partition, with its manifest
// entry edited to match, is reported by inspect (and refused by every
// reader that checks shards), not counted as matching.
func TestInspectWrongPartition(t *testing.T) {
	run := committedRun(t)
	from := pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(1))
	to := pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(7))
	if err := os.MkdirAll(filepath.Dir(run.Path(to)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(run.Path(from), run.Path(to)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(run.Dir, "_manifests", "testcopy.json")
	b, _ := os.ReadFile(p)
	var m pipeline.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for i := range m.Shards {
		if m.Shards[i].Path == from {
			m.Shards[i].Path = to
		}
	}
	b, _ = json.Marshal(m)
	os.WriteFile(p, b, 0o644)
	for _, verify := range []bool{false, true} {
		var buf strings.Builder
		err := pipeline.Inspect(context.Background(), &buf, run.Dir, pipeline.InspectOptions{Verify: verify})
		if !errors.Is(err, pipeline.ErrShardMismatch) || !strings.Contains(buf.String(), "written as partition step=1, found under step=7") {
			t.Errorf("inspect (verify %v): %v, want the moved shard reported:\n%s", verify, err, buf.String())
		}
	}
	if _, err := run.TableShards("steps"); !errors.Is(err, pipeline.ErrShardMismatch) {
		t.Errorf("TableShards: %v, want ErrShardMismatch", err)
	}
}

// refRun commits a small run whose tables name each other: 4 rollouts, 2
// rubrics (of rollouts r0, r1; the second for pair p0), a pair p0 (r2 over
// r3) and judgments of r2 and of p0's a+; extra judgments name what the
// test wants.
func refRun(t *testing.T, extra ...[2]string) string {
	t.Helper()
	mem := newMem(t)
	env := testEnv(t, mem, "refs")
	rolls := schematest.Rollouts(4)
	for i := range rolls {
		rolls[i].RolloutID, rolls[i].Phase, rolls[i].Step = []string{"r0", "r1", "r2", "r3"}[i], "rubric", 0
	}
	pairs := schematest.Pairs(1)
	pairs[0].PairID, pairs[0].ChosenRolloutID, pairs[0].RejectedRolloutID, pairs[0].Step = "p0", "r2", "r3", 0
	rubs := schematest.Rubrics(2)
	for i := range rubs {
		rubs[i].RubricID, rubs[i].RolloutID, rubs[i].ItemID, rubs[i].Phase, rubs[i].Step = []string{"u0", "u1"}[i], []string{"r0", "r1"}[i], "p0", "rubric", 0
	}
	refs := append([][2]string{{"r2", "u0"}, {"p0/chosen", "u1"}}, extra...)
	judg := schematest.Judgments(len(refs))
	for i, r := range refs {
		judg[i].ResponseID, judg[i].RubricID, judg[i].Phase, judg[i].Step = r[0], r[1], "rubric", 0
	}
	parts := []pipeline.Partition{pipeline.Phase("rubric"), pipeline.Step(0)}
	task := func(table string, schema *arrow.Schema, build func() arrow.RecordBatch) pipeline.Task {
		return pipeline.Task{Output: pipeline.ShardPath(table, 0, parts...), Schema: schema, Write: pipeline.WriteBatch(build)}
	}
	err := env.MapShards(context.Background(), []pipeline.Task{
		task("rollouts", schemas.Rollouts.Schema(), func() arrow.RecordBatch { return schemas.Rollouts.Build(mem, rolls) }),
		task("pairs", schemas.Pairs.Schema(), func() arrow.RecordBatch { return schemas.Pairs.Build(mem, pairs) }),
		task("rubrics", schemas.Rubrics.Schema(), func() arrow.RecordBatch { return schemas.Rubrics.Build(mem, rubs) }),
		task("judgments", schemas.Judgments.Schema(), func() arrow.RecordBatch { return schemas.Judgments.Build(mem, judg) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env.Run.Dir
}

// inspect --verify follows the references between a run's tables and
// reports dangling ones by table, column and count.
func TestInspectVerifyReferences(t *testing.T) {
	var buf strings.Builder
	dir := refRun(t)
	if err := pipeline.Inspect(context.Background(), &buf, dir, pipeline.InspectOptions{Verify: true}); err != nil {
		t.Fatalf("intact run: %v\n%s", err, buf.String())
	}
	for _, want := range []string{"judgments.response_id → rollouts.rollout_id or pairs.pair_id: 2 rows, all found",
		"pairs.rejected_rollout_id → rollouts.rollout_id: 1 rows, all found", "rubrics.item_id (phase rubric) → pairs.pair_id: 2 rows, all found"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("inspect --verify lacks %q:\n%s", want, buf.String())
		}
	}

	buf.Reset()
	dir = refRun(t, [2]string{"r9", "u0"}, [2]string{"p0/rejected", "u7"}, [2]string{"p5/chosen", "u7"})
	err := pipeline.Inspect(context.Background(), &buf, dir, pipeline.InspectOptions{Verify: true})
	if !errors.Is(err, pipeline.ErrDanglingReference) {
		t.Fatalf("err = %v, want ErrDanglingReference\n%s", err, buf.String())
	}
	for _, want := range []string{
		`judgments.response_id → rollouts.rollout_id or pairs.pair_id: 2 of 5 rows name no row (e.g. "r9")`,
		`judgments.rubric_id → rubrics.rubric_id: 2 of 5 rows name no row (e.g. "u7")`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("inspect --verify lacks %q:\n%s", want, buf.String())
		}
	}
	for _, want := range []string{"judgments.response_id: 2 dangling", "judgments.rubric_id: 2 dangling"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
