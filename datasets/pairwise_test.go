package datasets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
)

// writePyarrow runs a pyarrow snippet that writes the Parquet file at the
// path in variable OUT: the published benchmarks are written by pyarrow
// (HF datasets), so the fixtures are too.
func writePyarrow(t *testing.T, dir, name, body string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	script := filepath.Join(dir, name+".py")
	src := "import sys\nimport pyarrow as pa\nimport pyarrow.parquet as pq\nOUT = sys.argv[1]\n" + body
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.RunPython(t, script, out)
	return out
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkedMem(t *testing.T) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

func TestLoadPairwise(t *testing.T) {
	dir := t.TempDir()
	strs := writePyarrow(t, dir, "strings.parquet", `
pq.write_table(pa.table({
    "prompt": ["p0", "p1"],
    "chosen": ["good0", "good1"],
    "rejected": ["bad0", "bad1"],
    "subset": ["s", "t"],
}), OUT)
`)
	convs := writePyarrow(t, dir, "convs.parquet", `
msg = pa.struct([("content", pa.string()), ("role", pa.string())])
pq.write_table(pa.table({
    "id": pa.array([7], pa.int64()),
    "chosen": pa.array([[{"content": "q", "role": "user"}, {"content": "good", "role": "assistant"}]], pa.list_(msg)),
    "rejected": pa.array([[{"content": "q", "role": "user"}, {"content": "bad", "role": "assistant"}]], pa.list_(msg)),
    "source": ["src"],
}), OUT)
`)
	jsonl := writeFile(t, dir, "p.jsonl", `{"id": "a", "prompt": "p", "chosen": "c", "rejected": "r"}`+"\n\n"+
		`{"id": 3, "prompt": "p2", "chosen": [{"role": "user", "content": "p2"}, {"role": "assistant", "content": "c2"}], "rejected": "r2"}`+"\n")
	got, err := LoadPairwise(checkedMem(t), []string{strs, convs, jsonl})
	if err != nil {
		t.Fatal(err)
	}
	want := []PairwiseItem{
		{ID: strs + ":0", Prompt: "p0", Chosen: "good0", Rejected: "bad0", Subset: "s"},
		{ID: strs + ":1", Prompt: "p1", Chosen: "good1", Rejected: "bad1", Subset: "t"},
		{ID: "7", Prompt: "q", Chosen: "good", Rejected: "bad", Subset: "src"},
		{ID: "a", Prompt: "p", Chosen: "c", Rejected: "r", Subset: "all"},
		{ID: "3", Prompt: "p2", Chosen: "c2", Rejected: "r2", Subset: "all"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("items (-want +got):\n%s", d)
	}
}

func TestLoadPairwiseBadLayout(t *testing.T) {
	dir := t.TempDir()
	noRejected := writePyarrow(t, dir, "norej.parquet", `
pq.write_table(pa.table({"prompt": ["p"], "chosen": ["c"]}), OUT)
`)
	_, err := LoadPairwise(checkedMem(t), []string{noRejected})
	testutil.ErrorContains(t, err, "the load succeeded", noRejected, `column "rejected": missing`)

	intChosen := writePyarrow(t, dir, "intchosen.parquet", `
pq.write_table(pa.table({"prompt": ["p"], "chosen": [1], "rejected": ["r"]}), OUT)
`)
	_, err = LoadPairwise(checkedMem(t), []string{intChosen})
	testutil.ErrorContains(t, err, "the load succeeded", intChosen, `column "chosen": wrong type int64`)

	nullPrompt := writePyarrow(t, dir, "nullchosen.parquet", `
pq.write_table(pa.table({"prompt": ["p", "q"], "chosen": ["c", None], "rejected": ["r", "s"]}), OUT)
`)
	_, err = LoadPairwise(checkedMem(t), []string{nullPrompt})
	testutil.ErrorContains(t, err, "the load succeeded", nullPrompt, `row 1 column "chosen": null value`)

	badJSON := writeFile(t, dir, "bad.jsonl", `{"prompt": "p", "chosen": "c", "rejected": "r"}`+"\n"+`{"prompt": "p", "chosen": 5, "rejected": "r"}`+"\n")
	_, err = LoadPairwise(nil, []string{badJSON})
	testutil.ErrorContains(t, err, "the load succeeded", badJSON, "row 1 (line 2)", `column "chosen": wrong type`)

	noPrompt := writeFile(t, dir, "noprompt.jsonl", `{"chosen": "c", "rejected": "r"}`+"\n")
	_, err = LoadPairwise(nil, []string{noPrompt})
	testutil.ErrorContains(t, err, "the load succeeded", noPrompt, "no prompt column")
}
