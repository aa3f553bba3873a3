//go:build e2e

package notebooks_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestE2EEvalNotebookSkipsWithoutEval: on a run where `evolm eval` has not
// run (as after `make demo`), the eval notebook says so and runs to the end
// instead of failing on the missing table.
func TestE2EEvalNotebookSkipsWithoutEval(t *testing.T) {
	root := testutil.Root(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	if err := os.MkdirAll(filepath.Join(run, "_manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
		"--ExecutePreprocessor.kernel_name=python3", "--ExecutePreprocessor.timeout=-1", "--output-dir", filepath.Join(tmp, "nb"),
		filepath.Join(root, "notebooks", "eval.ipynb"))
	cmd.Env = append(os.Environ(), "EVOLM_RUN_DIR="+run, "EVOLM_FIG_DIR="+filepath.Join(tmp, "figs"), "MPLBACKEND=Agg")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbconvert eval.ipynb on a run without eval_results: %v\n%s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(tmp, "nb", "eval.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "has no eval_results table") {
		t.Errorf("the executed notebook does not say why it skipped")
	}
}
