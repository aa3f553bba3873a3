package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/schemas/schematest"
)

// testStage is a test double registered as "testcopy": it writes `shards`
// shards of `rows` generated steps rows each, one per step partition, and
// records which shards it wrote. failAt makes the Write of that shard fail.
type testStage struct {
	shards, rows int
	failRows     bool // every row "fails on the model backend" (Env.Failures)
}

var (
	testMu      sync.Mutex
	testWritten []int
	testFailAt  = -1
)

func init() {
	pipeline.Register(pipeline.Spec{
		Name:        "testcopy",
		Summary:     "test double: writes generated steps rows",
		Description: "Used by the pipeline tests only.",
		Outputs:     []string{"steps"},
		Fields: []pipeline.Field{
			{Key: "shards", Type: pipeline.TypeInt, Default: 4, Description: "shards to write"},
			{Key: "rows", Type: pipeline.TypeInt, Default: 50, Description: "rows per shard"},
			{Key: "threshold", Type: pipeline.TypeFloat, Default: 0.5, Description: "a float", Example: 0.8},
			{Key: "mode", Type: pipeline.TypeString, Default: "fast", Enum: []string{"fast", "exact"}, Description: "an enum"},
			{Key: "sources", Type: pipeline.TypeStrings, Default: []string{"a", "b"}, Description: "a list"},
			{Key: "timeout", Type: pipeline.TypeDuration, Default: "30s", Description: "a duration"},
			{Key: "verbose", Type: pipeline.TypeBool, Default: false, Description: "a bool"},
			{Key: "fail_rows", Type: pipeline.TypeBool, Default: false, Description: "record every row as failed on the model backend"},
		},
		Volatile: []string{"verbose", "fail_rows"},
		New:      newTestStageFromConfig,
	})
}

func newTestStageFromConfig(cfg *pipeline.Config) (pipeline.Stage, error) {
	s := &testStage{shards: cfg.Int("shards"), rows: cfg.Int("rows"), failRows: cfg.Bool("fail_rows")}
	if s.shards < 1 {
		return nil, cfg.Errorf("shards", "must be ≥ 1, got %d", s.shards)
	}
	return s, nil
}

func (s *testStage) Run(ctx context.Context, env *pipeline.Env) error {
	var tasks []pipeline.Task
	for i := range s.shards {
		tasks = append(tasks, pipeline.Task{
			Output: pipeline.ShardPath("steps", 0, pipeline.Phase("policy"), pipeline.Step(i)),
			Schema: schemas.Steps.Schema(),
			Rows:   int64(s.rows),
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				testMu.Lock()
				fail := i == testFailAt
				testMu.Unlock()
				if fail {
					return fmt.Errorf("injected failure")
				}
				if s.failRows {
					env.Failures.Add(s.rows, s.rows, "injected backend failure")
				}
				rows := schematest.Steps(s.rows)
				for k := range rows {
					rows[k].Step = int64(i)
				}
				rec := schemas.Steps.Build(env.Mem, rows)
				defer rec.Release()
				if err := w.Write(rec); err != nil {
					return err
				}
				testMu.Lock()
				testWritten = append(testWritten, i)
				testMu.Unlock()
				return nil
			},
		})
	}
	return env.MapShards(ctx, tasks)
}

func resetTestStage(failAt int) {
	testMu.Lock()
	defer testMu.Unlock()
	testWritten, testFailAt = nil, failAt
}

func written() []int {
	testMu.Lock()
	defer testMu.Unlock()
	out := append([]int(nil), testWritten...)
	sort.Ints(out)
	return out
}

func runTestStage(t *testing.T, mem memory.Allocator, dir string, env ...string) error {
	t.Helper()
	cfg := loadConfig(t, append([]string{"EVOLM_RUN_DIR=" + dir, "EVOLM_PIPELINE_PROGRESS=off", "EVOLM_PIPELINE_PARALLELISM=1"}, env...)...)
	return pipeline.RunStage(context.Background(), "testcopy", cfg, pipeline.RunOptions{Mem: mem, Log: quietLog})
}

func TestRunStageResume(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	run, err := pipeline.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A stale temp file from an earlier crash is cleaned on start.
	stale := filepath.Join(dir, "steps", "phase=policy", "step=3", ".part-00000.parquet.0a1b2c.tmp")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	staleManifest := filepath.Join(dir, "_manifests", ".testcopy.json.42.tmp")
	if err := os.WriteFile(staleManifest, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}

	resetTestStage(2)
	err = runTestStage(t, mem, dir)
	if err == nil || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), "step=2") {
		t.Fatalf("first run: err = %v, want the injected failure naming the shard", err)
	}
	for _, p := range []string{stale, staleManifest} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale temp file %s still there: %v", p, err)
		}
	}
	if diff := cmp.Diff([]int{0, 1}, written()); diff != "" {
		t.Errorf("first run wrote (-want +got):\n%s", diff)
	}
	m, err := run.Manifest("testcopy")
	if err != nil {
		t.Fatal(err)
	}
	wantPaths := []string{"steps/phase=policy/step=0/part-00000.parquet", "steps/phase=policy/step=1/part-00000.parquet"}
	if diff := cmp.Diff(wantPaths, m.Paths("steps")); diff != "" {
		t.Errorf("manifest after failure (-want +got):\n%s", diff)
	}

	// The rerun skips committed shards and writes the rest.
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2, 3}, written()); diff != "" {
		t.Errorf("rerun wrote (-want +got):\n%s", diff)
	}
	m, err = run.Manifest("testcopy")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Shards) != 4 || m.Rows("steps") != 200 {
		t.Errorf("manifest: %d shards, %d rows; want 4, 200", len(m.Shards), m.Rows("steps"))
	}
	for _, s := range m.Shards {
		fp, err := pipeline.Fingerprint(run.Path(s.Path))
		if err != nil {
			t.Fatal(err)
		}
		if fp != "sha256:"+s.SHA256 {
			t.Errorf("%s: checksum %s, manifest says %s", s.Path, fp, s.SHA256)
		}
		rows := readRows(t, mem, schemas.Steps, run.Path(s.Path), 16)
		if int64(len(rows)) != s.Rows {
			t.Errorf("%s: %d rows, manifest says %d", s.Path, len(rows), s.Rows)
		}
	}
	// No temp files anywhere, manifests included.
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && pipeline.IsTemp(d.Name()) {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})

	// A third run has nothing to do, even with a volatile key changed.
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_VERBOSE=true"); err != nil {
		t.Fatal(err)
	}
	if got := written(); len(got) != 0 {
		t.Errorf("third run wrote %v, want nothing", got)
	}

	// Another config may not mix with these shards…
	err = runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_THRESHOLD=0.9")
	if err == nil || !strings.Contains(err.Error(), "--fresh") {
		t.Fatalf("run with another config: err = %v, want a refusal naming --fresh", err)
	}
	// …unless asked to start fresh.
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_THRESHOLD=0.9", "EVOLM_PIPELINE_FRESH=true"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3}, written()); diff != "" {
		t.Errorf("fresh run wrote (-want +got):\n%s", diff)
	}
}

func TestRunStageBadConfig(t *testing.T) {
	mem := newMem(t)
	err := runTestStage(t, mem, t.TempDir(), "EVOLM_STAGES_TESTCOPY_SHARDS=0")
	if err == nil || !strings.Contains(err.Error(), "config key stages.testcopy.shards (from env EVOLM_STAGES_TESTCOPY_SHARDS): must be ≥ 1") {
		t.Errorf("err = %v", err)
	}
}

// A shard whose inputs changed is redone; others are skipped.
func TestMapShardsInputs(t *testing.T) {
	mem := newMem(t)
	env := testEnv(t, mem, "testcopy", "EVOLM_PIPELINE_PARALLELISM=2")
	in := []string{filepath.Join(t.TempDir(), "a.txt"), filepath.Join(t.TempDir(), "b.txt")}
	for _, p := range in {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var ran []string
	tasks := func() []pipeline.Task {
		var ts []pipeline.Task
		for i, p := range in {
			ts = append(ts, pipeline.Task{
				Output: pipeline.ShardPath("steps", i), Schema: schemas.Steps.Schema(), Inputs: []string{p},
				Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
					mu.Lock()
					ran = append(ran, filepath.Base(p))
					mu.Unlock()
					rec := schemas.Steps.Build(env.Mem, schematest.Steps(3))
					defer rec.Release()
					return w.Write(rec)
				},
			})
		}
		return ts
	}
	if err := env.MapShards(context.Background(), tasks()); err != nil {
		t.Fatal(err)
	}
	// A fresh Env (as a rerun would have) sees b.txt changed.
	env2, err := pipeline.NewEnv("testcopy", env.Global, pipeline.RunOptions{Mem: mem, Log: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in[1], []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	ran = nil
	if err := env2.MapShards(context.Background(), tasks()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b.txt"}, ran); diff != "" {
		t.Errorf("rerun ran (-want +got):\n%s", diff)
	}
	// Provenance records the input fingerprint.
	r, err := pipeline.OpenShard(env.Run.Path(pipeline.ShardPath("steps", 1)), pipeline.ReadOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fp, _ := pipeline.Fingerprint(in[1])
	if got := r.Metadata()[pipeline.MetaInputs]; got != `["`+fp+`"]` {
		t.Errorf("inputs metadata %s, want [%s]", got, fp)
	}
	if got := r.Metadata()[pipeline.MetaStage]; got != "testcopy" {
		t.Errorf("stage metadata %q", got)
	}
}

func TestMapShardsCancel(t *testing.T) {
	mem := newMem(t)
	env := testEnv(t, mem, "testcopy", "EVOLM_PIPELINE_PARALLELISM=1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var tasks []pipeline.Task
	for i := range 5 {
		tasks = append(tasks, pipeline.Task{
			Output: pipeline.ShardPath("steps", i), Schema: schemas.Steps.Schema(),
			Write: func(ctx context.Context, w *pipeline.ShardWriter) error {
				if i == 1 {
					cancel()
					return ctx.Err()
				}
				return nil
			},
		})
	}
	err := env.MapShards(ctx, tasks)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	m, _ := env.Run.Manifest("testcopy")
	if diff := cmp.Diff([]string{"steps/part-00000.parquet"}, m.Paths("steps")); diff != "" {
		t.Errorf("committed (-want +got):\n%s", diff)
	}
	ents, _ := os.ReadDir(env.Run.Path("steps"))
	for _, e := range ents {
		if e.Name() != "part-00000.parquet" {
			t.Errorf("unexpected file %s", e.Name())
		}
	}
}

func TestRegisterRejects(t *testing.T) {
	// Register keeps errors instead of panicking; a bad spec never appears.
	if err := pipeline.RegistryErr(); err != nil {
		t.Fatalf("registry already has errors: %v", err)
	}
	t.Cleanup(pipeline.ResetRegistryErrs)
	bad := pipeline.Spec{Name: "Bad Name", New: newTestStageFromConfig}
	pipeline.Register(bad)
	if _, ok := pipeline.Lookup("Bad Name"); ok {
		t.Error("invalid spec registered")
	}
	if err := pipeline.RegistryErr(); err == nil || !strings.Contains(err.Error(), `stage name "Bad Name"`) {
		t.Errorf("RegistryErr = %v", err)
	}
	if _, err := pipeline.LoadConfig(pipeline.LoadOptions{}); err == nil {
		t.Error("LoadConfig ignores registry errors")
	}
	pipeline.Register(pipeline.Spec{Name: "testcopy", New: newTestStageFromConfig})
	if err := pipeline.RegistryErr(); err == nil || !strings.Contains(err.Error(), `"testcopy" registered twice`) {
		t.Errorf("duplicate: RegistryErr = %v", err)
	}
	pipeline.ResetRegistryErrs()
	pipeline.Register(pipeline.Spec{Name: "testvol", New: newTestStageFromConfig, Volatile: []string{"nope"}})
	if err := pipeline.RegistryErr(); err == nil || !strings.Contains(err.Error(), `volatile key "nope" is not a field`) {
		t.Errorf("bad volatile key: RegistryErr = %v", err)
	}
	pipeline.ResetRegistryErrs()
	pipeline.Register(pipeline.Spec{Name: "testbad", New: newTestStageFromConfig,
		Fields: []pipeline.Field{{Key: "n", Type: pipeline.TypeInt, Default: "x"}}})
	if err := pipeline.RegistryErr(); err == nil || !strings.Contains(err.Error(), `field "n" default`) {
		t.Errorf("bad default: RegistryErr = %v", err)
	}
}
