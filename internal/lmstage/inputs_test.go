package lmstage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParquetFilesWalksDirectories: a directory input is every .parquet file
// below it, sorted, without hidden or "_" bookkeeping entries; a file is
// itself; an empty directory is an error naming it.
func TestParquetFilesWalksDirectories(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b/part-00001.parquet", "a/step=0/part-00000.parquet", "_manifests/x.parquet", ".part-00002.parquet.tmp", "a/.hidden.parquet", "notes.txt"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := parquetFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a/step=0/part-00000.parquet"), filepath.Join(dir, "b/part-00001.parquet")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if got, err := parquetFiles(want[1]); err != nil || len(got) != 1 || got[0] != want[1] {
		t.Errorf("a file: %v, %v", got, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := parquetFiles(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("empty directory: %v", err)
	}
}
