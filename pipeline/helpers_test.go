package pipeline_test

import (
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/evolm/evolm/pipeline"
)

// newMem returns a checked allocator that the test asserts is back to 0
// bytes at its end.
func newMem(t *testing.T) *memory.CheckedAllocator {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// loadConfig merges the defaults with env-style overrides ("KEY=VALUE").
func loadConfig(t *testing.T, env ...string) *pipeline.Config {
	t.Helper()
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testEnv is an Env for stage in a fresh run directory, with progress off.
func testEnv(t *testing.T, mem memory.Allocator, stage string, env ...string) *pipeline.Env {
	t.Helper()
	dir := t.TempDir()
	cfg := loadConfig(t, append([]string{"EVOLM_RUN_DIR=" + dir, "EVOLM_PIPELINE_PROGRESS=off"}, env...)...)
	e, err := pipeline.NewEnv(stage, cfg, pipeline.RunOptions{Mem: mem, Log: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// quietLog drops the runner's log lines in tests.
var quietLog = slog.New(slog.DiscardHandler)
