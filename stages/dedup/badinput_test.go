package dedup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/pipeline"
)

// TestStageBadInput: every bad input fails the stage with an error naming the
// file and the column (or what is wrong), and nothing is committed: no
// manifest entry and no visible shard.
func TestStageBadInput(t *testing.T) {
	dir := t.TempDir()
	testutil.RunPython(t, "dedup_tulu_fixtures.py", dir)
	invalid := filepath.Join(dir, "bad_utf8.jsonl")
	os.WriteFile(invalid, []byte("{\"id\":\"a\",\"prompt\":\"ok\",\"chosen\":[],\"rejected\":[],\"source\":\"s\"}\n{\"id\":\"b\",\"prompt\":\"\xff\",\"chosen\":[],\"rejected\":[],\"source\":\"s\"}\n"), 0o644)
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"bad_corrupt.parquet", []string{"corrupt"}},
		{"bad_missing_column.parquet", []string{`column "prompt"`, "missing"}},
		{"bad_wrong_type.parquet", []string{`column "prompt"`, "wrong type"}},
		{"bad_chosen_type.parquet", []string{`column "chosen"`, "wrong type"}},
		{"bad_null_prompt.parquet", []string{"row 2", `column "prompt"`, "null"}},
		{"bad_utf8.parquet", []string{"row 1", `column "prompt"`, "invalid UTF-8"}},
		{"bad_utf8.jsonl", []string{"row 1", `column "prompt"`, "invalid UTF-8"}},
		{"empty.parquet", []string{"empty input"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			run := t.TempDir()
			// A good file first: the bad one is found before anything commits,
			// even though the good file alone would fill a shard.
			in := filepath.Join(dir, "tulu.parquet") + "," + filepath.Join(dir, tc.file)
			err := runStage(t, run, map[string]string{KeyInput: in, KeyShardRows: "1"})
			testutil.ErrorContains(t, err, "the stage succeeded", append(tc.want, tc.file)...)
			r, _ := pipeline.OpenRun(run)
			m, err := r.Manifest(Name)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Shards) != 0 {
				t.Errorf("manifest lists %d shards after a failed run", len(m.Shards))
			}
			for _, table := range []string{"prompts", "dedup_report"} {
				if files, _ := filepath.Glob(filepath.Join(run, table, "*")); len(files) > 0 {
					t.Errorf("%s holds %v after a failed run", table, files)
				}
			}
		})
	}
}
