package dedup

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWorkersAndPartitionsAreVolatile: workers and partitions are memory
// and speed knobs. The sample deduplicated with one worker and one spill
// partition equals the same with three workers and seven partitions, and a
// run committed with the first settings reruns under the second without
// --fresh.
func TestWorkersAndPartitionsAreVolatile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	one := map[string]string{KeyInput: samplePath(t), KeyWorkers: "1", KeyPartitions: "1"}
	many := map[string]string{KeyInput: samplePath(t), KeyWorkers: "3", KeyPartitions: "7"}
	if err := runStage(t, a, one); err != nil {
		t.Fatal(err)
	}
	if err := runStage(t, b, many); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(readPrompts(t, a), readPrompts(t, b)); d != "" {
		t.Errorf("prompts differ (-1 worker, 1 partition +3 workers, 7 partitions):\n%s", d)
	}
	if d := cmp.Diff(readReport(t, a), readReport(t, b)); d != "" {
		t.Errorf("dedup_report differs:\n%s", d)
	}
	if err := runStage(t, a, many); err != nil {
		t.Errorf("rerun with other workers and partitions: %v", err)
	}
}
