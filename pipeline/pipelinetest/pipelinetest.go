// Package pipelinetest holds helpers shared by the tests of stages: build a
// stage from config values, run one as the CLI does, write and read typed
// shards, and open a run's manifest. Each fails the test on an error.
package pipelinetest

import (
	"context"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
)

// FromConfig builds a stage's value with build from the config of stage
// with values set (pipeline.StageConfig).
func FromConfig[S any](t testing.TB, stage string, values map[string]any, build func(*pipeline.Config) (S, error)) S {
	t.Helper()
	cfg, err := pipeline.StageConfig(stage, values)
	if err != nil {
		t.Fatal(err)
	}
	s, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// RunStage runs the registered stage over the run directory runDir, as the
// CLI does: its config values (keys below stages.<stage>) are set through
// the environment, progress is off, stderr discarded, and the allocator is
// checked for leaks. The stage's error is returned.
func RunStage(t testing.TB, stage, runDir string, values map[string]string) error {
	t.Helper()
	env := []string{"EVOLM_RUN_DIR=" + runDir, "EVOLM_PIPELINE_PROGRESS=off"}
	for k, v := range values {
		env = append(env, pipeline.EnvName("stages."+stage+"."+k)+"="+v)
	}
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: env})
	if err != nil {
		return err
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	return pipeline.RunStage(context.Background(), stage, cfg, pipeline.RunOptions{Mem: mem, Stderr: io.Discard})
}

// WriteRows writes rows of tbl as one committed shard at path.
func WriteRows[T any](t testing.TB, mem memory.Allocator, path string, tbl *schemas.Table[T], rows []T) {
	t.Helper()
	rec := tbl.Build(mem, rows)
	defer rec.Release()
	WriteShard(t, mem, path, tbl.Schema(), rec)
}

// WriteShard writes recs as one committed shard of schema at path.
func WriteShard(t testing.TB, mem memory.Allocator, path string, schema *arrow.Schema, recs ...arrow.RecordBatch) {
	t.Helper()
	w, err := pipeline.CreateShard(path, schema, pipeline.WriteOptions{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

// ReadRows reads every batch of the shard at path (opts as for
// pipeline.ReadShard) as rows of tbl.
func ReadRows[T any](t testing.TB, path string, tbl *schemas.Table[T], opts pipeline.ReadOptions) []T {
	t.Helper()
	var out []T
	for rec, err := range pipeline.ReadShard(context.Background(), path, opts) {
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tbl.Read(rec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}

// Manifest opens the run directory dir and reads stage's manifest in it.
func Manifest(t testing.TB, dir, stage string) (*pipeline.Run, *pipeline.Manifest) {
	t.Helper()
	r, err := pipeline.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Manifest(stage)
	if err != nil {
		t.Fatalf("manifest of %s: %v", stage, err)
	}
	return r, m
}
