// Package testutil holds helpers shared by tests: where the project's Python
// references live and how to run them. Tests never skip when a reference is
// missing: `make test` installs every one, so a missing tool is a failure.
package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Root returns the repository root.
func Root(t testing.TB) string {
	t.Helper()
	if r := os.Getenv("EVOLM_ROOT"); r != "" {
		return r
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Python returns the venv interpreter that `make venv` provisions.
func Python(t testing.TB) string {
	t.Helper()
	p := os.Getenv("EVOLM_PYTHON")
	if p == "" {
		p = filepath.Join(Root(t), ".venv", "bin", "python")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("python reference interpreter %s not found: run `make venv` (or `make test`, which provisions it)", p)
	}
	return p
}

// RunPython runs a script from scripts/ (or an absolute path) with args and
// returns its stdout; stderr is shown on failure.
func RunPython(t testing.TB, script string, args ...string) []byte {
	t.Helper()
	if !filepath.IsAbs(script) {
		script = filepath.Join(Root(t), "scripts", script)
	}
	cmd := exec.Command(Python(t), append([]string{script}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python %s %v: %v\nstderr:\n%s", script, args, err, stderr.String())
	}
	return stdout.Bytes()
}
