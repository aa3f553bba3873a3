// Package notebooks_test checks the Jupyter notebooks of notebooks/: that
// they are what scripts/notebooks_build.py writes (this file) and that they
// run headless against a run directory (notebooks_e2e_test.go, tag e2e).
package notebooks_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestNotebooksCurrent rebuilds the notebooks from scripts/notebooks_build.py
// and checks the committed ones are identical: edit the script, not the JSON.
func TestNotebooksCurrent(t *testing.T) {
	dir := t.TempDir()
	testutil.RunPython(t, "notebooks_build.py", dir)
	root := testutil.Root(t)
	built, _ := filepath.Glob(filepath.Join(dir, "*.ipynb"))
	if len(built) == 0 {
		t.Fatal("notebooks_build.py wrote no notebook")
	}
	for _, b := range built {
		want, _ := os.ReadFile(b)
		got, err := os.ReadFile(filepath.Join(root, "notebooks", filepath.Base(b)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("notebooks/%s differs from what scripts/notebooks_build.py writes: run it and commit", filepath.Base(b))
		}
	}
}
