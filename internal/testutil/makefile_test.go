package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The first make reads the Makefile before the venv (and so the libtorch
// version) exists; the torch stamp its recipe writes must still be the one
// the next make looks for, or that make rebuilds the gotch layer once.
func TestTorchStampIsTheNextMakes(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := Root(t)
	lib := filepath.Join(t.TempDir(), "torch")
	// First make: no version.py when the Makefile is read; the recipe (as
	// the venv's pip install would) creates it before naming the stamp.
	first := exec.Command("make", "-s", "-f", filepath.Join(root, "Makefile"), "LIBTORCH="+lib,
		"--eval", `stamp-now: ; @mkdir -p $(LIBTORCH) && printf "__version__ = '2.1.0'\n" > $(LIBTORCH)/version.py && echo $(TORCH_STAMP_NOW)`, "stamp-now")
	first.Dir = root
	out1, err := first.CombinedOutput()
	if err != nil {
		t.Fatalf("first make: %v\n%s", err, out1)
	}
	if _, err := os.Stat(filepath.Join(lib, "version.py")); err != nil {
		t.Fatal(err)
	}
	second := exec.Command("make", "-s", "-f", filepath.Join(root, "Makefile"), "LIBTORCH="+lib,
		"--eval", `stamp: ; @echo $(TORCH_STAMP)`, "stamp")
	second.Dir = root
	out2, err := second.CombinedOutput()
	if err != nil {
		t.Fatalf("second make: %v\n%s", err, out2)
	}
	a, b := strings.TrimSpace(string(out1)), strings.TrimSpace(string(out2))
	if a == "" || a != b {
		t.Errorf("the first make stamps %q, the next looks for %q", a, b)
	}
}
