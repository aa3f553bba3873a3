package datasets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/evolm/evolm/internal/testutil"
)

// A file lacking several required columns is reported once, naming every
// missing column and the file, with the way to do without chosen/rejected.
func TestMissingColumnsAllAtOnce(t *testing.T) {
	dir := t.TempDir()
	type onlyID struct {
		ID string `parquet:"id"`
	}
	pq := filepath.Join(dir, "mine.parquet")
	if err := parquet.WriteFile(pq, []onlyID{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	jl := filepath.Join(dir, "mine.jsonl")
	if err := os.WriteFile(jl, []byte(`{"id":"a","prompt":"hi"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		opts Options
		want []string
	}{
		{pq, Options{}, []string{"mine.parquet", `columns "prompt", "source", "chosen", "rejected": missing`, "--messages=false"}},
		{pq, Options{PromptsOnly: true}, []string{"mine.parquet", `columns "prompt", "source": missing`}},
		{jl, Options{}, []string{"mine.jsonl", "row 0", `columns "source", "chosen", "rejected": missing`, "--messages=false"}},
		{jl, Options{PromptsOnly: true}, []string{"mine.jsonl", `column "source": missing`}},
	} {
		_, err := ReadAll([]string{tc.path}, tc.opts)
		testutil.ErrorContains(t, err, "ReadAll succeeded", tc.want...)
	}
}
