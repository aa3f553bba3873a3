//go:build e2e

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
)

// TestConfigReferenceIsCurrent: docs/config-reference.md is what the built
// evolm prints with `config reference` (the binary, not this test, whose
// test-only registrations would show up).
func TestConfigReferenceIsCurrent(t *testing.T) {
	root := testutil.Root(t)
	bin := testutil.BuildEvolm(t, t.TempDir())
	got, err := exec.Command(bin, "config", "reference").Output()
	if err != nil {
		t.Fatalf("evolm config reference: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(root, "docs", "config-reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("docs/config-reference.md is stale: regenerate it with `bin/evolm config reference > docs/config-reference.md`")
	}
}
