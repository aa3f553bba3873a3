package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

func TestLockStage(t *testing.T) {
	run, err := pipeline.OpenRun(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := run.LockStage("dedup")
	if err != nil {
		t.Fatal(err)
	}
	// A second holder (here another descriptor of this process; another
	// process is the e2e suite's case) is refused with the holder's pid.
	_, err = run.LockStage("dedup")
	var le *pipeline.StageLockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want a StageLockedError naming pid %d", err, os.Getpid())
	}
	// Other stages are independent.
	unlockOther, err := run.LockStage("export")
	if err != nil {
		t.Fatal(err)
	}
	unlockOther()
	unlock()
	again, err := run.LockStage("dedup")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again()
}

func TestCleanTempKeepsLiveWriters(t *testing.T) {
	mem := newMem(t)
	run, err := pipeline.OpenRun(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	live, err := pipeline.CreateShard(run.Path("steps/part-00000.parquet"), schemas.Steps.Schema(), pipeline.WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	dead := run.Path("steps/.part-00001.parquet.0123456789ab.tmp") // a crashed writer's: no lock held
	if err := os.WriteFile(dead, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := run.CleanTemp("steps")
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("removed %d temp files, want 1 (the dead writer's)", n)
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dead writer's temp file still there: %v", err)
	}
	// The live writer still commits.
	rec := schemas.Steps.Build(mem, schematest.Steps(3))
	defer rec.Release()
	if err := live.Write(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := live.Commit(); err != nil {
		t.Fatalf("live writer's commit after a sweep: %v", err)
	}
}

// committedRun runs testcopy (shards of 50 steps rows, one per step
// partition) in a fresh run directory.
func committedRun(t *testing.T) *pipeline.Run {
	t.Helper()
	mem := newMem(t)
	dir := t.TempDir()
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_SHARDS=3"); err != nil {
		t.Fatal(err)
	}
	run, err := pipeline.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func TestCheckShard(t *testing.T) {
	step := func(i int) string { return pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(i)) }
	tests := []struct {
		name   string
		damage func(t *testing.T, run *pipeline.Run)
		want   string // in the error of CheckShard / inspect
	}{
		{"deleted", func(t *testing.T, run *pipeline.Run) {
			os.Remove(run.Path(step(1)))
		}, "file is gone"},
		{"swapped", func(t *testing.T, run *pipeline.Run) {
			b, _ := os.ReadFile(run.Path(step(2)))
			os.WriteFile(run.Path(step(1)), b, 0o644)
		}, "step=1/part-00000.parquet"},
		{"manifest rows edited", func(t *testing.T, run *pipeline.Run) {
			p := filepath.Join(run.Dir, "_manifests", "testcopy.json")
			var m pipeline.Manifest
			b, _ := os.ReadFile(p)
			json.Unmarshal(b, &m)
			m.Shards[1].Rows = 49
			b, _ = json.Marshal(m)
			os.WriteFile(p, b, 0o644)
		}, "50 rows, the manifest recorded 49"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := committedRun(t)
			var buf strings.Builder
			if err := pipeline.Inspect(context.Background(), &buf, run.Dir, pipeline.InspectOptions{}); err != nil {
				t.Fatalf("inspect before damage: %v\n%s", err, buf.String())
			}
			tc.damage(t, run)
			for _, verify := range []bool{false, true} {
				buf.Reset()
				err := pipeline.Inspect(context.Background(), &buf, run.Dir, pipeline.InspectOptions{Verify: verify})
				if !errors.Is(err, pipeline.ErrShardMismatch) || !strings.Contains(buf.String(), tc.want) || !strings.Contains(buf.String(), step(1)) {
					t.Errorf("inspect (verify %v): %v, want ErrShardMismatch listing %s with %q:\n%s", verify, err, step(1), tc.want, buf.String())
				}
			}
		})
	}
}

func TestVerifyListsStrays(t *testing.T) {
	run := committedRun(t)
	stray := run.Path("steps/phase=policy/step=0/part-00009.parquet")
	b, _ := os.ReadFile(run.Path(pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(0))))
	os.WriteFile(stray, b, 0o644)
	os.WriteFile(run.Path("steps/notes.txt"), []byte("x"), 0o644)
	var buf strings.Builder
	if err := pipeline.Inspect(context.Background(), &buf, run.Dir, pipeline.InspectOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stray files", "steps/phase=policy/step=0/part-00009.parquet", "steps/notes.txt", "verified (sha256, rows, partition): 3"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("inspect --verify lacks %q:\n%s", want, buf.String())
		}
	}
}

// A shard copied to another step=… directory keeps the step it was written
// with in its metadata; reading it back as the other step is an error.
func TestMovedPartitionIsAnError(t *testing.T) {
	run := committedRun(t)
	src := run.Path(pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(1)))
	dst := run.Path(pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(7)))
	os.MkdirAll(filepath.Dir(dst), 0o755)
	b, _ := os.ReadFile(src)
	os.WriteFile(dst, b, 0o644)
	_, err := pipeline.OpenShard(dst, pipeline.ReadOptions{Schema: schemas.Steps.Schema()})
	if err == nil || !strings.Contains(err.Error(), "written as partition step=1, found under step=7") {
		t.Fatalf("OpenShard of a moved shard: %v", err)
	}
}

// A stage input that is a committed shard must be the file its manifest
// recorded.
func TestMapShardsChecksCommittedInputs(t *testing.T) {
	run := committedRun(t)
	in := run.Path(pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(0)))
	other := run.Path(pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(2)))
	mem := newMem(t)
	cfg := loadConfig(t, "EVOLM_RUN_DIR="+run.Dir, "EVOLM_PIPELINE_PROGRESS=off")
	task := func() []pipeline.Task {
		return []pipeline.Task{{Output: "copy/part-00000.parquet", Schema: schemas.Steps.Schema(), Inputs: []string{in},
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error { return nil }}}
	}
	env, err := pipeline.NewEnv("reader", cfg, pipeline.RunOptions{Mem: mem, Log: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.MapShards(context.Background(), task()); err != nil {
		t.Fatalf("intact input: %v", err)
	}
	b, _ := os.ReadFile(other)
	os.WriteFile(in, b, 0o644)
	env, _ = pipeline.NewEnv("reader2", cfg, pipeline.RunOptions{Mem: mem, Log: quietLog})
	err = env.MapShards(context.Background(), task())
	if !errors.Is(err, pipeline.ErrShardMismatch) || !strings.Contains(err.Error(), in) {
		t.Fatalf("swapped input: %v, want ErrShardMismatch naming %s", err, in)
	}
}
