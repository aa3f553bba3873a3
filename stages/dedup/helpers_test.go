package dedup

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/evolm/evolm/datasets"
	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/pipeline/pipelinetest"
	"github.com/evolm/evolm/schemas"
)

// samplePath is the committed sample set.
func samplePath(t testing.TB) string {
	return filepath.Join(testutil.Root(t), datasets.SamplePath)
}

// writeJSONL writes prompts as a Tulu-layout JSONL file (ids "r<row>").
func writeJSONL(t testing.TB, dir string, prompts []string) string {
	t.Helper()
	rows := make([]datasets.TuluRow, len(prompts))
	for i, p := range prompts {
		rows[i] = datasets.TuluRow{ID: "r" + strconv.Itoa(i), Prompt: p, Source: "test/chat"}
	}
	path := filepath.Join(dir, "in.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := datasets.WriteJSONL(f, rows); err != nil {
		t.Fatal(err)
	}
	return path
}

// runStage runs the registered dedup stage with config values over a run
// directory, as `evolm dedup` does, with a checked allocator.
func runStage(t testing.TB, runDir string, values map[string]string) error {
	t.Helper()
	return pipelinetest.RunStage(t, Name, runDir, values)
}

// readPrompts reads every prompts shard of a run, in shard order.
func readPrompts(t testing.TB, runDir string) []schemas.Prompt {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(runDir, "prompts", "*.parquet"))
	slices.Sort(paths)
	var out []schemas.Prompt
	for _, p := range paths {
		out = append(out, pipelinetest.ReadRows(t, p, schemas.Prompts, pipeline.ReadOptions{})...)
	}
	return out
}

// readReport reads the dedup_report table of a run.
func readReport(t testing.TB, runDir string) []schemas.DedupCluster {
	t.Helper()
	p := filepath.Join(runDir, pipeline.ShardPath(schemas.DedupReport.Name, 0))
	return pipelinetest.ReadRows(t, p, schemas.DedupReport, pipeline.ReadOptions{})
}
