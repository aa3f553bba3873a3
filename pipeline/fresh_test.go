package pipeline_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
)

// snapshot returns every regular file under dir by run-relative path with
// its bytes, leaving out the lock files and the staging folder.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel == pipeline.LocksDir || rel == pipeline.FreshDir {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, what string, want, got map[string][]byte) {
	t.Helper()
	for p, b := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s is gone", what, p)
		} else if !bytes.Equal(b, g) {
			t.Errorf("%s: %s changed", what, p)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
}

// A failed --fresh leaves the old output byte for byte as it was; rerunning
// it resumes beside the old output and swaps the new one in once complete.
func TestFreshFailureKeepsOldOutput(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir); err != nil {
		t.Fatal(err)
	}
	old := snapshot(t, dir)

	// The new config writes 2 shards; the second fails.
	fresh := []string{"EVOLM_STAGES_TESTCOPY_SHARDS=2", "EVOLM_STAGES_TESTCOPY_THRESHOLD=0.9", "EVOLM_PIPELINE_FRESH=true"}
	resetTestStage(1)
	err := runTestStage(t, mem, dir, fresh...)
	if err == nil || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), "previous output is untouched") {
		t.Fatalf("failed fresh run: err = %v", err)
	}
	sameFiles(t, "after a failed --fresh", old, snapshot(t, dir))

	// The same command without --fresh resumes the staged output: shard 0
	// is not redone, and only then is the old output replaced.
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir, fresh[:2]...); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1}, written()); diff != "" {
		t.Errorf("resumed fresh run wrote (-want +got):\n%s", diff)
	}
	run, err := pipeline.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := run.Manifest("testcopy")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"steps/phase=policy/step=0/part-00000.parquet", "steps/phase=policy/step=1/part-00000.parquet"}
	if diff := cmp.Diff(want, m.Paths("steps")); diff != "" {
		t.Errorf("manifest after the swap (-want +got):\n%s", diff)
	}
	for _, gone := range []string{"steps/phase=policy/step=2/part-00000.parquet", pipeline.FreshDir} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after the swap: %v", gone, err)
		}
	}
	for _, s := range m.Shards {
		if err := run.VerifyShard(s); err != nil {
			t.Error(err)
		}
	}
}

// A --fresh whose every model row failed discards its staged output and
// leaves the old one as it was.
func TestFreshAllRowsFailedKeepsOldOutput(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	resetTestStage(-1)
	if err := runTestStage(t, mem, dir); err != nil {
		t.Fatal(err)
	}
	old := snapshot(t, dir)
	resetTestStage(-1)
	err := runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_FAIL_ROWS=true", "EVOLM_PIPELINE_FRESH=true")
	if !errors.Is(err, pipeline.ErrAllRowsFailed) || !strings.Contains(err.Error(), "previous one is untouched") {
		t.Fatalf("err = %v, want ErrAllRowsFailed", err)
	}
	sameFiles(t, "after a --fresh whose rows all failed", old, snapshot(t, dir))
	if _, err := os.Stat(filepath.Join(dir, pipeline.FreshDir, "testcopy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staged output kept: %v", err)
	}
}

// freshCrashEnv names the run directory of the child process that
// TestFreshSwapCrash kills in the middle of a swap.
const freshCrashEnv = "EVOLM_TEST_FRESH_CRASH_DIR"

// TestFreshSwapCrashChild runs in the child process only: a --fresh run of
// testcopy that a failpoint kills during its swap.
func TestFreshSwapCrashChild(t *testing.T) {
	dir := os.Getenv(freshCrashEnv)
	if dir == "" {
		t.Skip("the child of TestFreshSwapCrash")
	}
	resetTestStage(-1)
	_ = runTestStage(t, newMem(t), dir, "EVOLM_STAGES_TESTCOPY_SHARDS=3", "EVOLM_PIPELINE_FRESH=true")
	t.Fatal("the failpoint did not fire")
}

// A crash in the middle of the swap (SIGKILL after the journal, and after
// the first file renamed) is completed by the stage's next run, which then
// has nothing left to do.
func TestFreshSwapCrash(t *testing.T) {
	for _, point := range []string{"fresh-swap", "fresh-swap-file"} {
		t.Run(point, func(t *testing.T) {
			mem := newMem(t)
			dir := t.TempDir()
			resetTestStage(-1)
			if err := runTestStage(t, mem, dir); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestFreshSwapCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), freshCrashEnv+"="+dir, "EVOLM_FAILPOINT="+point)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != -1 {
				t.Fatalf("child: %v, want killed by the failpoint\n%s", err, out)
			}
			resetTestStage(-1)
			if err := runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_SHARDS=3"); err != nil {
				t.Fatal(err)
			}
			if got := written(); len(got) != 0 {
				t.Errorf("the run after the crash wrote %v, want nothing (the swap completed)", got)
			}
			run, _ := pipeline.OpenRun(dir)
			m, err := run.Manifest("testcopy")
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Shards) != 3 {
				t.Errorf("manifest lists %d shards, want 3", len(m.Shards))
			}
			for _, s := range m.Shards {
				if err := run.VerifyShard(s); err != nil {
					t.Error(err)
				}
			}
			if _, err := os.Stat(run.Path("steps/phase=policy/step=3/part-00000.parquet")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("old shard 3 still there: %v", err)
			}
		})
	}
}

// A resumed run whose every model row failed removes the shards it
// committed, and keeps those committed before it.
func TestAllRowsFailedKeepsEarlierShards(t *testing.T) {
	mem := newMem(t)
	dir := t.TempDir()
	resetTestStage(2)
	if err := runTestStage(t, mem, dir); err == nil {
		t.Fatal("first run: want the injected failure")
	}
	resetTestStage(-1)
	err := runTestStage(t, mem, dir, "EVOLM_STAGES_TESTCOPY_FAIL_ROWS=true")
	if !errors.Is(err, pipeline.ErrAllRowsFailed) || !strings.Contains(err.Error(), "the 2 committed before it are kept") {
		t.Fatalf("err = %v", err)
	}
	run, _ := pipeline.OpenRun(dir)
	m, err := run.Manifest("testcopy")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"steps/phase=policy/step=0/part-00000.parquet", "steps/phase=policy/step=1/part-00000.parquet"}
	if diff := cmp.Diff(want, m.Paths("steps")); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(run.Path("steps/phase=policy/step=2/part-00000.parquet")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed row's shard is still there: %v", err)
	}
}
